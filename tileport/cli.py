"""The ``tileport`` command line."""

from __future__ import annotations

import dataclasses
import json
import statistics
import sys
from pathlib import Path

import torch
import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

import tileport  # the package's own API, looked up at call time (available_backends)

from . import devices
from .backends import ascend_paths
from .backends.registry import REGISTRY
from .bench import csvfile, noise
from .bench.bar import judge_bar
from .bench.environment import machine
from .bench.providers import tileport_backends
from .bench.run import plan as bench_plan
from .bench.run import run as run_bench
from .cases import CaseFileError, atk, load_suite, problems, spec_of
from .cases import generate as generate_cases
from .cases.describe import coverage, record
from .cases.generate import make_inputs
from .doctor import default_backend_runs, run_checks
from .dtypes import name as dtype_name
from .dtypes import parse
from .external import ImplError, import_file, resolve
from .lower import KernelTodo, OverBudget
from .lower import lower as run_lower
from .ops.catalog import broken_plugins, get, origin, specs
from .ops.interface import files
from .precision.results import shape_text
from .progress import progress
from .providers import Backend, Implementation
from .readiness import check as readiness_check
from .readiness import report as readiness_report
from .readiness import tile_programs
from .readiness.capture import parse_arg
from .reference import SELF, ReferenceError
from .report import compare as rendered
from .report import tables, write_report
from .report.benchrows import bar_table, matmul_table, performance_table
from .report.markdown import table_md
from .scaffold import EXPORTS, ScaffoldError
from .scaffold import plan as scaffold_plan
from .scaffold import scaffold as write
from .transformers import bench as model_bench
from .transformers import patch as patch_model
from .transformers import zoo
from .transformers.cases import capture
from .transformers.patch import LOSSES as PATCH_LOSSES
from .verify import benchmark_retest, check_device, competitor, journal, prepare
from .verify import compare as matched
from .verify import run as run_verify
from .verify.cluster import LOCAL, RayUnavailable
from .verify.competitor import CompetitorError
from .verify.estimate import duration, estimate_s
from .verify.performance import performance_groups
from .verify.pool import cpus
from .verify.rebuild import NotARun
from .verify.rebuild import report as rebuilt

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    rich_markup_mode=None,
    help="Port tile-level operators and prove each port.",
)


def _width(stderr: bool = False) -> int | None:
    """The console's width: the terminal's; else 160 (a log or pipe would get rich's 80, or a $COLUMNS that a
    parent process such as a test runner exported for its own terminal)."""
    return None if Console(stderr=stderr).is_terminal else 160


console = Console(width=_width())
err_console = Console(stderr=True, width=_width(stderr=True))

BENCH_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def _spec(op: str):
    """The operator's spec (``tileport.ops.spec``); a bad name lists the operators."""

    try:
        return get(op)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="OP") from exc


def _ops_help(verb: str) -> str:
    return f"operator to {verb} (see `tileport ops`)"


@app.command()
def backends() -> None:
    """List the backends, whether each can run here, and why not.

    \b
    Example: tileport backends
    """

    table = Table(title="tileport backends")
    for col in ("backend", "available", "devices", "ops", "reason"):
        table.add_column(col)
    for b in tileport.available_backends():
        table.add_row(
            escape(b.name),
            "[green]yes[/]" if b.available else "[red]no[/]",
            escape(", ".join(b.device_kinds)),
            escape(_listed(b.serves, b.stubs)),
            escape(b.reason),  # reasons name extras: pip install tileport[triton]
        )
    console.print(table)

    triton, bishengir, missing, rows = ascend_paths()
    paths = Table(title="Ascend: the backend each operator gets (first available in dispatch order)")
    for col in ("operator", "arch35 (Ascend 950)", "arch32 (A2/A3: 910B, 910_93)"):
        paths.add_column(col)
    for row in rows:
        paths.add_row(*map(escape, row))
    console.print(paths)
    console.print(
        f"Triton here: {triton}; CANN's bishengir-compile: {bishengir or 'not found'}", markup=False, highlight=False
    )
    if missing:
        console.print("an A2/A3 device run still needs: " + "; ".join(missing), markup=False, highlight=False)


def _listed(names, stubs) -> str:
    """Names that serve, then the scaffold stubs apart: a stub raises its TODO, it supports nothing."""
    return ", ".join(names) + (f"{'; ' if names else ''}stubs: {', '.join(stubs)}" if stubs else "")


@app.command()
def ops() -> None:
    """List the operators: what each computes, its inputs and outputs, the backends that serve it.

    \b
    Example: tileport ops
    """

    all_specs = specs()
    served = {b.name: b for b in tileport.available_backends()}
    table = Table(title="tileport operators")
    for col in ("operator", "from", "math", "inputs", "outputs (grads)", "backends"):
        table.add_column(col)
    for s in all_specs.values():
        ins = ", ".join(
            [f"{t.name}{'?' if t.optional else ''}" for t in s.inputs]
            + [f"{a.name}={a.default}" for a in s.attrs + s.case_attrs]
        )
        outs = ", ".join(t.name for t in s.outputs) + " (" + ", ".join(t.name for t in s.grads) + ")"
        table.add_row(
            escape(s.name),
            escape(origin(s.name)),
            escape(s.math),
            escape(ins),
            escape(outs),
            escape(
                _listed(
                    [n for n, b in served.items() if s.kernel_op in b.serves],
                    [n for n, b in served.items() if s.kernel_op in b.stubs],
                )
            ),
        )
    console.print(table)
    for entry, why in broken_plugins().items():
        console.print(f"plugin not loaded: {entry}: {why}", markup=False, highlight=False)


def _dtypes(names: list[str] | None) -> list[torch.dtype] | None:
    """Parsed --dtype values (fp32/float32, fp16/float16, bf16/bfloat16)."""

    if not names:
        return None
    try:
        return [parse(n) for n in names]
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--dtype") from exc


def _progress():

    return progress(console)


def print_table(t) -> None:
    """A report table (tileport.report.table.Table) on the console."""
    table = Table(title=escape(t.title), title_justify="left")
    for h in t.headers:
        table.add_column(escape(h))
    styles = {
        "pass": "[green]pass[/]",
        "PASS": "[green]PASS[/]",
        "FAIL": "[red]FAIL[/]",
        "fail": "[red]fail[/]",
        "NO": "[red]NO[/]",
    }
    for row in t.rows:
        table.add_row(*(styles.get(c, escape(c)) for c in row))
    console.print(table)
    if t.note:  # notes name extras: pip install tileport[peers]
        console.print(t.note, markup=False, highlight=False)


