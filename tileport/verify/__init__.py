"""``tileport verify OP``: the acceptance run, producing the evidence a pull request needs.

Flow: the op's spec -> cases.load_suite(op) -> generate the level's seeded cases -> accuracy on every
available backend (dual benchmark, retest, repeated runs, cross-backend) -> the op's own studies (its spec
names them) -> performance and memory -> a ``Report`` that the writers in ``tileport.report`` turn into
markdown, html, json and csv. ``device="cuda"`` runs the same on a GPU.
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch

from .. import available_backends, devices, external, providers
from ..bench.environment import machine, versions
from ..cases import generate, load_suite, spec_of
from ..ops.catalog import get as spec_of_name
from ..ops.spec import StudyResult
from ..precision import COUNTS, MIN_ELEMENTS, STANDARD_VERSION, Aggregate, CaseResult, aggregate
from ..precision.standard import RETEST_MIN_SEEDS, RETEST_SEEDS
from ..reference import SELF
from . import cluster, competitor, journal
from .accuracy import PairStat, Reduced, Task, dtype_name, merge
from .performance import performance, performance_groups
from .pool import jobs_for, run_task

QUICK_RETEST_SEEDS = 30  # the standard's 1000 new seeds apply from L0 up; the quick level says it used fewer


@dataclass
class Report:
    op: str
    level: str
    limits: str
    seed: int
    environment: dict
    backends: list[dict]
    cases: int
    elements: int
    runs: int
    retest_seeds: int
    results: list[CaseResult]
    aggregates: list[Aggregate]
    pairs: list[PairStat]
    studies: list[StudyResult]
    perf: list[dict]
    seconds: float
    counts: dict = field(default_factory=dict)
    skipped: dict = field(default_factory=dict)  # backend -> (cases not run, why)
    device: str = "cpu"
    placement: list = field(default_factory=list)  # with Ray: where each batch of cases ran (cluster.Placement)
    originals: list = field(default_factory=list)  # the upstream kernels (originals.Status): found, run, why not

    @property
    def passed(self) -> bool:
        return all(a.passed for a in self.aggregates)

    @property
    def failures(self) -> list[CaseResult]:
        return [r for r in self.results if not r.passed]


def environment(benchmark: str, jobs: int = 1, executor: str = "") -> dict:
    return {
        "benchmark": benchmark,
        "machine": machine(),
        "versions": versions(),
        "threads": torch.get_num_threads(),  # the timings'; the accuracy task runs one thread per worker
        "jobs": jobs,
        "executor": executor or ("this process" if jobs == 1 else f"{jobs} local worker processes"),
        "standard": STANDARD_VERSION,
        "date": time.strftime("%Y-%m-%d %H:%M:%S"),
        "TILEPORT_BACKEND": os.environ.get("TILEPORT_BACKEND", ""),
    }


def serving_backends(
    op: str, wanted: list[str] | None, benchmark: str, device: str = "cpu"
) -> tuple[list[str], list[dict], set[str]]:
    """Backends to verify and every backend's status for the report. By default: every available backend
    serving op on the device's kind except the benchmark's (judging the torch composite against itself proves nothing;
    it enters the cross-backend comparison as the benchmark)."""
    infos = available_backends()
    status = [dict(name=b.name, available=b.available, reason=b.reason, devices=list(b.device_kinds)) for b in infos]
    interpreted = {b.name for b in infos if b.interpreted}
    kind = devices.kind(device)
    kernels = spec_of_name(
        op
    ).kernel_op  # the operator whose kernel modules serve op (op's own, or the one it composes)
    usable = [b.name for b in infos if b.available and kernels in b.ops and kind in b.device_kinds]
    if wanted:
        unknown = [w for w in wanted if w not in {b.name for b in infos}]
        if unknown:
            raise ValueError(f"unknown backend {unknown[0]!r}; backends: {', '.join(b.name for b in infos)}")
        unusable = [w for w in wanted if w not in usable]
        if unusable:
            reason = next(s["reason"] for s in status if s["name"] == unusable[0])
            raise ValueError(f"backend {unusable[0]!r} cannot run {op} on {device} here: {reason}")
        return list(wanted), status, interpreted
    return [n for n in usable if n != benchmark], status, interpreted


@dataclass
class Plan:
    """A checked verify request: the suite, its level, the backends and the cases."""

    op: str
    level: str
    seed: int
    suite: object
    benchmark: str
    names: list[str]
    status: list[dict]
    interpreted: set[str]
    cases: list
    device: str = "cpu"
    originals: list = field(default_factory=list)  # originals.Status of each of the op's upstream kernels
    impls: dict = field(default_factory=dict)  # --impl target -> its --arg overrides (workers resolve them again)
    bound: tuple = ()  # the implementations' providers, resolved once here (providers.Implementation)

    @property
    def impl_info(self) -> list[dict]:
        """What each implementation under test is (``external.Impl.describe()``), for the report."""
        return [b.impl.describe() for b in self.bound]

    def provider(self, name: str) -> providers.Provider:
        """The provider ``name`` stands for: a bound implementation, else a backend."""
        return next((b for b in self.bound if b.name == name), None) or providers.Backend(name)


def check_device(device: str) -> str:
    """``cpu``, ``cuda`` where a GPU is present, ``npu`` where torch_npu sees one; ValueError saying why not."""
    return devices.check(device)


def _reference_backends(suite, backends: list[str] | None, impls, device: str) -> tuple[list[str], list[dict]]:
    """A reference operator's sides under test: the --impl given, else the reference itself on the device."""

    status = [dict(name=SELF, available=True, reason=f"the reference {suite.reference} on {device}", devices=[device])]
    unknown = [b for b in backends or () if b != SELF]
    if unknown:
        raise ValueError(
            f"backend {unknown[0]!r} does not serve {suite.name} (a reference function): use --impl, or --backend "
            f"{SELF}"
        )
    return ([SELF] if backends or not impls else []), status


