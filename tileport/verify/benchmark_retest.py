"""``tileport verify --retest-for RUN``: on the benchmark's machine, its provider run on the new seeds of the
checks a competitor's run (``--benchmark-run``) left awaiting a retest, kept as sides for that run to take."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from ..cases import make_inputs
from . import journal
from .accuracy import CaseOutcome, Judge
from .competitor import CompetitorError, Side


def retest_for(run: Path, out: Path, suite, cases: list, device: str = "cpu", progress=None) -> int:
    """On the benchmark's machine: the benchmark run's provider on the new seeds of ``run``'s checks awaiting
    the competitor's retest, kept as sides in ``out`` (a run ``--benchmark-run`` takes after the first).
    Returns the number of seeds run; CompetitorError where ``run`` has nothing to retest."""
    req = journal.read_request(run)
    provider = req.get("benchmark_provider")
    if not provider:
        raise CompetitorError(f"--retest-for {run}: that run was not judged against a benchmark run (--benchmark-run)")
    outcomes = journal.read(run)
    todo: dict[tuple[int, str], int] = {}
    for o in outcomes.values():
        for r in o.results:
            if r.retest is not None and r.retest.awaiting:
                todo[(r.case, r.output)] = max(todo.get((r.case, r.output), 0), r.retest.seeds)
    if not todo:
        raise CompetitorError(f"--retest-for {run}: no check there awaits the competitor's retest")
    by_index = {c.index: c for c in cases}
    limits = suite.level(req["level"]).limits
    impls = {provider[len("impl:") :]: {}} if provider.startswith("impl:") else {}
    j = Judge(suite, limits, device, impls)
    journal.write_request(
        out, {"op": req["op"], "level": req["level"], "retest_for": str(run.resolve()), "provider": provider}
    )
    writer = journal.Writer(out)
    total = sum(todo.values())
    done = 0
    try:
        for index in sorted({i for i, _ in todo}):  # one record per case (the journal keeps one per index)
            case, record = by_index[index], CaseOutcome(index)
            for (_, name), seeds in sorted((k, v) for k, v in todo.items() if k[0] == index):
                backward = j.backward_of(name)
                for s in range(case.seed + 1, case.seed + 1 + seeds):
                    inputs = make_inputs(suite, replace(case, seed=s))
                    under, gold = j.execute(inputs, provider, backward), j.golden(inputs, backward)  # no benchmark
                    record.retests[(provider, name, s)] = Side.of(
                        under[name], gold[name], j.spec.precision_dtype(name, case.dtype)
                    )
                    done += 1
                    if progress:
                        progress(f"{case.describe()} {name}: seed {s - case.seed} of {seeds}", total)
            writer.append(record)
    finally:
        writer.close()
    return done