@app.command()
def verify(
    op: str | None = typer.Argument(None, help=_ops_help("verify") + " (optional with --cases)"),
    level: str = typer.Option("L0", help="quick (CI), or L0 / L1 / L2: the standard's case counts and ratio limits"),
    backend: list[str] | None = typer.Option(
        None, metavar="NAME", help="backend to verify (repeatable; default: every available one)"
    ),
    dtype: list[str] | None = typer.Option(
        None, metavar="DTYPE", help="fp32/float32, fp16/float16, bf16/bfloat16 (repeatable; default: the suite's)"
    ),
    out: Path = typer.Option(Path("tileport-report"), help="folder for report.md, report.html, results.json/csv, PNGs"),
    seed: int = typer.Option(0, help="seed of the generated cases"),
    retest_seeds: int | None = typer.Option(None, help="new seeds for a failed check (default: 1000, quick: 30)"),
    perf: bool = typer.Option(True, help="also run the performance and memory tasks"),
    device: str = typer.Option(
        "cpu", help="cpu, cuda (a GPU) or npu (an Ascend NPU, torch_npu; the golden stays on the CPU)"
    ),
    cases: Path | None = typer.Option(
        None, "--cases", help="a case file: a tileport suite or the test kit's design YAML"
    ),
    jobs: int | None = typer.Option(
        None, min=1, metavar="N", help="worker processes for the accuracy cases (default: this process's CPUs)"
    ),
    resume: Path | None = typer.Option(
        None, "--resume", help="an interrupted run's --out folder: finish its run there"
    ),
    impl: list[str] | None = typer.Option(
        None,
        "--impl",
        metavar="MODULE:FUNCTION",
        help=(
            "an implementation of OP's contract to verify beside the backends: MODULE:FUNCTION or "
            "path/to/file.py:FUNCTION (repeatable)"
        ),
    ),
    arg: list[str] | None = typer.Option(
        None,
        "--arg",
        metavar="NAME=INPUT",
        help="map a parameter of --impl's function: NAME=INPUT; a TileLang jit kernel's parameter: NAME=VALUE "
        "(repeatable)",
    ),
    problem: Path | None = typer.Option(
        None,
        "--problem",
        help=(
            "a KernelBench-style problem file (Model, get_inputs, get_init_inputs): judge --impl's ModelNew against "
            "its Model"
        ),
    ),
    api: str | None = typer.Option(
        None,
        "--api",
        help=(
            "a function that is no tileport operator (MODULE.FUNCTION): judge --impl, or it on --device, against it "
            "in float64"
        ),
    ),
    benchmark_run: list[str] | None = typer.Option(
        None,
        "--benchmark-run",
        metavar="RUN[:PROVIDER]",
        help=(
            "RUN[:PROVIDER]: another machine's verify run (its --out) as the benchmark, in place of the torch "
            "composite; repeat with its --retest-for runs"
        ),
    ),
    retest_for: Path | None = typer.Option(
        None,
        "--retest-for",
        help=(
            "a run judged with --benchmark-run: run the benchmark's provider here on that run's retest seeds (write "
            "to --out)"
        ),
    ),
    ray: str | None = typer.Option(
        None,
        "--ray",
        metavar="[ADDRESS]",
        help="run the accuracy cases as Ray tasks: on the cluster at ADDRESS (auto, HOST:PORT, ray://HOST:PORT), "
        "or on a local Ray instance when no address is given (needs tileport[ray])",
    ),
    verbose: bool = typer.Option(
        False, "--verbose", "-v", help="also print the report's full tables (every check, the timings)"
    ),
) -> None:
    """Run OP's case suite on every available backend: accuracy (dual benchmark), performance, memory; write
    a report. Exit code 1 when a check fails. Each finished case is journaled in the --out folder, so
    ``--resume FOLDER`` finishes an interrupted run with the report an uninterrupted one gives.

    \b
    Example: tileport verify OP --level quick   (OP: one of `tileport ops`)
    """

    from_run = resume if resume is not None else retest_for
    if from_run is not None:  # the request comes from the run being resumed (or retested for)
        hint = "--resume" if resume is not None else "--retest-for"
        try:
            req = journal.read_request(from_run)
        except journal.JournalError as exc:
            raise typer.BadParameter(str(exc), param_hint=hint) from exc
        if op is not None and op != req["op"]:
            raise typer.BadParameter(f"{from_run} holds a run of {req['op']}, not {op}", param_hint=hint)
        op, level, dtype, seed = req["op"], req["level"], req["dtype"], req["seed"]
        op = None if req.get("problem") or req.get("api") else op  # those name their own suite
        cases = Path(req["cases"]) if req["cases"] else None
        problem, api = (Path(req["problem"]) if req.get("problem") else None), req.get("api")
        if resume is not None:
            backend, device, retest_seeds, perf, out = (
                req["backend"],
                req["device"],
                req["retest_seeds"],
                req["perf"],
                resume,
            )
            impl, arg, benchmark_run = req.get("impl"), req.get("arg"), req.get("benchmark_run")
        elif problem is not None:
            impl = req.get("impl")
    suite, env_extra = _verify_suite(op, cases, problem, api, impl)
    if retest_for is not None:
        return _retest_for(retest_for, out, suite, level, dtype, seed, device)
    if problem is not None:
        impl = [env_extra["candidate"]]
    levels = suite.levels
    if level not in levels:
        raise typer.BadParameter(f"unknown level {level!r}; choose from {', '.join(levels)}", param_hint="--level")
    with _progress() as bar:
        task = bar.add_task("verify", total=None)

        def step(what: str, total: int, advance: int = 1) -> None:
            bar.update(task, description=what, total=total, advance=advance)

        try:
            plan = prepare(op, level, backend, _dtypes(dtype), seed, device, None, impl, arg, suite=suite)
            rival = competitor.load(benchmark_run, plan.op, level) if benchmark_run else None
        except ValueError as exc:
            raise typer.BadParameter(str(exc)) from exc
        console.print(_announce(plan, perf, jobs or cpus()), markup=False, highlight=False)
        if resume is None:  # a fresh run: a journal left in --out by another run is not this one's
            (out / journal.RECORDS).unlink(missing_ok=True)
            request = dict(
                op=plan.op,
                level=level,
                backend=backend,
                dtype=dtype,
                seed=seed,
                device=device,
                retest_seeds=retest_seeds,
                perf=perf,
                cases=str(cases.resolve()) if cases else None,
                problem=str(problem.resolve()) if problem else None,
                api=api,
                impl=[
                    str(Path(t.rpartition(":")[0]).resolve()) + ":" + t.rpartition(":")[2]
                    if t.rpartition(":")[0].endswith(".py")
                    else t
                    for t in impl or ()
                ],
                arg=arg,
                benchmark_run=[_absolute_run(b) for b in benchmark_run or ()],
                benchmark_provider=rival.provider if rival else None,
            )
            journal.write_request(out, request)
        try:
            rep = run_verify(
                plan,
                retest_seeds,
                perf,
                progress=step,
                jobs=jobs or cpus(),
                journal_dir=out,
                ray_address=ray,
                benchmark_run=benchmark_run,
            )
        except RayUnavailable as exc:
            raise typer.BadParameter(str(exc), param_hint="--ray") from exc
        except competitor.CompetitorError as exc:
            raise typer.BadParameter(str(exc), param_hint="--benchmark-run") from exc
    rep.environment.update(env_extra)
    paths = write_report(rep, out)
    _print_verdict(rep, level, paths)
    if verbose:
        for t in tables.all_tables(rep):
            if t.rows:
                print_table(t)
    else:
        _print_outcome(rep, out)
    waiting = [r for r in rep.results if r.retest is not None and r.retest.awaiting]
    if waiting:
        console.print(
            f"{len(waiting)} checks await the competitor's retest: on the benchmark's machine run "
            f"`tileport verify --retest-for {out} --out MORE`, then add `--benchmark-run MORE` here",
            markup=False,
        )
    if not rep.passed:
        raise typer.Exit(1)