def prepare(
    op: str,
    level: str = "L0",
    backends: list[str] | None = None,
    dtypes=None,
    seed: int = 0,
    device: str = "cpu",
    cases_file: str | None = None,
    impls: list[str] | None = None,
    impl_args: list[str] | None = None,
    suite=None,
) -> Plan:
    """Check the request (operator, level, backends, dtypes, device) and expand the cases; bad input raises
    ValueError naming it, before any work starts. ``cases_file``: a suite YAML (tileport's or the test kit's
    own design format) instead of the operator's shipped suite. ``impls``: external implementations
    (``MODULE:FUNCTION`` or ``path.py:FUNCTION``), verified beside the backends; ``impl_args``: their
    ``NAME=INPUT`` parameter mappings. ``suite``: a suite made in code (a problem's, ``--api``'s) instead."""
    device = check_device(device)
    if suite is None:
        suite = load_suite(cases_file if cases_file else op)
        if cases_file and op and suite.name != op:
            raise ValueError(f"{cases_file} describes {suite.name}, not {op}")
    op = suite.name
    spec = spec_of(suite)
    suite.level(level)
    benchmark = suite.standard.get("benchmark", "torch")
    if spec.reference:
        names, status = _reference_backends(suite, backends, impls, device)
        interpreted = set()
    else:
        names, status, interpreted = serving_backends(op, backends, benchmark, device)
    bound = [providers.Implementation(external.resolve(spec, t, impl_args)) for t in impls or ()]  # once, here
    names += [b.name for b in bound]
    status += [
        dict(
            name=b.name,
            available=True,
            reason=f"external: {b.impl.signature} from {b.impl.file} ({b.impl.version})",
            devices=[device],
        )
        for b in bound
    ]
    cases = generate(suite, level, dtypes, seed)
    overrides = external.parse_args(impl_args)
    return Plan(
        op,
        level,
        seed,
        suite,
        benchmark,
        names,
        status,
        interpreted,
        cases,
        device,
        providers.originals.probe(spec, device),
        {t: overrides for t in impls or ()},
        tuple(bound),
    )


