"""The tables of a verify report, built once and rendered by the markdown, html and console writers."""

from __future__ import annotations

from dataclasses import dataclass, replace



@dataclass(frozen=True)
class Table:
    title: str
    headers: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]
    note: str = ""
    fold: bool = False  # a long table: folded (<details>) in html, after the rest
    anchor: str = ""  # the table's html id
    row_ids: tuple[str, ...] = ()  # an html id per row (where other tables link to it)
    links: tuple[tuple[str, ...], ...] = ()  # per row and cell: an href, or "" for none


def check_id(backend: str, dtype: str, output: str) -> str:
    """The html id of a (backend, dtype, output)'s rows: the verdict grid's cells link there."""
    return "check-" + "-".join("".join(ch if ch.isalnum() else "_" for ch in part) for part in (backend, dtype, output))


def _first_ids(results) -> tuple[str, ...]:
    """An id on the first row of each (backend, dtype, output), none on the others."""
    seen, ids = set(), []
    for r in results:
        key = check_id(r.backend, r.dtype, r.output)
        ids.append("" if key in seen else key)
        seen.add(key)
    return tuple(ids)


def verdict_grid(rep) -> Table:
    """Did it pass, and where not: per backend and dtype, each output's verdict (pass, passed on retest, failed,
    awaiting the competitor's retest, not run), each cell linking to its rows."""
    outputs = list(dict.fromkeys(r.output for r in rep.results))
    keys = list(dict.fromkeys((r.backend, r.dtype) for r in rep.results))
    groups: dict[tuple, list] = {}
    for r in rep.results:
        groups.setdefault((r.backend, r.dtype, r.output), []).append(r)
    rows, links = [], []
    for backend, dtype in keys:
        cells, hrefs = [backend, dtype], ["", ""]
        for out in outputs:
            rs = groups.get((backend, dtype, out), [])
            failed = [r for r in rs if not r.passed]
            waiting = [r for r in failed if r.retest is not None and r.retest.awaiting]
            retested = [r for r in rs if r.passed and r.retest is not None]
            if not rs:
                cells.append("not run")
            elif waiting and len(waiting) == len(failed):
                cells.append(f"awaiting retest ({len(waiting)} of {len(rs)})")
            elif failed:
                cells.append(f"FAIL ({len(failed)} of {len(rs)})")
            elif retested:
                cells.append(f"pass ({len(retested)} on retest, {len(rs)} checks)")
            else:
                cells.append(f"pass ({len(rs)} checks)")
            hrefs.append("#" + check_id(backend, dtype, out) if rs else "")
        rows.append(tuple(cells))
        links.append(tuple(hrefs))
    return Table(
        f"Verdict per backend, dtype and output ({rep.limits} limits): {'PASS' if rep.passed else 'FAIL'}",
        ("backend", "dtype", *outputs), tuple(rows),
        "Each cell links to its rows: failures and retests below, every check in the folded table at the end.",
        anchor="verdict", links=tuple(links),
    )


def every_check(rep, limit: int = 3000) -> Table:
    """Every check's ratios and verdict (folded: the full list is results.csv)."""
    shown = rep.results[:limit]
    rows = tuple(
        (r.backend, str(r.case), r.dtype, "x".join(map(str, r.shape)), r.value_range, r.attrs_text(), r.output,
         _g(r.verdict.ratios["mare"]), _g(r.verdict.ratios["mere"]), _g(r.verdict.ratios["rmse"]),
         "pass" if r.passed else "FAIL")
        for r in shown
    )  # fmt: skip
    note = f"The first {limit} of {len(rep.results)}; every check is in results.csv." if len(rep.results) > limit else "Also in results.csv."
    return Table("Every check (ratios against the benchmark)", ("backend", "case", "dtype", "shape", "range", "attributes", "output",
                 "MARE ratio", "MERE ratio", "RMSE ratio", "result"), rows, note, fold=True, row_ids=_first_ids(shown))  # fmt: skip


def _yes(ok: bool) -> str:
    return "yes" if ok else "NO"


def _g(v: float) -> str:
    return f"{v:.3g}"


def environment(rep) -> Table:
    env = rep.environment
    rows = [(k, str(v)) for k, v in env.items() if v != ""]
    rows += [(f"backend {b['name']}", ("available: " if b["available"] else "unavailable: ") + b["reason"]) for b in rep.backends]
    return Table("Environment", ("item", "value"), tuple(rows))