def _announce(plan, perf: bool, jobs: int) -> str:
    """The line before a verify run starts: what it runs and a rough estimate of how long it takes."""

    timed = perf and not spec_of(plan.suite).reference
    groups = len(performance_groups(plan.op, list(dict.fromkeys(c.dtype for c in plan.cases)))) if timed else 0
    reference = spec_of(plan.suite).reference
    names = (
        ", ".join(
            f"{n} (the reference {plan.suite.reference} itself)" if reference and n == SELF else n for n in plan.names
        )
        or "no provider"
    )
    slow = [n for n in plan.names if n in plan.interpreted]
    note = f" ({', '.join(slow)}: interpreted, the quick cases only)" if slow else ""
    return (
        f"{plan.op} at {plan.level}: {len(plan.cases)} cases on {names}{note}, {groups} timing groups, {jobs} workers\n"
        f"rough estimate: about {duration(estimate_s(plan, groups, jobs))} (the CI machine's rates; the ETA follows "
        "this run's)"
    )


def _print_verdict(rep, level: str, paths: dict) -> None:
    """The result's first line: PASS or FAIL, the checks at the level and its limits, and where the report is."""
    n = len(rep.results)
    if rep.passed:
        head, text = "[green]PASS[/]", f": all {n} checks passed at {level} ({rep.limits} ratio limits)"
    else:
        head, text = (
            "[red]FAIL[/]",
            f": {len(rep.failures)} of {n} checks failed at {level} ({rep.limits} ratio limits)",
        )
    console.print(head + escape(text), highlight=False)
    beside = ", ".join(paths[k].name for k in ("md", "checks", "json", "csv") if k in paths)
    console.print(f"report: {paths['html']} ({beside} beside it)", markup=False, highlight=False)


def _print_outcome(rep, out: Path, limit: int = 10) -> None:
    """After the verdict: the failures (the first ``limit``), the retests, what did not run, a summary per
    backend and dtype; the full tables are in the report (and ``--verbose``)."""

    say = lambda text: console.print(text, markup=False, highlight=False)  # noqa: E731
    if rep.failures:
        say(f"Failed checks (the first {min(limit, len(rep.failures))} of {len(rep.failures)}):")
        for r in rep.failures[:limit]:  # by named dimensions the first tensor's shape (all of them in the report)
            shape = shape_text(r.shape, r.shapes[:1])
            say(f"  {r.backend} {r.dtype} {r.output}, case {r.case} ({shape}): {_first_failure(r.failures)}")
        if len(rep.failures) > limit:
            say(f"  {len(rep.failures) - limit} more in {out / 'report.html'} and {out / 'results.csv'}")
    retested = [r for r in rep.results if r.retest is not None and not r.retest.awaiting]
    if retested:
        passed = sum(r.passed for r in retested)
        seeds = sum(r.retest.seeds for r in retested)  # a retest stops once its outcome is decided
        say(
            f"Retests: {len(retested)} checks failed on their first seed and were retested over at most "
            f"{rep.retest_seeds} new "
            f"seeds each ({seeds} in all): {passed} passed, {len(retested) - passed} failed"
        )
    review = sum(bool(r.verdict.actual.nonfinite_review) for r in rep.results)
    if review:
        say(f"{review} checks have inf/nan positions to look at (not failures; listed in the report)")
    if rep.skipped:
        say("Not run:")
        for who, (count, why) in list(rep.skipped.items())[:limit]:
            say(f"  {who}: {why}" if who.startswith("case ") or not count else f"  {who}: {count} cases: {why}")
        if len(rep.skipped) > limit:
            say(f"  {len(rep.skipped) - limit} more in {out / 'report.html'}")
    if rep.aggregates:
        console.print(_summary_table(rep))
    if rep.perf:
        console.print(_speed_table(rep.perf))
    say("Every table (each check, the performance rows): --verbose, or the report.")


def _first_failure(clauses: list[str], width: int = 60) -> str:
    """A failed check in brief: its first clause (cut at ``width``), how many more, and whether a retest failed."""
    first = clauses[0] if clauses else "failed"
    first = first if len(first) <= width else first[: width - 1] + "…"
    more = f" (+{len(clauses) - 1} more)" if len(clauses) > 1 else ""
    retest = "; retest failed" if any(c.startswith("retest") for c in clauses[1:]) else ""
    return first + more + retest


def _summary_table(rep) -> Table:
    """Per backend and dtype: checks, failed, retested and the verdict (narrow: readable at 80 columns)."""
    table = Table(title=escape(f"Checks per backend and dtype ({rep.limits} limits)"), title_justify="left")
    for col in ("backend", "dtype", "checks", "failed", "retested", "result"):
        table.add_column(col, overflow="fold")  # an --impl's name is a path: wrapped, not cut
    for a in rep.aggregates:
        result = "[green]pass[/]" if a.passed else "[red]FAIL[/]"
        table.add_row(escape(a.backend), escape(a.dtype), str(a.checks), str(a.failed), str(a.retested), result)
    return table


def _speed_table(perf: list[dict]) -> Table:
    """The timings in brief: each provider's median speed-up against torch eager per mode, over the groups."""

    speed: dict[str, dict[str, list[float]]] = {}
    for r in perf:
        if r["statistic"] == "speedup_vs_eager" and r["provider"] != "torch-eager":
            speed.setdefault(r["provider"], {}).setdefault(r["mode"], []).append(r["value"])
    modes = list(dict.fromkeys(m for by in speed.values() for m in by))
    groups = len({(r["mode"], r["dtype"], r["shape"], r["threads"]) for r in perf})
    table = Table(title=f"Speed-up against torch eager (median over {groups} groups; min-max)", title_justify="left")
    table.add_column("provider", overflow="fold")
    for m in modes:
        table.add_column(m)
    for name, by in speed.items():
        cells = [
            f"{statistics.median(v):.2f}x ({min(v):.2f}-{max(v):.2f})" if v else "-"
            for v in (by.get(m, []) for m in modes)
        ]
        table.add_row(escape(name), *cells)
    return table


def _absolute_run(spec: str) -> str:
    """RUN[:PROVIDER] with RUN made absolute (a resumed run finds it from anywhere)."""
    folder, colon, provider = spec.partition(":") if not Path(spec).exists() else (spec, "", "")
    return str(Path(folder).resolve()) + colon + provider


