"""The accuracy task: every case of a suite on each backend, judged by the dual-benchmark standard.

Per case the golden (float64 torch reference) and the benchmark (same-dtype torch composite) run once, then
each backend under test; every output is judged, a failure is retested with new seeds (the standard's
rule; the seeds run lazily and stop once the outcome is decided, ``precision.retest.retest_stream``), the backend is
rerun ``runs - 1`` times and must reproduce its outputs bit for bit, and the
backends are compared with each other.

Retests of an operator whose inputs and outputs are all rows (its spec is ``stackable``) are batched: the new seeds'
inputs are stacked
along a new leading dimension, run in one call per chunk, and each seed is measured over its own slice. The
kernel computes every row alike however many rows there are; torch's benchmark may order a lone long row's
sum differently from one row among many, which is as valid a same-precision benchmark. Most first-seed
failures are cases of one to three rows, whose single-sample ratios the retest exists to settle; 1000 seeds
one call at a time would take tens of minutes per level.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace

import numpy as np
import torch

from .. import devices, providers
from ..backends import outputs
from ..backends.registry import BackendUnavailableError
from ..cases import Case, Suite, golden_inputs, make_inputs, spec_of
from ..dtypes import name as dtype_name
from ..precision import CaseResult, Verdict, compare_equal, dual_measure_batch, judge
from ..precision.retest import far_above
from ..precision.standard import RETEST_MIN_SEEDS
from . import competitor
from .benchmark import Measured, Recorded, unjudged
from .outcome import CaseOutcome, PairStat  # journals pickled before outcome.py name this module: kept here

_BITS = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}
RETEST_CHUNK_ELEMENTS = 1 << 22  # elements of x per batched retest call (the float64 golden is 8 bytes each)


def same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Bit-identical (nan payloads included), as ATK's repeated runs require. Compared as integers by numpy:
    torch.equal took several times as long (docs/notes/measurements.md), and a run of L0 compares 49 repeats of
    every output of every case."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    bits = _BITS[a.element_size()]
    a, b = (t.detach().cpu().contiguous().view(bits).numpy() for t in (a, b))
    return bool(np.array_equal(a, b))


def _pair_update(stat: PairStat, a: torch.Tensor, b: torch.Tensor) -> None:
    stat.cases += 1
    if same_bits(a, b):
        stat.identical += 1
        return
    a64, b64 = a.double().flatten(), b.double().flatten()
    d = (a64 - b64).abs_()
    if not bool(torch.isfinite(d).all()):  # keep the positions where both are finite
        finite = torch.isfinite(a64) & torch.isfinite(b64)
        d, b64 = d[finite], b64[finite]
    if d.numel():
        stat.max_abs = max(stat.max_abs, float(d.max()))
        stat.max_rel = max(stat.max_rel, float(d.div_(b64.abs_().add_(1e-7)).max()))


@dataclass(frozen=True)
class Reduced:
    """A smaller workload for one backend (an interpreter): the first cases of each dtype up to a size, fewer
    runs. The size cap keeps a retest affordable under an interpreter (docs/notes/measurements.md)."""

    cases_per_dtype: int
    runs: int
    retest_seeds: int
    max_elements: int = 1 << 16

    def skips(self, case: Case) -> bool:
        return case.rank >= self.cases_per_dtype or case.elements > self.max_elements

    def describe(self) -> str:
        return (
            f"interpreted: the first {self.cases_per_dtype} cases per dtype (the quick level's) of at most "
            f"{self.max_elements} elements, {self.runs} runs each, {self.retest_seeds} retest seeds"
        )


def available_bytes() -> int | None:
    """Memory this machine can still hand out (Linux: MemAvailable), or None where unknown."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def bytes_needed(suite: Suite, case: Case) -> int:
    """A generous estimate of a case's peak memory: every tensor input and output, held in float64 by the
    golden and in the case's dtype by the benchmark and the backend, with temporaries. By named dimensions each
    tensor drawn counts at its own size, and the outputs as much again."""
    if case.shapes:
        return case.all_elements * 2 * (8 + 2 * case.dtype.itemsize) * 2
    tensors = len(suite.tensors) + len(suite.outputs) + len(suite.grad_outputs)
    return case.elements * tensors * (8 + 2 * case.dtype.itemsize) * 2


