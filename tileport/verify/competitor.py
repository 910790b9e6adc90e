"""The competitor chip as the benchmark: one run's implementation judged against another machine's run.

Cases are generated from seeds, so two machines draw the same inputs; every case's outcome records a digest of
its inputs, and a run that draws a different digest for a case id stops naming the case (a torch or numpy
version can change a draw). Every run keeps, per case, provider and output, what the benchmark side of the dual
benchmark needs (``Side``): its metrics against the golden and the positions and kinds of its inf/nan (clause
5.3.3), not the output itself. ``--benchmark-run RUN[:PROVIDER]`` judges this run's implementations against
RUN's PROVIDER in place of the same-dtype torch composite; a check that fails its first seed needs the
benchmark on the retest's seeds, which ``--retest-for`` runs on the benchmark's machine.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from ..precision import Metrics, dual_measure_batch, judge, measure
from ..precision.nonfinite import FINITE, NAN, NEG_INF, POS_INF, classes
from . import journal

_VALUES = {NAN: float("nan"), POS_INF: float("inf"), NEG_INF: float("-inf")}


class CompetitorError(ValueError):
    """A benchmark run that cannot serve this one (another operator or level, a missing provider), or a case
    whose inputs differ between the two machines; the message names the run, the case or the provider."""


def digest(inputs: dict) -> str:
    """A digest of a case's inputs: every tensor's dtype, shape and bytes, every other value's repr, by name."""
    h = hashlib.blake2b(digest_size=16)
    for name in sorted(inputs):
        v = inputs[name]
        h.update(name.encode())
        if isinstance(v, torch.Tensor):
            t = v.detach().cpu().contiguous()
            h.update(f"{t.dtype}{tuple(t.shape)}".encode())
            h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b"")
        else:
            h.update(repr(v).encode())
    return h.hexdigest()


@dataclass
class Side:
    """What one provider's output of one case (or one retest seed) leaves for a judge on another machine: its
    metrics against the golden alone, its shape, and where it holds inf/nan (flat positions, their classes).
    About half a kilobyte per output pickled in the run's journal, plus 5 bytes per inf/nan element."""

    metrics: Metrics
    shape: tuple[int, ...]
    positions: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    kinds: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int8))

    @classmethod
    def of(cls, out: torch.Tensor, gold: torch.Tensor, dtype: torch.dtype) -> Side:
        out = out.detach().cpu()
        m = measure(out, gold, dtype)
        c = classes(out.reshape(-1))
        where = torch.nonzero(c != FINITE).reshape(-1)
        small = np.int32 if out.numel() < 2**31 else np.int64
        return cls(m, tuple(out.shape), where.numpy().astype(small), c[where].numpy())

    def stand_in(self) -> torch.Tensor:
        """A tensor of this side's shape holding its inf/nan where it held them (zeros elsewhere): all the
        inf/nan rule needs of the benchmark."""
        t = torch.zeros(int(np.prod(self.shape, dtype=np.int64)), dtype=torch.float64)
        for kind, value in _VALUES.items():
            t[torch.from_numpy(self.positions[self.kinds == kind].astype(np.int64))] = value
        return t.reshape(self.shape)


def verdict(
    under: torch.Tensor, gold: torch.Tensor, bench: Side, limits: str, acc: str, dtype: torch.dtype, max_atol=None
):
    """The dual benchmark with ``bench`` (another machine's side) as the benchmark: this output measured with the
    inf/nan rule over the benchmark's positions, the ratios against the benchmark's own metrics."""
    if tuple(under.shape) != bench.shape:
        raise CompetitorError(f"output shape {tuple(under.shape)} here, {bench.shape} in the benchmark run")
    (a,), _ = dual_measure_batch(under.reshape(1, -1), bench.stand_in().reshape(1, -1), gold.reshape(1, -1), dtype)
    return judge(a, bench.metrics, limits, acc, dtype, max_atol)