def _retest_for(run: Path, out: Path, suite, level: str, dtype, seed: int, device: str) -> None:
    """``verify --retest-for RUN``: the benchmark's provider on RUN's retest seeds, kept in --out."""

    try:
        device = check_device(device)
        cases = generate_cases(suite, level, _dtypes(dtype), seed)
        with _progress() as bar:
            task = bar.add_task("retest for", total=None)
            seeds = benchmark_retest.retest_for(
                run,
                out,
                suite,
                cases,
                device,
                lambda what, total: bar.update(task, description=what, total=total, advance=1),
            )
    except competitor.CompetitorError as exc:
        raise typer.BadParameter(str(exc), param_hint="--retest-for") from exc
    console.print(
        f"{seeds} retest seeds of {run}'s checks in {out}: pass it to that run's command as one more --benchmark-run",
        markup=False,
    )


def _verify_suite(op: str | None, cases: Path | None, problem: Path | None, api: str | None, impl) -> tuple:
    """(the suite to verify, what the report adds to its environment) of the one source given: OP's suite,
    a case file, a problem file (with its --impl candidate), or a function (--api)."""

    given = [
        n for n, v in (("OP", op if cases is None else None), ("--problem", problem), ("--api", api)) if v is not None
    ]
    if len(given) > 1:
        raise typer.BadParameter(f"give one of OP, --cases, --problem, --api (got {' and '.join(given)})")
    try:
        if problem is not None:
            if not impl or len(impl) != 1:
                raise typer.BadParameter(
                    (
                        "--problem needs exactly one --impl: the candidate file (new.py, or new.py:NAME for a class "
                        "other "
                        "than ModelNew)"
                    ),
                    param_hint="--impl",
                )
            p = problems.load(str(problem), impl[0])
            return problems.suite(p), problems.describe(p)
        if api is not None:
            return atk.api_suite(api), {}
        if op is None and cases is None:
            raise typer.BadParameter(
                "name an operator, or give --cases FILE.yaml, --api MODULE.FUNCTION or --problem ref.py",
                param_hint="OP",
            )
        if cases is not None and not cases.exists():
            raise typer.BadParameter(f"no such case file: {cases}", param_hint="--cases")
        if op is not None and cases is None:
            _spec(op)
        suite = load_suite(cases if cases is not None else op)
        if cases is not None and op is not None and suite.name != op:
            raise typer.BadParameter(f"{cases} describes {suite.name}, not {op}", param_hint="--cases")
        return suite, {}
    except (problems.ProblemError, CaseFileError, ReferenceError) as exc:
        raise typer.BadParameter(str(exc)) from exc


@app.command()
def compare(
    run_a: str = typer.Argument(
        ..., help="a verify run's --out folder (RUN, or RUN:PROVIDER for one of its providers)"
    ),
    run_b: str = typer.Argument(..., help="the run to compare it with (RUN or RUN:PROVIDER)"),
    out: Path = typer.Option(Path("tileport-compare"), help="folder for compare.md, compare.html and compare.png"),
) -> None:
    """Two verify runs side by side (the original kernel on its chip against the port): per provider, dtype and
    output each side's errors against the golden and verdicts, and the cases where the verdicts disagree.

    \b
    Example: tileport compare gpu-run npu-run --out compare
    """

    try:
        tbls, points = matched.compare(run_a, run_b)
    except CompetitorError as exc:
        raise typer.BadParameter(str(exc)) from exc
    for t in tbls:
        if t.rows:
            print_table(t)
    paths = rendered.write(tbls, points, out, f"tileport compare {run_a} {run_b}")
    console.print(f"comparison: {paths['md']} and {paths['html']} in {out}", markup=False)


@app.command()
def report(
    run: Path = typer.Argument(..., help="a finished verify run's --out folder (its results.json and journal)"),
    out: Path | None = typer.Option(None, help="folder for the report's files (default: the run's own folder)"),
) -> None:
    """A verify run's full report (report.md, report.html, results.json/csv, plots) rendered again from the
    run's machine-readable results, without running a case: after an upgrade of the report, or into another
    folder. Exits 1 for a failed run, as verify did.

    \b
    Example: tileport report tileport-report --out report-again
    """

    try:
        rep = rebuilt(run)
    except NotARun as exc:
        raise typer.BadParameter(str(exc), param_hint="RUN") from exc
    paths = write_report(rep, out or run)
    _print_verdict(rep, rep.level, paths)
    if not rep.passed:  # the run's verdict, as verify's exit status gave it
        raise typer.Exit(1)


@app.command()
def cases(
    op: str | None = typer.Argument(None, help=_ops_help("list the cases of")),
    level: str = typer.Option("L0", help="quick, L0, L1 or L2"),
    out: Path | None = typer.Option(
        None,
        help=(
            "JSON file for the cases and their coverage (default cases.json); with --from-model, the folder for the "
            "case files (default model-cases)"
        ),
    ),
    dtype: list[str] | None = typer.Option(
        None, metavar="DTYPE", help="fp32/float32, fp16/float16, bf16/bfloat16 (repeatable; default: the suite's)"
    ),
    seed: int = typer.Option(0, help="seed of the generated cases"),
    from_model: str | None = typer.Option(
        None,
        "--from-model",
        metavar="CONFIG",
        help=(
            "record the shapes the patched operators get in a training step of CONFIG's model (a config.json, a "
            "directory holding one, or a test family) as case files for verify --cases"
        ),
    ),
) -> None:
    """Write OP's generated cases without running them (as the test kit's case command does): per case its
    id, inputs' shapes and dtypes, attributes, distribution (mu, sigma), outliers and scenario. With
    --from-model: a case file per operator at the model's own shapes.

    \b
    Example: tileport cases OP --level L1 --out cases.json
    Example: tileport cases --from-model llama --out model-cases
    Then:    tileport verify OP --cases model-cases/OP.yaml
    """

    if from_model is not None:
        _cases_from_model(from_model, out or Path("model-cases"), dtype)
        return
    if op is None:
        raise typer.BadParameter("name an operator, or give --from-model CONFIG", param_hint="OP")
    out = out or Path("cases.json")
    _spec(op)
    suite = load_suite(op)
    if level not in suite.levels:
        raise typer.BadParameter(
            f"unknown level {level!r}; choose from {', '.join(suite.levels)}", param_hint="--level"
        )
    try:
        records = [record(suite, c) for c in generate_cases(suite, level, _dtypes(dtype), seed)]
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from exc
    summary = coverage(records)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(
        json.dumps({"op": op, "level": level, "seed": seed, "coverage": summary, "cases": records}, indent=1)
    )
    t = Table(title=escape(f"{op} {level}: {summary['cases']} cases ({summary['scale']} in the standard's scale)"))
    t.add_column("what")
    t.add_column("count")
    for key in ("per_dtype", "distributions", "dimension_counts", "scenarios", "extras"):
        t.add_row(key.replace("_", " "), escape(", ".join(f"{k}: {v}" for k, v in summary[key].items()) or "-"))
    t.add_row("outlier positions", str(summary["outlier_positions"]))
    console.print(t)
    console.print(f"cases: {out}", markup=False)