def case_attrs(case: Case) -> dict:
    """The attributes a result records: the case's scalars, and the optional inputs it left out."""
    return dict(case.attrs) | {name: None for name in case.omitted}


@dataclass
class Judge:
    """Runs a suite's operator on one side (under test, benchmark, golden) through its spec and judges an
    output by the standard; retests over new seeds, batched when the spec's cases stack."""

    suite: Suite
    limits: str
    device: str = "cpu"
    impls: dict = field(default_factory=dict)  # --impl target -> its --arg overrides

    against: Measured | Recorded = field(default_factory=Measured)  # the benchmark side: here, or another run's

    @classmethod
    def for_task(cls, task: Task) -> Judge:
        against = (
            Recorded(competitor.load(list(task.competitor[1:]), task.suite.name, task.competitor[0]))
            if task.competitor
            else Measured()
        )
        return cls(task.suite, task.limits, task.device, {t: dict(a) for t, a in task.impls}, against)

    def provider(self, name: str) -> providers.Provider:
        """The provider a backend name of the task stands for (``providers.resolve``), once in this process."""
        if name not in self._providers:
            self._providers[name] = providers.resolve(self.spec, name, self.impls)
        return self._providers[name]

    def __post_init__(self):
        self.spec = spec_of(self.suite)
        self._providers: dict[str, providers.Provider] = {}
        self.benchmark = self.suite.standard.get("benchmark", "torch")
        self.acc = self.suite.standard.get("acc", "double_bm")
        max_atol = self.suite.standard.get("max_atol")
        self.max_atol = None if max_atol is None else float(max_atol)

    def original(self, key: str) -> providers.Original:
        """The provider of the spec's upstream original ``key``, loaded once per judge."""
        if not hasattr(self, "_originals"):
            self._originals = providers.upstream(self.spec)
        return self._originals[key]

    def execute(self, inputs: dict, backend: str, backward: bool, run=None, device: str | None = None) -> dict:
        """Outputs on the CPU; inputs drawn on the CPU, moved to the device (``device``, default the judge's)
        first. Outputs start as NaN (the standard's section 3): an element a kernel never writes fails instead of
        passing by luck. ``run`` replaces the spec's run(inputs, backend, backward) (the golden's own)."""
        if run is None:
            provider = self.provider(backend)
            run = lambda i, b: provider.run(self.spec, i, b)  # noqa: E731
        device = device or self.device
        with outputs.poisoned():  # an absent output (k_out where k is None) is not judged: left out
            if device == "cpu":
                return {k: v for k, v in run(inputs, backward).items() if v is not None}
            moved = {k: devices.to(v, device) if isinstance(v, torch.Tensor) else v for k, v in inputs.items()}
            return {k: v.cpu() for k, v in run(moved, backward).items() if v is not None}

    def exact(self, name: str, out: dict) -> bool:
        """Whether output ``name`` is judged by equality: the spec says so, or it is not floating (indices, masks)."""
        return name in self.spec.exact or (name in out and not out[name].is_floating_point())

    def golden(self, inputs: dict, backward: bool) -> dict:
        """The golden's outputs for these inputs: the benchmark backend in float64, or the spec's own golden where
        it states one (and the benchmark is the torch reference)."""
        own = self.spec.run_golden if self.benchmark == "torch" else None
        where = "cpu" if self.device in devices.GOLDEN_ON_CPU else None  # an NPU has no fp64: the golden on the CPU
        return self.execute(golden_inputs(self.suite, inputs), self.benchmark, backward, run=own, device=where)

    def references(self, inputs: dict, backward: bool):
        """The benchmark's and the golden's outputs for these inputs."""
        golden = self.golden(inputs, backward)
        return self.execute(inputs, self.benchmark, backward), golden

    def backward_of(self, name: str) -> bool:
        """Whether output ``name`` needs the backward run (a forward output is retested without it)."""
        return name not in {t.name for t in self.spec.outputs}

    def run_all(self, inputs: dict, backend: str, backward: bool):
        return (self.execute(inputs, backend, backward), *self.references(inputs, backward))

    def verdict(self, name: str, case: Case, under, bm, gold, seed: int | None = None) -> Verdict:
        """The standard's verdict of output ``name``: equality for an exact output, else the dual benchmark
        against the benchmark side (``seed``: a retest seed's, where that side was recorded elsewhere)."""
        if self.exact(name, under):  # indices, masks: equal to the golden's, element for element
            return compare_equal(under[name], gold[name], self.limits)
        dtype = self.spec.precision_dtype(name, case.dtype)
        return self.against.verdict(self, name, case, under, bm, gold, dtype, seed)

    def new_seed_verdicts(
        self, case: Case, name: str, backend: str, seeds: int, batched: bool | None = None
    ) -> list[Verdict]:
        """Verdicts of ``name`` over seeds case.seed + 1 ... + seeds (``seed_verdicts``, all of them)."""
        return list(self.seed_verdicts(case, name, backend, seeds, batched))

    def seed_verdicts(
        self, case: Case, name: str, backend: str, seeds: int, batched: bool | None = None
    ) -> Iterator[Verdict]:
        """Verdicts of ``name`` over seeds case.seed + 1 ... + seeds, lazily: a seed runs when its verdict is
        asked for (a retest that stops early runs no more). ``batched`` (default: when the spec's cases
        stack) runs chunks of seeds as one call each, every seed judged over its own slice."""
        new = list(range(case.seed + 1, case.seed + 1 + seeds))
        backward = self.backward_of(name)
        if not (self.spec.stackable if batched is None else batched):
            for s in new:
                yield self.verdict(
                    name, case, *self.run_all(make_inputs(self.suite, replace(case, seed=s)), backend, backward)
                )
            return
        if not self.spec.stackable:
            raise ValueError(f"{self.spec.name}: cases do not stack (an input or output is not per row)")
        dtype = self.spec.precision_dtype(name, case.dtype)

        def batch(many: list[dict]) -> list[Verdict]:
            stacked = {
                k: torch.stack([m[k] for m in many]) if isinstance(v, torch.Tensor) else v for k, v in many[0].items()
            }
            try:
                under, bm, gold = (o[name].reshape(len(many), -1) for o in self.run_all(stacked, backend, backward))
            except BackendUnavailableError:  # too large for this backend (an interpreter's limit): halve the stack
                if len(many) == 1:
                    raise
                return batch(many[: len(many) // 2]) + batch(many[len(many) // 2 :])
            return [
                judge(a, b, self.limits, self.acc, dtype, self.max_atol)
                for a, b in zip(*dual_measure_batch(under, bm, gold, dtype))
            ]

        chunk = max(1, RETEST_CHUNK_ELEMENTS // max(case.elements, 1))
        for i in range(0, len(new), chunk):
            yield from batch([make_inputs(self.suite, replace(case, seed=s)) for s in new[i : i + chunk]])


def _finding(
    suite: Suite, case: Case, backend: str, output: str, failures: list[str], limits: str, acc: str
) -> CaseResult:
    """A result with no metrics: a check that is only its findings (a rejection, a case that did not run)."""
    verdict = unjudged(limits, acc, failures)
    return CaseResult(
        suite.name,
        backend,
        case.index,
        dtype_name(case.dtype),
        case.shape,
        case.value_range,
        case_attrs(case),
        output,
        verdict,
        shapes=case.shapes,
    )


def raised(exc: BaseException) -> str:
    """The finding of a run that raised. A stub's NotImplementedError (a scaffolded kernel, a TODO) is its own
    outcome, "not implemented: <its message>": the code is not written yet, nothing crashed."""
    if isinstance(exc, NotImplementedError):
        return f"not implemented: {exc}"
    return f"did not run: raised {type(exc).__name__}: {exc}"


def not_run(task: Task, case: Case, why: str) -> CaseOutcome:
    """A case that could not be run (it raised, or its worker kept dying): one failed check per backend, so the
    run reports it and can never pass by leaving it out."""
    return _failed_everywhere(task, case, f"did not run: {why}")


def _failed_everywhere(task: Task, case: Case, failure: str) -> CaseOutcome:
    """One failed "run" check per backend of the task, each saying ``failure``."""
    acc = task.suite.standard.get("acc", "double_bm")
    return CaseOutcome(
        case.index, [_finding(task.suite, case, b, "run", [failure], task.limits, acc) for b in task.backends]
    )


def _rejection(j: Judge, suite: Suite, case: Case, inputs: dict, backend: str) -> CaseResult:
    """An invalid input (out of its valid range in the case file) must be refused with a clear TypeError or
    ValueError naming the problem (the standard's 2.1), not computed and not crashed on."""
    what = f"{case.filled} = {case.fill_value:g}" if case.filled else case_attrs(case)
    try:
        j.execute(inputs, backend, suite.backward)
        failures = [f"accepted an invalid input ({what})"]
    except (TypeError, ValueError):
        failures = []
    except NotImplementedError as exc:  # a stub: not written, so not judged on its checks
        failures = [raised(exc)]
    except Exception as exc:  # noqa: BLE001 - any other failure is the finding
        failures = [f"{type(exc).__name__} instead of a TypeError/ValueError for an invalid input ({what}): {exc}"]
    return _finding(suite, case, backend, "rejects", failures, j.limits, j.acc)


def _refused_too(j: Judge, suite: Suite, case: Case, inputs: dict, backend: str, refusal: Exception) -> CaseResult:
    """A case the reference refuses (it raised): the implementation under test must raise too, not return."""
    why = f"{type(refusal).__name__}: {' '.join(str(refusal).split())[:160]}"
    try:
        j.execute(inputs, backend, suite.backward)
        failures = [f"returned a result where the reference raised {why}"]
    except Exception:  # noqa: BLE001 - refused, as the reference does
        failures = []
    return _finding(suite, case, backend, "refuses", failures, j.limits, j.acc)


@dataclass(frozen=True)
class Task:
    """The accuracy task of one verify run, everything a worker needs to run any of its cases (picklable:
    the local process pool and a cluster ship it once per worker). ``reduced`` gives a backend a smaller
    workload (an interpreter: milliseconds per program instance): each dtype's first cases only, fewer
    repeated runs and retest seeds. ``device``: where every side runs (inputs are drawn on the CPU from the
    case's seed and moved there; outputs come back to the CPU to be judged). ``min_seeds``: the small-sample
    fuse (0 for a non-conforming level)."""

    suite: Suite
    backends: tuple[str, ...]
    limits: str
    runs: int
    retest_seeds: int
    reduced: dict = field(default_factory=dict)
    device: str = "cpu"
    min_seeds: int = RETEST_MIN_SEEDS
    originals: tuple[str, ...] = ()  # the upstream originals that run here (``originals.probe``)
    originals_cut: Reduced | None = None  # their workload where they are interpreted (the CPU)
    impls: tuple = ()  # (--impl target, its --arg overrides as (param, input) pairs): resolved again in each worker
    competitor: tuple = ()  # (level, RUN[:PROVIDER], more RUNs...): another machine's run as the benchmark

    def seeds(self, backend: str) -> int:
        return self.reduced[backend].retest_seeds if backend in self.reduced else self.retest_seeds

    @property
    def conforming(self) -> bool:
        """A level of the standard (the small-sample fuse on), not the labelled quick level."""
        return self.min_seeds > 0


def _judged(
    task: Task,
    j: Judge,
    case: Case,
    backend: str,
    cut,
    inputs: dict,
    under: dict,
    bm: dict,
    gold: dict,
    progress,
    out: CaseOutcome,
) -> list[CaseResult]:
    """One backend's results of a case: each output judged against the golden and the benchmark, retested where
    it fails, and its repeated runs compared bit for bit."""
    suite = task.suite
    backend_runs = cut.runs if cut is not None else task.runs
    repeats = [j.execute(inputs, backend, suite.backward) for _ in range(backend_runs - 1)]
    results = []
    for name in under:
        exact = j.exact(name, under)
        if not exact:  # what a run on another machine needs of this output as its benchmark
            out.sides[(backend, name)] = competitor.Side.of(
                under[name], gold[name], j.spec.precision_dtype(name, case.dtype)
            )
        lacks = None if exact else j.against.lacks(name)
        if lacks:  # a benchmark run that never gives this output
            out.skipped.setdefault(f"{backend} {name}", [0, lacks])[0] += 1
            continue
        v = j.verdict(name, case, under, bm, gold)
        redo = None
        # the dual benchmark's rule; a wrong index is wrong
        if not v.passed and j.acc == "double_bm" and not exact and j.against.has(case, name):
            if progress:
                progress(
                    f"{case.describe()}: retest {name} on {backend} over {task.seeds(backend)} new seeds", advance=0
                )
            seeds = task.seeds(backend)
            far = not task.conforming and bool(far_above(v))  # quick: a miss by orders of magnitude needs few seeds
            redo = j.against.retest(j, case, name, backend, seeds, task.min_seeds, far)
        results.append(
            CaseResult(
                suite.name,
                backend,
                case.index,
                dtype_name(case.dtype),
                case.shape,
                case.value_range,
                case_attrs(case),
                name,
                v,
                redo,
                deterministic=all(same_bits(r[name], under[name]) for r in repeats),
                runs=backend_runs,
                shapes=case.shapes,
            )
        )
    return results


def run_case(
    task: Task, j: Judge, case: Case, progress: Callable[..., None] | None = None, free: int | None = None
) -> CaseOutcome:
    """One case on every backend of the task: judged, retested where it fails, rerun for determinism and
    compared across backends. ``free``: memory this worker may use (a case needing more is skipped)."""
    suite, out = task.suite, CaseOutcome(case.index)
    need = bytes_needed(suite, case)
    if free is not None and need > free:  # the standard's upper border (2^31 elements) on a small machine
        why = (
            f"needs about {need / 2**30:.0f} GiB; a worker's share of this machine's available memory is "
            f"{free / 2**30:.0f} GiB"
        )
        out.skipped[f"case {case.describe()} (every side)"] = [1, why]
        return out
    inputs = make_inputs(suite, case)
    out.digest = competitor.digest(inputs)
    j.against.check(case, out.digest)
    if case.expects_rejection:
        out.results = [_rejection(j, suite, case, inputs, b) for b in task.backends]
        return out
    running = []  # (backend, its reduced workload or None)
    for backend in task.backends:
        cut = task.reduced.get(backend)
        if cut is not None and cut.skips(case):
            out.skipped.setdefault(backend, [0, cut.describe()])[0] += 1
        else:
            running.append((backend, cut))
    if not running:  # a reduced backend alone (``--backend triton``): no golden nor benchmark to compute
        return out
    try:
        bm, gold = j.references(inputs, suite.backward)
    except Exception as exc:  # noqa: BLE001 - a reference that refuses an input: the implementation must refuse it too
        if not (j.spec.reference or not case.counted):  # a special scenario's sizes may be unsupported ones
            raise
        out.results = [_refused_too(j, suite, case, inputs, b, exc) for b, _ in running]
        return out
    per_backend = {j.benchmark: bm}  # the benchmark is one side of the cross-backend comparison
    for backend, cut in running:
        try:
            under = j.execute(inputs, backend, suite.backward)
        except BackendUnavailableError as exc:
            out.skipped.setdefault(backend, [0, str(exc)])[0] += 1
            continue
        except Exception as exc:  # noqa: BLE001 - this backend's failure, and only this backend's
            out.results.append(_finding(suite, case, backend, "run", [raised(exc)], task.limits, j.acc))
            continue
        per_backend[backend] = under
        for name, why in j.provider(backend).not_judged().items():  # what it did not give: listed, never passed
            out.skipped.setdefault(f"{backend} {name}", [0, why])[0] += 1
        try:
            out.results.extend(_judged(task, j, case, backend, cut, inputs, under, bm, gold, progress, out))
        except Exception as exc:  # noqa: BLE001 - a repeated run or a retest that raises fails this backend alone
            out.results.append(
                _finding(
                    suite,
                    case,
                    backend,
                    "run",
                    [f"raised {type(exc).__name__} on a repeated run or a retest: {exc}"],
                    task.limits,
                    j.acc,
                )
            )
    for name in task.originals:  # the upstream kernels: one more side of the comparison, not judged
        key, cut = providers.Original.name_of(name), task.originals_cut
        if cut is not None and cut.skips(case):
            out.skipped.setdefault(key, [0, cut.describe()])[0] += 1
            continue
        try:
            per_backend[key] = j.original(name).run(j.spec, inputs, suite.backward)
        except Exception as exc:  # noqa: BLE001 - an original that cannot run a case is reported, not fatal
            out.skipped.setdefault(key, [0, f"{type(exc).__name__}: {' '.join(str(exc).split())[:160]}"])[0] += 1
    names = list(per_backend)
    for i, b in enumerate(names):
        for a in names[i + 1 :]:
            for name in [n for n in per_backend[a] if n in per_backend[b]]:
                key = (a, b, dtype_name(case.dtype), name)
                _pair_update(out.pairs.setdefault(key, PairStat(*key)), per_backend[a][name], per_backend[b][name])
    return out


def run_case_safely(
    task: Task, j: Judge, case: Case, progress: Callable[..., None] | None = None, free: int | None = None
) -> CaseOutcome:
    """``run_case``, with an exception it raises turned into the case's failed checks (``not_run``): in a run of
    thousands of cases one case's crash is a finding to report, not a reason to lose the others."""
    try:
        return run_case(task, j, case, progress, free)
    except competitor.CompetitorError:  # the benchmark run does not fit this one: the run stops, naming the case
        raise
    except Exception as exc:  # noqa: BLE001 - whatever a case raises is reported as that case's failure
        return _failed_everywhere(task, case, raised(exc))


def merge(outcomes: list[CaseOutcome]) -> tuple[list[CaseResult], list[PairStat], dict[str, tuple[int, str]]]:
    """Fold case outcomes (in case order) into the results, the pairwise comparison and the skipped cases."""
    results: list[CaseResult] = []
    pairs: dict[tuple, PairStat] = {}
    skipped: dict[str, list] = {}
    for o in sorted(outcomes, key=lambda o: o.index):
        results += o.results
        for key, p in o.pairs.items():
            into = pairs.setdefault(key, PairStat(*key))
            into.max_abs, into.max_rel = max(into.max_abs, p.max_abs), max(into.max_rel, p.max_rel)
            into.identical += p.identical
            into.cases += p.cases
        for key, (n, why) in o.skipped.items():
            skipped.setdefault(key, [0, why])[0] += n
    return results, list(pairs.values()), {b: (n, why) for b, (n, why) in skipped.items()}
