"""The benchmark side of the dual benchmark, one small class per kind: ``Measured``, the same-dtype benchmark
computed here beside the golden, and ``Recorded``, another machine's run (``competitor``). The judge asks it for
an output's verdict and retest and never branches on which it is."""

from __future__ import annotations

from dataclasses import replace

import torch

from ..cases import Case, make_inputs
from ..precision import Metrics, Verdict, compare
from ..precision.retest import RetestResult, retest_stream, retest_verdicts
from . import competitor


def unjudged(limits: str, acc: str, failures: list[str]) -> Verdict:
    """A verdict with no metrics, only its findings (none: a check that is its findings, and had none)."""
    none = Metrics(0.0, 0.0, 0.0, 0, 0, 0)
    return Verdict(limits, none, none, {"mare": 0.0, "mere": 0.0, "rmse": 0.0, "small": 0.0}, failures, acc)


class Measured:
    """The benchmark backend run here in the case's dtype (``Judge.references``): an output's ratios against its
    metrics; a failed check retested over new seeds drawn and run here."""

    def check(self, case: Case, digest: str) -> None:
        """Nothing to match: the benchmark ran on these very inputs."""

    def lacks(self, name: str) -> str | None:
        """Why there is no benchmark for output ``name`` (never: the benchmark gives every output)."""
        return None

    def has(self, case: Case, name: str) -> bool:
        return True

    def verdict(self, j, name: str, case: Case, under, bm, gold, dtype: torch.dtype, seed=None) -> Verdict:
        return compare(under[name], gold[name], bm[name], j.limits, dtype, j.acc, j.max_atol)

    def retest(self, j, case: Case, name: str, backend: str, seeds: int, min_seeds: int, far: bool) -> RetestResult:
        return retest_stream(j.seed_verdicts(case, name, backend, seeds), seeds, min_seeds=min_seeds, far=far)


class Recorded:
    """Another machine's run as the benchmark (``--benchmark-run``): an output's ratios against the metrics that
    run recorded for the same case; a retest needs its sides on the new seeds (a ``--retest-for`` run), and
    awaits them until then. A case whose inputs drew differently here stops the run."""

    def __init__(self, run: competitor.BenchmarkRun):
        self.run = run

    def check(self, case: Case, digest: str) -> None:
        if self.run.digests.get(case.index, digest) != digest:
            raise competitor.CompetitorError(
                f"case {case.describe()}: its inputs here differ from those of benchmark run {self.run.folders[0]} "
                "(another digest): the two machines draw different values (torch or numpy versions?)"
            )

    def lacks(self, name: str) -> str | None:
        if name not in self.run.outputs:
            return f"no benchmark: {self.run.provider} gives no {name} in run {self.run.folders[0]}"
        return None

    def has(self, case: Case, name: str) -> bool:
        return (case.index, self.run.provider, name) in self.run.sides

    def verdict(self, j, name: str, case: Case, under, bm, gold, dtype: torch.dtype, seed=None) -> Verdict:
        p = self.run.provider
        side = (
            self.run.sides.get((case.index, p, name))
            if seed is None
            else self.run.retests.get((case.index, p, name, seed))
        )
        if side is None:
            return unjudged(
                j.limits,
                j.acc,
                [f"not in the benchmark run {self.run.folders[0]} ({p} has no {name} for this case): not judged"],
            )
        return competitor.verdict(under[name], gold[name], side, j.limits, j.acc, dtype, j.max_atol)

    def retest(self, j, case: Case, name: str, backend: str, seeds: int, min_seeds: int, far: bool) -> RetestResult:
        """Its sides on the new seeds where a --retest-for run brought them, else pending (not passed). Every seed
        runs: the run's sides of them all are at hand."""
        new = list(range(case.seed + 1, case.seed + 1 + seeds))
        if any((case.index, self.run.provider, name, s) not in self.run.retests for s in new):
            return RetestResult.pending(seeds)
        backward = j.backward_of(name)
        verdicts = []
        for s in new:  # the recorded side stands for the benchmark: only the golden and the backend run here
            inputs = make_inputs(j.suite, replace(case, seed=s))
            under, gold = j.execute(inputs, backend, backward), j.golden(inputs, backward)
            verdicts.append(j.verdict(name, case, under, None, gold, seed=s))
        return retest_verdicts(verdicts, min_seeds=min_seeds)