def _cases_from_model(config: str, out: Path, dtype: list[str] | None) -> None:

    dtypes = _dtypes(dtype) or [torch.bfloat16]
    if len(dtypes) != 1:
        raise typer.BadParameter("--from-model takes one --dtype (the model's)", param_hint="--dtype")
    try:
        with console.status(f"one training step of {config}, patched"):
            paths = capture(config, out, dtype=dtypes[0])
    except (ValueError, ImportError) as e:
        raise typer.BadParameter(str(e), param_hint="--from-model") from None
    for path in paths:
        console.print(f"wrote {path}: tileport verify {path.stem.split('-')[0]} --cases {path}", markup=False)


def _shape(text: str) -> tuple[int, ...]:
    try:
        dims = tuple(int(d) for d in text.lower().split("x"))
    except ValueError:
        dims = ()
    if not dims or any(d < 1 for d in dims):
        raise typer.BadParameter(
            f"shape {text!r} is not like 1024x512 or 1x128x8x64 (positive integers joined by x)", param_hint="--shape"
        )
    return dims


@app.command()
def bench(
    op: str | None = typer.Argument(None, help=_ops_help("benchmark")),
    model: str | None = typer.Option(
        None,
        "--model",
        metavar="CONFIG",
        help=(
            "a model's training and forward steps instead of an operator: a transformers config.json, a directory "
            "holding one, or a test family (llama, qwen3, ...); unpatched and patched by tileport, each eager and "
            "under torch.compile"
        ),
    ),
    mode: list[str] | None = typer.Option(None, metavar="MODE", help="fwd, bwd, fwdbwd (repeatable; default: all)"),
    dtype: list[str] | None = typer.Option(
        None, metavar="DTYPE", help="fp32/float32, fp16/float16, bf16/bfloat16 (repeatable; default: all three)"
    ),
    threads: list[int] | None = typer.Option(None, metavar="N", help="thread counts (repeatable; default: 1 and 2)"),
    shape: list[str] | None = typer.Option(
        None,
        metavar="SHAPE",
        help="shapes in the form of OP's sweep: 1024x512 (rows x D), 1x128x8x64 (by named "
        "dimensions, as OP declares them; repeatable; default: the sweep)",
    ),
    workload: list[str] | None = typer.Option(
        None, metavar="NAME", help="named workloads (repeatable), 'all' for every one"
    ),
    backend: list[str] | None = typer.Option(
        None, metavar="NAME", help="tileport backends to time (default: every available one)"
    ),
    quick: bool = typer.Option(False, help="small shapes only, short budgets"),
    budget: float = typer.Option(0.4, help="seconds of interleaved rounds per group (large shapes: 3x)"),
    compile_baseline: bool = typer.Option(True, "--compile/--no-compile", help="include torch.compile"),
    csv: Path | None = typer.Option(None, help="CSV to append the rows to (default: bench.csv in --out)"),
    plot: bool = typer.Option(False, help="only draw the PNGs of the CSV's latest run, do not time"),
    out: Path = typer.Option(
        Path("tileport-bench"),
        help=(
            "folder for the CSV, the PNGs and the markdown table (the project's own results: --out "
            "benchmarks/results/OP)"
        ),
    ),
    device: str = typer.Option("cpu", help="cpu, cuda (an NVIDIA GPU) or npu (an Ascend NPU with torch_npu)"),
    impl: list[str] | None = typer.Option(
        None,
        "--impl",
        metavar="MODULE:FUNCTION",
        help=(
            "an implementation of OP's contract to time beside the backends: MODULE:FUNCTION or "
            "path/to/file.py:FUNCTION (repeatable)"
        ),
    ),
    arg: list[str] | None = typer.Option(
        None, "--arg", metavar="NAME=INPUT", help="map a parameter of --impl's function: NAME=INPUT (repeatable)"
    ),
    busy: int = typer.Option(
        0,
        min=0,
        metavar="N",
        help="keep N competing processes spinning while timing (a shared machine; named in the rows)",
    ),
) -> None:
    """Time OP's providers side by side (tileport backends, torch eager, torch.compile, a copy of the same
    bytes), append to the CSV, write the markdown table and PNGs.

    \b
    Example: tileport bench OP --quick --mode fwd
    """
    if model is not None:
        _bench_model(model, dtype, budget, out, quick)
        return
    if op is None:
        raise typer.BadParameter("name an operator to benchmark, or a model with --model CONFIG", param_hint="OP")
    from .bench.plots import bench_plots, latest  # matplotlib: imported where plots are drawn, not at start-up

    s = _spec(op)
    csv = csv or out / "bench.csv"  # a run writes only where it is told
    if not plot:
        modes = mode or list(s.modes)
        bad = [m for m in modes if m not in s.modes]
        if bad:
            raise typer.BadParameter(f"unknown mode {bad[0]!r}; choose from {', '.join(s.modes)}", param_hint="--mode")
        names = list(s.workloads) if workload == ["all"] else (workload or [])
        bad = [w for w in names if w not in s.workloads]
        if bad:
            raise typer.BadParameter(
                f"unknown workload {bad[0]!r}; choose from {', '.join(s.workloads)}", param_hint="--workload"
            )
        shapes = [_shape(t) for t in shape] if shape else ([] if names else s.sweep[:4] if quick else s.sweep)
        for x in shapes:  # the spec's example says which forms it takes (tried at that rank with every size 1)
            try:
                s.example((1,) * len(x), torch.float32, "cpu", torch.Generator().manual_seed(0))
            except (ValueError, TypeError, IndexError, RuntimeError) as exc:
                like = "x".join(map(str, s.sweep[0]))
                given = "x".join(map(str, x))
                raise typer.BadParameter(
                    f"{given} is not a shape {op}'s benchmarks take (its sweep's are like "
                    f"{like}): {type(exc).__name__}: {exc}",
                    param_hint="--shape",
                ) from None

        try:
            devices.check(device)
        except ValueError as exc:
            raise typer.BadParameter(str(exc), param_hint="--device") from exc

        try:
            impls = tuple(Implementation(resolve(s, t, arg)) for t in impl or ())
        except ImplError as exc:
            raise typer.BadParameter(str(exc), param_hint="--impl") from exc
        dtypes = _dtypes(dtype) or list(BENCH_DTYPES)
        takes = _bench_backends(op, dtypes, backend, devices.kind(device), bool(impls))
        groups = bench_plan(op, modes, dtypes, shapes, threads or [1, 2], names)
        with _progress() as bar:
            task = bar.add_task("bench", total=len(groups))

            def step(what: str) -> None:
                bar.update(task, description=what)
                bar.advance(task)

            rows, failed = [], {}
            for names_, part in _by_backends(groups, takes).items():  # one run per set of backends (dtypes differ)
                rows += run_bench(
                    op,
                    part,
                    [*map(Backend, names_), *impls],
                    budget / 3 if quick else budget,
                    compile_baseline,
                    progress=step,
                    device=device,
                    busy=busy,
                    failed=failed,
                )
        csvfile.append(csv, rows)
        console.print(f"appended {len(rows)} rows to {csv}", markup=False)
        for provider, why in failed.items():
            console.print(f"not timed: {provider}: its call raised: {why}", markup=False, highlight=False)
    rows = latest([r for r in csvfile.read(csv) if r["operator"] == op]) if csv.exists() else []
    if not rows:
        raise typer.BadParameter(f"{csv} holds no {op} rows; run `tileport bench {op}` first", param_hint="--csv")
    out.mkdir(parents=True, exist_ok=True)
    tables = [performance_table(rows, f"tileport bench {op}")]
    rates = matmul_table(rows)
    if rates is not None:
        tables.append(rates)
    judged = judge_bar(rows, s.bar, (backend or ["tilelang"])[0]) if s.bar else []
    if judged:
        tables.insert(0, bar_table(judged))
    header = f"# tileport bench {op}\n\n{rows[0]['machine']}; {rows[0]['versions']}; run {rows[0]['run']}\n\n"
    header += "".join(f"{line.strip()}\n\n" for line in noise.summary(rows, shown=len(rows)))
    (out / f"{op}.md").write_text(header + "\n".join(table_md(t) for t in tables))
    pngs = bench_plots(rows, out, op)
    if not plot:
        for t in tables:
            print_table(t)
    for line in noise.summary(rows):
        console.print(line, markup=False, highlight=False)
    console.print(f"table: {out / (op + '.md')}; plots: {', '.join(p.name for p in pngs)}", markup=False)