def verify(
    op: str,
    level: str = "L0",
    backends: list[str] | None = None,
    dtypes: list[torch.dtype] | None = None,
    seed: int = 0,
    retest_seeds: int | None = None,
    with_perf: bool = True,
    progress: Callable[..., None] | None = None,
    device: str = "cpu",
    jobs: int = 1,
    ray_address: str | None = None,
) -> Report:
    """Prepare and run the acceptance tasks (see ``run``)."""
    plan = prepare(op, level, backends, dtypes, seed, device)
    return run(plan, retest_seeds, with_perf, progress, jobs, ray_address=ray_address)


def _task(plan: Plan, lv, retest_seeds: int, benchmark_run: list[str] | None) -> Task:
    """The accuracy task of ``plan``: its backends under test at the level, an interpreted backend (Triton on the
    CPU) and the originals under the interpreter cut to the quick level's workload (a conforming level keeps the
    small-sample fuse for them: they retest over its minimum)."""
    suite, quick = plan.suite, plan.suite.levels.get("quick")
    reduced, cut = {}, None
    if quick is not None:
        per_dtype = -(-quick.cases // len(suite.primary.dtypes))
        cut = Reduced(
            per_dtype,
            min(lv.runs, quick.runs),
            min(retest_seeds, RETEST_MIN_SEEDS if lv.conforming else QUICK_RETEST_SEEDS),
        )
        reduced = {n: cut for n in plan.interpreted if n in plan.names}
    return Task(
        suite,
        tuple(plan.names),
        lv.limits,
        lv.runs,
        retest_seeds,
        reduced,
        plan.device,
        RETEST_MIN_SEEDS if lv.conforming else 0,
        tuple(o.name for o in plan.originals if o.runs),
        cut if quick is not None and plan.device == "cpu" else None,
        tuple((t, tuple(sorted(a.items()))) for t, a in plan.impls.items()),
        (plan.level, *benchmark_run) if benchmark_run else (),
    )


def _accuracy(task: Task, todo: list, jobs: int, step, writer, ray_address: str | None) -> tuple:
    """The cases ``todo`` run (here, in worker processes, or as Ray tasks), each journaled as it finishes:
    (outcomes, placement, the workers counted, the executor's description)."""
    placement, executor = [], ""
    try:
        if ray_address is not None:
            with cluster.session(ray_address) as ray:
                fresh, placement = cluster.run_task(task, todo, ray_address, step, writer.append if writer else None)
                jobs, executor = cluster.cluster_cpus(ray), cluster.describe(ray)
        else:
            fresh = run_task(task, todo, jobs, step, writer.append if writer else None)
    finally:
        if writer:
            writer.close()
    return fresh, placement, jobs, executor


def _counts(cases: list, lv, dtypes: list) -> tuple[int, dict]:
    """The elements of the cases within the standard's scale, and the level's counts against its minimums."""
    scale = [c for c in cases if c.counted]  # special scenarios and extras are beyond the standard's case scale
    elements = sum(c.elements for c in scale)
    need = COUNTS[lv.limits]
    per_dtype = {dtype_name(d): sum(c.dtype == d for c in scale) for d in dtypes}
    return elements, {
        "conforming": lv.conforming,
        "beyond_scale": len(cases) - len(scale),
        "required": {
            "cases": need.cases,
            "cases_per_dtype": need.cases_per_dtype,
            "runs_per_case": need.runs_per_case,
            "elements": MIN_ELEMENTS,
        },
        "actual": {"cases": len(scale), "cases_per_dtype": per_dtype, "runs_per_case": lv.runs, "elements": elements},
        "met": {
            "cases": len(scale) >= need.cases,
            "cases_per_dtype": min(per_dtype.values()) >= need.cases_per_dtype,
            "runs_per_case": lv.runs >= need.runs_per_case,
            "elements": elements >= MIN_ELEMENTS,
        },
    }


def run(
    plan: Plan,
    retest_seeds: int | None = None,
    with_perf: bool = True,
    progress: Callable[..., None] | None = None,
    jobs: int = 1,
    journal_dir: str | os.PathLike | None = None,
    ray_address: str | None = None,
    benchmark_run: list[str] | None = None,
) -> Report:
    """Run the acceptance tasks; ``progress(description, total, advance)`` is told of each step (advance 1)
    and of long work inside one (advance 0), with the count of steps. ``jobs``: worker processes for the
    accuracy task's cases (``pool.run_task``; 1 runs them here); the timings always run here, alone.
    ``journal_dir``: journal each finished case there, and skip the cases a journal there already holds
    (``--resume``: the report is the one an uninterrupted run gives). ``ray_address``: run the accuracy cases
    as Ray tasks instead (``cluster.run_task``; ``"local"`` for an instance on this machine). ``benchmark_run``:
    ``RUN[:PROVIDER]`` and its ``--retest-for`` runs, another machine's run as the benchmark (``competitor``)."""
    t0 = time.perf_counter()
    op, level, seed, suite, cases = plan.op, plan.level, plan.seed, plan.suite, plan.cases
    lv = suite.level(level)
    dtypes = list(dict.fromkeys(c.dtype for c in cases))
    if retest_seeds is None:
        retest_seeds = RETEST_SEEDS if lv.conforming else QUICK_RETEST_SEEDS
    spec = spec_of(suite)
    untimed = with_perf and spec.reference
    with_perf = with_perf and not spec.reference
    perf_groups = performance_groups(op, dtypes) if with_perf else []
    total = len(cases) + len(perf_groups)
    step = (lambda what, advance=1: progress(what, total, advance)) if progress else None
    task = _task(plan, lv, retest_seeds, benchmark_run)
    rival = competitor.load(list(benchmark_run), op, level) if benchmark_run else None  # checked here, before any case
    done = journal.read(Path(journal_dir)) if journal_dir is not None else {}
    todo = [c for c in cases if c.index not in done]
    if step and done:
        step(f"{len(done)} cases from the journal", advance=len(cases) - len(todo))
    writer = journal.Writer(Path(journal_dir)) if journal_dir is not None else None
    fresh, placement, jobs, executor = _accuracy(
        task, todo, jobs_for(len(todo), jobs, plan.device), step, writer, ray_address
    )
    results, pairs, skipped = merge([*done.values(), *fresh])
    if untimed:
        skipped["performance and memory"] = (
            0,
            "not measured for a reference function yet (verify times tileport's operators)",
        )
    studies = [study(dtypes, seed) for study in spec.studies] if plan.device == "cpu" else []
    tested = [plan.provider(n) for n in plan.names if n not in plan.interpreted]  # an interpreter: no contender
    unmeasured: dict[str, str] = {}
    perf = (
        performance(op, perf_groups, tested, progress=step, device=plan.device, failed=unmeasured) if with_perf else []
    )
    for provider, why in unmeasured.items():
        skipped[f"performance of {provider}"] = (0, f"its call raised, so it was not timed: {why}")
    aggs = aggregate(results)
    elements, counts = _counts(cases, lv, dtypes)
    if rival is not None:
        bench_label = rival.label
    elif spec.reference:
        bench_label = f"the reference {suite.reference} in the case's dtype on the CPU"
    else:
        bench_label = plan.benchmark
    env = environment(bench_label, jobs, executor)
    for info in plan.impl_info:  # the implementation under test: what, where, which version
        env[f"impl {info['target']}"] = f"{info['signature']}; {info['file']}; {info['version']}"
    return Report(
        op,
        level,
        lv.limits,
        seed,
        env,
        plan.status,
        len(cases),
        elements,
        lv.runs,
        retest_seeds,
        results,
        aggs,
        pairs,
        studies,
        perf,
        time.perf_counter() - t0,
        counts,
        skipped,
        plan.device,
        placement,
        [dataclasses.asdict(o) for o in plan.originals],
    )