@dataclass
class BenchmarkRun:
    """One or more run folders read as the benchmark: the first a verify run, the others ``--retest-for`` runs
    made for this one. ``sides[(case, provider, output)]``, ``retests[(case, provider, output, seed)]``."""

    folders: tuple[str, ...]
    request: dict
    environment: dict
    provider: str
    digests: dict[int, str]
    sides: dict
    retests: dict

    @property
    def outputs(self) -> set[str]:
        """The outputs the provider gave in that run (one it never gives is not judged here: listed)."""
        return {n for (_, _, n) in self.sides}

    @property
    def label(self) -> str:
        machine = self.environment.get("machine", "an unnamed machine")
        return (
            f"{self.provider} of run {self.folders[0]} ({machine}, {self.request.get('device', 'cpu')}, "
            f"{self.environment.get('date', '')})"
        )


def providers(outcomes) -> list[str]:
    return sorted({p for o in outcomes for (p, _) in getattr(o, "sides", {})})


def load(specs: list[str], op: str, level: str) -> BenchmarkRun:
    """The benchmark run(s) ``RUN[:PROVIDER]`` for a run of ``op`` at ``level``; CompetitorError naming the run
    and what was expected."""
    folders, provider = [], None
    for item in specs:
        folder, _, want = item.partition(":") if not Path(item).exists() else (item, "", "")
        folders.append(folder)
        provider = provider or want or None
    first = Path(folders[0])
    try:
        request = journal.read_request(first)
    except journal.JournalError as exc:
        raise CompetitorError(f"--benchmark-run {folders[0]}: {exc}") from None
    if request.get("retest_for"):
        raise CompetitorError(
            f"--benchmark-run {folders[0]} is a --retest-for run; give the verify run it serves first"
        )
    if request.get("op") != op or request.get("level") != level:
        raise CompetitorError(
            f"--benchmark-run {folders[0]} is a run of {request.get('op')} at {request.get('level')}; this is {op} "
            "at "
            f"{level}"
        )
    outcomes = list(journal.read(first).values())
    if not outcomes:
        raise CompetitorError(f"--benchmark-run {folders[0]}: its journal holds no finished case")
    found = providers(outcomes)
    impls = [p for p in found if p.startswith("impl:")]
    if provider is None:
        if len(impls) != 1:
            raise CompetitorError(
                f"--benchmark-run {folders[0]} holds {', '.join(found)}: name the one to use, --benchmark-run "
                f"{folders[0]}:PROVIDER"
            )
        provider = impls[0]
    elif provider not in found:
        raise CompetitorError(f"--benchmark-run {folders[0]} has no provider {provider!r}; it holds {', '.join(found)}")
    env = {}
    results = first / "results.json"
    if results.is_file():
        env = json.loads(results.read_text()).get("environment", {})
    digests = {o.index: o.digest for o in outcomes if getattr(o, "digest", "")}
    sides = {(o.index, p, n): s for o in outcomes for (p, n), s in getattr(o, "sides", {}).items() if p == provider}
    retests = {}
    for extra in folders[1:]:
        req = journal.read_request(Path(extra))
        if req.get("retest_for") is None or req.get("op") != op or req.get("level") != level:
            raise CompetitorError(f"--benchmark-run {extra}: not a --retest-for run of {op} at {level}")
        for o in journal.read(Path(extra)).values():
            retests |= {
                (o.index, p, n, seed): s for (p, n, seed), s in getattr(o, "retests", {}).items() if p == provider
            }
    return BenchmarkRun(tuple(folders), request, env, provider, digests, sides, retests)


def awaiting(outcomes) -> list[tuple[int, str, str]]:
    """(case, backend, output) of the checks awaiting the competitor's retest in a run's outcomes."""
    return [
        (r.case, r.backend, r.output) for o in outcomes for r in o.results if r.retest is not None and r.retest.awaiting
    ]