def _bench_model(config: str, dtype: list[str] | None, budget: float, out: Path, quick: bool) -> None:
    """``tileport bench --model CONFIG``: the model's steps, unpatched, compiled and patched, in one table."""

    dtypes = _dtypes(dtype) or [torch.bfloat16]
    if len(dtypes) != 1:
        raise typer.BadParameter("a model is benchmarked in one dtype at a time", param_hint="--dtype")
    try:
        rows, replaced = model_bench.run(
            config,
            dtype=dtypes[0],
            budget_s=budget if budget != 0.4 else (4.0 if quick else 20.0),
            seq=64 if quick else 256,
            progress=lambda m: console.print(m, markup=False),
        )
    except (ValueError, ImportError) as exc:
        raise typer.BadParameter(str(exc), param_hint="--model") from None

    text = (
        f"# {config}, {dtypes[0]}, {torch.get_num_threads()} threads, "
        f"{machine()}\n\n{model_bench.table(rows)}\n\npatched:\n```\n{replaced}\n```\n"
    )
    out.mkdir(parents=True, exist_ok=True)
    (out / "model.md").write_text(text)
    console.print(text, markup=False)
    console.print(f"written: {out / 'model.md'}", markup=False)


def _bench_backends(op: str, dtypes: list, wanted: list[str] | None, kind: str, impls: bool) -> dict:
    """{dtype: the backends to time at it}: the requested ones (default: every fast one available) that take it,
    by the registry; a backend that does not is left out with a note. A backend that cannot run ``op`` here at
    all, or a dtype nothing is left to time at (no backend, no --impl), is a usage error naming who takes it."""

    asked = tileport_backends(op, kind) if wanted is None else list(wanted)
    kernels = _spec(op).kernel_op  # the operator whose kernels serve op (op's own, or the one it is composed over)
    for b in asked:
        why = (
            REGISTRY.rejection(b, kernels, kind, [])
            if b in REGISTRY.names()
            else f"unknown backend {b!r}; backends: {', '.join(REGISTRY.names())}"
        )
        if why is not None:
            raise typer.BadParameter(why, param_hint="--backend")
    takes = {}
    for d in dtypes:
        takes[d] = [b for b in asked if REGISTRY.rejection(b, kernels, kind, [d]) is None]
        left, takers = [b for b in asked if b not in takes[d]], ", ".join(_takers(op, kind, d))
        if not takes[d] and not impls:
            hint = (
                f"backends that take it: {takers} (--backend {takers.split(', ')[0]})"
                if takers
                else "no backend takes it"
            )
            raise typer.BadParameter(
                (
                    f"nothing to time at {dtype_name(d)}: {', '.join(asked) or 'no backend'} does not take it for "
                    f"{op} on {kind}; {hint}"
                ),
                param_hint="--dtype",
            )
        if left:
            console.print(
                f"not timing {', '.join(left)} at {dtype_name(d)}: not taken for {op} on {kind} (backends that take "
                f"it: {takers or 'none'})",
                markup=False,
                highlight=False,
            )
    return takes


def _takers(op: str, kind: str, dtype) -> list[str]:
    """The registered backends that can run ``op`` at ``dtype`` on this device kind here."""

    kernels = _spec(op).kernel_op
    return [b for b in REGISTRY.names() if REGISTRY.rejection(b, kernels, kind, [dtype]) is None]


def _by_backends(groups: list, takes: dict) -> dict[tuple, list]:
    """The bench groups split by the backends their dtype is timed on (in their order)."""
    out: dict[tuple, list] = {}
    for g in groups:
        out.setdefault(tuple(takes[g.dtype]), []).append(g)
    return out


@app.command()
def doctor(as_json: bool = typer.Option(False, "--json", help="print the findings as JSON")) -> None:
    """Check Python, torch, TileLang, the compiler, OpenMP, the kernel cache, glibc/libstdc++, CUDA, Ascend
    (torch_npu, CANN, bisheng) and say how to fix each problem. Exit code 1 when the default CPU backend
    cannot run.

    \b
    Example: tileport doctor --json
    """

    findings = run_checks()
    if as_json:
        typer.echo(json.dumps([dataclasses.asdict(f) for f in findings], indent=1))
    else:
        table = Table(title="tileport doctor", title_justify="left")
        for col in ("check", "status", "detail", "fix"):
            table.add_column(col)
        color = {"ok": "green", "warn": "yellow", "fail": "red", "info": "blue"}
        for f in findings:
            table.add_row(f.check, f"[{color[f.status]}]{f.status}[/]", escape(f.detail), escape(f.fix))
        console.print(table)
    if not default_backend_runs(findings):
        if not as_json:
            console.print("[red]the default CPU backend (tilelang) cannot run here; fix the failed checks[/]")
        raise typer.Exit(1)