def summary(rep) -> Table:
    rows = [
        ("operator", rep.op),
        ("level", f"{rep.level} (ratio limits of {rep.limits})"),
        ("conforming run", "yes" if rep.counts.get("conforming") else
         "no: fewer cases and retest seeds than the standard, small-sample fuse off (evidence, not acceptance)"),
        ("device", rep.device),
        ("result", "PASS" if rep.passed else f"FAIL ({len(rep.failures)} failed checks)"),
        ("cases", f"{rep.cases} ({rep.counts.get('beyond_scale', 0)} special scenarios and extra cases beyond the scale)"),
        ("output elements of the cases", str(rep.elements)),
        ("repeated runs per case (bit-identical)", str(rep.runs)),
        ("retest seeds after a failure", str(rep.retest_seeds)),
        ("seed", str(rep.seed)),
        ("wall time", f"{rep.seconds:.1f} s"),
    ]
    return Table("Summary", ("item", "value"), tuple(rows))


def counts(rep) -> Table:
    req, act, met = rep.counts["required"], rep.counts["actual"], rep.counts["met"]
    per = ", ".join(f"{d} {n}" for d, n in act["cases_per_dtype"].items())
    rows = (
        ("cases in total", str(req["cases"]), str(act["cases"]), _yes(met["cases"])),
        ("cases per dtype", str(req["cases_per_dtype"]), per, _yes(met["cases_per_dtype"])),
        ("runs per case", str(req["runs_per_case"]), str(act["runs_per_case"]), _yes(met["runs_per_case"])),
        ("output elements", str(req["elements"]), str(act["elements"]), _yes(met["elements"])),
    )
    return Table(
        f"The standard's minimum counts for {rep.limits}",
        ("count", "required", "this run", "met"),
        rows,
        "" if all(met.values()) else "This run is smaller than the standard asks: its verdict is evidence, not acceptance.",
    )


def aggregates(rep) -> Table:
    rows = tuple(
        (a.backend, a.dtype, str(a.cases), str(a.checks), str(a.failed), str(a.retested), str(a.elements),
         _g(a.worst.get("mare", 0)), _g(a.worst.get("mere", 0)), _g(a.worst.get("rmse", 0)), "pass" if a.passed else "FAIL")
        for a in rep.aggregates
    )  # fmt: skip
    bench = rep.environment.get("benchmark", "torch")
    named = "the torch benchmark" if bench == "torch" else "the benchmark"
    return Table(
        f"Dual benchmark per backend and dtype ({rep.limits}: worst ratio against {named})",
        ("backend", "dtype", "cases", "checks", "failed", "retested", "elements", "worst MARE", "worst MERE", "worst RMSE", "result"),
        rows,
        "The benchmark (the same-dtype torch composite) is not judged against itself; its errors against the golden "
        "are in the next table." if bench == "torch" else f"The benchmark: {bench}.",
    )


def failures(rep, limit: int = 50) -> Table:
    rows = tuple(
        (r.backend, str(r.case), r.dtype, "x".join(map(str, r.shape)), r.value_range, r.attrs_text(), r.output, "; ".join(r.failures))
        for r in rep.failures[:limit]
    )  # fmt: skip
    note = f"{len(rep.failures) - limit} more in results.csv" if len(rep.failures) > limit else ""
    return Table("Failed checks", ("backend", "case", "dtype", "shape", "range", "attributes", "output", "what failed"), rows, note,
                 row_ids=tuple("fail-" + i if i else "" for i in _first_ids(rep.failures[:limit])))  # fmt: skip


def retested(rep, limit: int = 50) -> Table:
    passed = [r for r in rep.results if r.retest is not None and r.passed][:limit]
    rows = tuple((r.backend, str(r.case), r.dtype, "x".join(map(str, r.shape)), r.output, "; ".join(r.failures)) for r in passed)
    return Table("Checks that failed on their first seed and passed the retest", ("backend", "case", "dtype", "shape", "output", "detail"), rows,
                 row_ids=tuple("retest-" + i if i else "" for i in _first_ids(passed)))  # fmt: skip


def investigate(rep) -> Table:
    """Clause 5.3.3's third outcome: golden, output and benchmark all differ at an inf/nan."""
    rows = tuple(
        (r.backend, str(r.case), r.dtype, "x".join(map(str, r.shape)), r.output, str(r.verdict.actual.nonfinite_review))
        for r in rep.results if r.verdict.actual.nonfinite_review
    )  # fmt: skip
    return Table(
        "inf/nan positions that need investigation (5.3.3: golden, output and benchmark all differ)",
        ("backend", "case", "dtype", "shape", "output", "positions"), rows,
        "Not failures by the standard's rule; listed for a person to look at.",
    )