@app.command()
def lower(
    op: str | None = typer.Argument(
        None, help=_ops_help("lower") + " (with --impl: the contract its inputs are drawn from)"
    ),
    target: str = typer.Option(
        ...,
        help=(
            "cuda, ascend (Ascend 950, arch35: TileLang), or ascend-a2 / ascend-a3 (arch32: the Triton kernels "
            "through triton-ascend); with --impl also cpu (a TileLang kernel built for this CPU)"
        ),
    ),
    dtype: str = typer.Option("fp16", help="fp32/float32, fp16/float16, bf16/bfloat16"),
    dim: int = typer.Option(4096, help="row length D the kernels are built for"),
    out: Path = typer.Option(Path("tileport-lower"), help="folder for the sources and binaries"),
    arch: str = typer.Option("sm_90", help="CUDA architecture"),
    rsqrt: str = typer.Option("exact", help="CUDA: exact (__frsqrt_rn) or approx (rsqrt.approx.f32)"),
    nr_steps: int = typer.Option(1, help="Ascend: Newton-Raphson steps after the hardware rsqrt"),
    impl: str | None = typer.Option(
        None,
        metavar="MODULE:FUNCTION",
        help=(
            "your own kernel: a Triton launcher (yourpkg.kernels:launch, or a package's), its Triton kernels "
            "captured and judged for --target ascend-a2/a3; or a TileLang kernel (FILE.py:KERNEL: a T.prim_func, a "
            "function returning one, or a @tilelang.jit function) for --target ascend (lowered, each GPU-only "
            "construct named with its Ascend counterpart) or cpu (built for this CPU, as verify --impl runs it)"
        ),
    ),
    arg: list[str] | None = typer.Option(
        None,
        metavar="NAME=SHAPE:DTYPE",
        help=(
            "an argument of --impl's function: NAME=SHAPE:DTYPE (x=4096x2048:bfloat16) or NAME=VALUE (eps=1e-6; a "
            "TileLang kernel's sizes, M=1024) (repeatable)"
        ),
    ),
    rows: int = typer.Option(256, help="with OP and --impl: rows of the drawn inputs"),
    cases: Path | None = typer.Option(
        None, help="with --impl: a case file (a tileport suite or the test kit's design YAML): its quick cases' inputs"
    ),
    problem: Path | None = typer.Option(
        None, help="with --impl: a KernelBench-style problem file: get_inputs() (and get_init_inputs() for a ModelNew)"
    ),
) -> None:
    """Write OP's forward and backward device source for TARGET; build a cubin when nvcc is present. With
    --impl, capture your function's Triton launches and say, per kernel, whether it lowers for the chip and
    what to change where it does not (lower.md, lower.json; exit 1 when one does not); or lower your TileLang
    kernel for Ascend (--target ascend) or build it for this CPU (--target cpu).

    \b
    Example: tileport lower OP --target ascend --dim 4096
    Example: tileport lower --impl yourpkg.kernels:launch --arg x=4096x2048:bfloat16 --target ascend-a2
    Example: tileport lower --impl kernels.py:gemm --target ascend    (a module-level T.prim_func)
    """
    if impl is not None:
        _lower_impl(op, impl, arg, target, dtype, dim, rows, out, cases, problem)
        return
    if op is None:
        raise typer.BadParameter(
            "name an operator (see `tileport ops`), or your own function with --impl", param_hint="OP"
        )

    _spec(op)
    if rsqrt not in ("exact", "approx"):
        raise typer.BadParameter(f"rsqrt must be exact or approx, got {rsqrt!r}", param_hint="--rsqrt")
    if nr_steps < 0:
        raise typer.BadParameter(f"nr-steps must be >= 0, got {nr_steps}", param_hint="--nr-steps")
    (dt,) = _dtypes([dtype])
    given = {"rsqrt": rsqrt} if target == "cuda" else {"nr_steps": nr_steps}
    options = {k: v for k, v in given.items() if v != {"rsqrt": "exact", "nr_steps": 1}[k]}  # the kernels' defaults

    if target.startswith("ascend-"):
        options = {}
    try:
        result = run_lower(op, target, dt, dim, out, arch=arch, **options)
    except (KernelTodo, OverBudget, RuntimeError) as exc:  # one line: what is missing, too big, or not lowered
        err_console.print(f"tileport lower {op}: {exc}", markup=False, highlight=False)
        raise typer.Exit(2) from None
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from exc
    for path in result.sources + result.binaries:
        console.print(f"wrote {path}", markup=False)
    for name, used in result.on_chip.items():
        cube = "".join(f", {memory} {size / 1024:.1f} KB" for memory, size in result.cube.get(name, {}).items())
        console.print(f"{name}: {used / 1024:.1f} KB of on-chip memory{cube}", markup=False)
    for note in result.notes:
        console.print(note, markup=False)


def _lower_tile_program(impl: str, target: str, given: dict, out: Path) -> None:
    """``lower --impl --target ascend|cpu``: a user's TileLang kernel lowered for Ascend 950 or built for the CPU."""

    try:
        verdict = tile_programs.check(impl, target, given)
    except (ImplError, ValueError) as exc:
        raise typer.BadParameter(str(exc), param_hint="--impl") from None
    for path in tile_programs.write(verdict, out):
        console.print(f"wrote {path}", markup=False)
    (console if verdict.ok else err_console).print(tile_programs.markdown(verdict), markup=False, highlight=False)
    raise typer.Exit(0 if verdict.ok else 1)


def _readiness_cases(op, cases: Path, limit: int = 4) -> tuple[object, list[dict]]:
    """(spec, inputs) of a case file's first quick cases of distinct shapes (each shape compiles its own
    kernels)."""

    suite = load_suite(cases)
    spec = _spec(op) if op is not None else spec_of(suite)
    seen, examples = set(), []
    for case in generate_cases(suite, "quick"):
        if case.shape in seen or len(examples) >= limit:
            continue
        seen.add(case.shape)
        examples.append(make_inputs(suite, case))
    return spec, examples


def _lower_impl(op, impl, arg, target, dtype, dim, rows, out, cases=None, problem=None) -> None:
    """``lower --impl``: the readiness check of a user's Triton launcher for an A2/A3 chip."""

    if target not in ("ascend-a2", "ascend-a3", "ascend", "cpu"):
        raise typer.BadParameter(
            f"--impl is judged for ascend-a2 or ascend-a3 (a Triton launcher), ascend or cpu (a TileLang "
            f"kernel), not {target!r}",
            param_hint="--target",
        )
    try:
        given = dict(parse_arg(a) for a in arg or ())
    except ImplError as exc:
        raise typer.BadParameter(str(exc), param_hint="--arg") from None
    if target in ("ascend", "cpu"):
        _lower_tile_program(impl, target, given, out)
        return
    spec = examples = loaded = None
    if problem is not None:
        try:
            loaded = import_file(problem.expanduser().resolve())
        except Exception as exc:  # noqa: BLE001 - the problem file's own error, in one line
            raise typer.BadParameter(
                f"{problem} does not import: {type(exc).__name__}: {exc}", param_hint="--problem"
            ) from None
        if not all(hasattr(loaded, n) for n in ("get_inputs", "get_init_inputs")):
            raise typer.BadParameter(
                f"{problem}: a problem file defines get_inputs() and get_init_inputs()", param_hint="--problem"
            )
    elif cases is not None:
        try:
            spec, examples = _readiness_cases(op, cases)
        except ValueError as exc:
            raise typer.BadParameter(str(exc), param_hint="--cases") from None
    elif op is not None:
        spec = _spec(op)
        (dt,) = _dtypes([dtype])
        examples = [spec.example((rows, dim), dt, "cpu", torch.Generator().manual_seed(0))]
    elif not given:
        raise typer.BadParameter(
            "give the function's arguments (--arg NAME=SHAPE:DTYPE), an operator to draw them from, "
            "--cases or --problem",
            param_hint="--arg",
        )
    try:
        result = readiness_check(impl, target, given, spec, examples, loaded)
    except (ImplError, ValueError) as exc:
        raise typer.BadParameter(str(exc), param_hint="--impl") from None
    for path in readiness_report.write(result, out):
        console.print(f"wrote {path}", markup=False)
    for line in readiness_report.summary(result):
        (console if result.ok else err_console).print(line, markup=False, highlight=False)
    raise typer.Exit(0 if result.ok else 1)


@app.command()
def scaffold(
    name: str = typer.Argument(..., help="the new operator's name, a lower-case identifier (group_norm)"),
    like: str | None = typer.Option(
        None,
        help=(
            "the operator whose signature, spec fields and case suite it starts from (default, without a signature: "
            "the simplest operator)"
        ),
    ),
    inputs: str | None = typer.Option(
        None,
        help=(
            "tensor inputs, comma-separated, ? for optional: by role, NAME:ROLE with ROLE rows or vector "
            "(x:rows,gate:rows,weight:vector?), or by named dimensions, NAME:[SHAPE] then :-separated words float, "
            "int64, "
            "int32, index, bool, like:OTHER, nograd, in[LOW,HIGH) (q:[B,T,H,D],k:[B,T,Hk,D]?,cos:[T,R/2]:nograd,"
            "pos:[B,T]:index?; the first is float with a gradient, other floating ones like it with one)"
        ),
    ),
    attrs: str | None = typer.Option(
        None, help="attributes NAME=DEFAULT, comma-separated; a choice A|B|C: eps=1e-6,activation=silu|sigmoid"
    ),
    outputs: str | None = typer.Option(
        None,
        help=(
            "outputs, as --inputs gives its tensors: NAME:ROLE with ROLE rows or per_row (y:rows,rstd:per_row), or "
            "NAME:[SHAPE] with a dtype word, like the first input by default (q_out:[B,T,H,D])"
        ),
    ),
    where: str | None = typer.Option(None, help="constraints between named dimensions, comma-separated: 'R <= D'"),
    root: Path | None = typer.Option(
        None, help="the source checkout to write into (default: the one tileport runs from)"
    ),
    package: Path | None = typer.Option(
        None,
        help=(
            "write an operator package outside tileport into this (new or empty) folder: its pyproject declares the "
            "tileport.ops entry point"
        ),
    ),
    dry_run: bool = typer.Option(False, "--dry-run", help="list the files it would write, write nothing"),
) -> None:
    """Write a new operator's file set (spec and interface, torch reference, TileLang CPU/CUDA/Ascend and Triton
    kernel modules, suite, tests, docs page) with TODOs where the math goes, and its export line; print what
    remains to write.

    \b
    Example: tileport scaffold gated_norm --inputs x:rows,gate:rows,weight:vector? --attrs eps=1e-6 --outputs
    y:rows,rstd:per_row
    Example: tileport scaffold my_rope --inputs "q:[B,T,H,D],cos:[T,R/2]:nograd,sin:[T,R/2]:nograd"
    --outputs "q_out:[B,T,H,D]" --where "R <= D"
    """

    sig = {"inputs": inputs, "attrs": attrs, "outputs": outputs, "package": package, "where": where}
    try:
        p = scaffold_plan(name, like, root, **sig) if dry_run else write(name, like, root, **sig)
    except ScaffoldError as exc:
        raise typer.BadParameter(str(exc)) from exc
    for path in [*p.files, *([p.root / EXPORTS] if p.export else [])]:
        console.print(f"{'would write' if dry_run else 'wrote'} {path.relative_to(p.root)}", markup=False)
    console.print("\nWhat remains to write (also on the docs page):", markup=False)
    for i, item in enumerate(p.remains, 1):
        console.print(f"{i}. {item}", markup=False, highlight=False)


_LOSSES = tuple(m for m in PATCH_LOSSES if m)  # tileport.patch's loss modes, its default first


@app.command()
def patch(
    config: str = typer.Argument(
        ..., help="a transformers config.json, a directory holding one, or a test family (llama, qwen3, gemma2, ...)"
    ),
    dry_run: bool = typer.Option(
        False,
        "--dry-run",
        help="report what tileport.patch would replace in that model, and what it would leave and why",
    ),
    loss: str = typer.Option(_LOSSES[0], "--loss", help=f"the loss' replacement: {', '.join(_LOSSES)} or none"),
) -> None:
    """What tileport.patch(model) replaces in a model of CONFIG (built on the meta device: no weights, no download)."""
    if not dry_run:
        raise typer.BadParameter(
            "from the command line a patch is only reported: add --dry-run (in Python: tileport.patch(model))"
        )

    try:
        model = zoo.skeleton(zoo.load(config))
        report = patch_model(model, loss=None if loss == "none" else loss, dry_run=True)
    except (ValueError, ImportError) as e:
        raise typer.BadParameter(str(e)) from None
    typer.echo(f"{type(model).__name__} ({config}):")
    typer.echo(report.table())


@app.command()
def generate(
    ops: list[str] | None = typer.Argument(
        None, metavar="[OP]...", help="operators to regenerate (default: every one)"
    ),
    check: bool = typer.Option(
        False, "--check", help="write nothing; exit 1 when a file differs from what its spec generates"
    ),
) -> None:
    """Write each operator's interface (``<its package>/_interface.py``: checks, custom ops, autograd, public forms,
    module) from its spec. Run it after changing a spec; ``--check`` is what the test suite runs."""

    stale = []
    for name in ops or sorted(n for n, sp in specs().items() if not sp.composes):  # a composed operator has none
        spec = _spec(name)
        path = files.package_file(spec)
        if check:
            if path is None or not path.exists() or path.read_text() != files.text(spec):
                stale.append(name)
                console.print(f"{name}: {path} differs from what its spec generates", markup=False)
            continue
        path, changed = files.write(spec)
        console.print(f"{'wrote' if changed else 'unchanged'} {path}", markup=False)
    if stale:
        console.print(f"run `tileport generate {' '.join(stale)}`", markup=False)
        raise typer.Exit(1)


def _ray_flag(args: list[str]) -> list[str]:
    """``--ray`` takes an optional address (the parser has no optional values): a bare ``--ray`` becomes
    ``--ray local``; the next word is its address only if it looks like one (``auto``, ``local``, or with a
    colon: ``HOST:PORT``, ``ray://HOST:PORT``), so ``--ray OP`` still names the operator."""

    out = []
    for i, a in enumerate(args):
        out.append(a)
        if a == "--ray":
            nxt = args[i + 1] if i + 1 < len(args) else None
            if nxt is None or not (nxt in ("auto", LOCAL) or ":" in nxt):
                out.append(LOCAL)
    return out


def main() -> None:
    """The ``tileport`` command."""
    app(args=_ray_flag(sys.argv[1:]), prog_name="tileport")


if __name__ == "__main__":
    main()