def skipped(rep) -> Table:
    rows = tuple((b, str(n), why) for b, (n, why) in rep.skipped.items())
    return Table("Cases a backend did not run", ("backend", "cases", "why"), rows)


def originals(rep) -> Table:
    """The upstream kernels the operator was ported from: found or not, whether they took part, and why not."""
    rows = tuple(
        (o["name"], o["target"], "yes" if o["found"] else "no", "yes" if o["runs"] else "no", o["why"] or "-")
        for o in rep.originals
    )  # fmt: skip
    return Table(
        "Originals: the upstream kernels as competitors", ("original", "where", "found", "in the comparison", "why not"), rows,
        "An original that runs is one more side of the cross-backend comparison (not judged by the standard); on the CPU it "
        "runs under the Triton interpreter, on the quick level's cases. Install them with pip install tileport[peers].",
    )


def against_golden(rep) -> Table:
    """Worst MARE and RMSE against the float64 golden, per backend (the benchmark included), dtype and output."""
    worst: dict[tuple, list[float]] = {}
    bench = rep.environment.get("benchmark", "torch")
    for r in rep.results:
        for who, m in ((r.backend, r.verdict.actual), (f"{bench} (benchmark)", r.verdict.benchmark)):
            w = worst.setdefault((who, r.dtype, r.output), [0.0, 0.0])
            w[0], w[1] = max(w[0], m.mare), max(w[1], m.rmse)
    rows = tuple((who, d, o, _g(m), _g(e)) for (who, d, o), (m, e) in sorted(worst.items(), key=lambda kv: (kv[0][1], kv[0][2], kv[0][0])))
    return Table("Every backend against the float64 golden (worst over the cases)", ("backend", "dtype", "output", "max MARE", "max RMSE"), rows)


def cross_backend(rep) -> Table:
    rows = tuple(
        (f"{p.a} vs {p.b}", p.dtype, p.output, f"{p.identical}/{p.cases}", _g(p.max_abs), _g(p.max_rel))
        for p in rep.pairs
    )  # fmt: skip
    return Table(
        "Cross-backend comparison: the backends' outputs against each other",
        ("pair", "dtype", "output", "bit-identical cases", "max |a-b|", "max |a-b|/(|b|+1e-7)"),
        rows,
    )


def studies(rep) -> list[Table]:
    """The operator's own studies (its spec names them), as they reported."""
    return [Table(f"Study: {st.title}", st.headers, st.rows, st.note) for st in rep.studies]


def performance(rep) -> Table:
    from .benchrows import performance_table

    return performance_table(rep.perf)


def placement(rep) -> Table:
    """Where the case batches ran (a Ray run), per host; batches that did not come back are counted apart."""
    hosts: dict[tuple, list] = {}
    for p in rep.placement:
        row = hosts.setdefault((p.host, p.ip, p.node) if not p.error else ("(failed)", "", p.error), [0, 0, set()])
        row[0] += 1
        row[1] += len(p.cases)
        row[2].add(p.pid)
    rows = tuple((h, ip, node, str(b), str(c), str(len(pids))) for (h, ip, node), (b, c, pids) in sorted(hosts.items()))
    return Table(
        "Where the case batches ran", ("host", "ip", "node (or error)", "batches", "cases", "worker processes"), rows,
        "Each batch is one Ray task; results.json lists every batch with its cases, host and worker. A failed batch "
        "was split into single cases, each retried; a case that still did not run is a failed check.",
    )


def all_tables(rep) -> list[Table]:
    """The report's tables in reading order: the verdict grid, the failures and retests, what the run was,
    then the long tables (folded in html): every check, the cross-backend rows, the performance rows."""
    out = [verdict_grid(rep)] if rep.results else []
    if rep.failures:
        out.append(failures(rep))
    if any(r.retest is not None and r.passed for r in rep.results):
        out.append(retested(rep))
    if any(r.verdict.actual.nonfinite_review for r in rep.results):
        out.append(investigate(rep))
    out += [summary(rep), counts(rep), aggregates(rep)]
    if rep.skipped:
        out.append(skipped(rep))
    if rep.placement:
        out.append(placement(rep))
    if rep.results:
        out.append(against_golden(rep))
    if getattr(rep, "originals", None):
        out.append(originals(rep))
    out += studies(rep)
    out.append(environment(rep))
    if rep.results:
        out.append(every_check(rep))
    if rep.pairs:
        out.append(replace(cross_backend(rep), fold=True))
    if rep.perf:
        out.append(replace(performance(rep), fold=True))
    return out
