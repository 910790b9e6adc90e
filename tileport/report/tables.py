"""The tables of a verify report, built once and rendered by the markdown, html and console writers."""

from __future__ import annotations

from dataclasses import replace

from .benchrows import performance_table
from .table import Table
from .table import number as _g


def check_id(backend: str, dtype: str, output: str) -> str:
    """The html id of a (backend, dtype, output)'s rows: the verdict grid's cells link there."""
    return "check-" + "-".join("".join(ch if ch.isalnum() else "_" for ch in part) for part in (backend, dtype, output))


def _groups(results) -> dict[tuple, list]:
    """The results per (backend, dtype, output), in first-seen order."""
    out: dict[tuple, list] = {}
    for r in results:
        out.setdefault((r.backend, r.dtype, r.output), []).append(r)
    return out


def _quotas(sizes: dict, limit: int, floor: int = 1) -> dict:
    """Rows per group within ``limit``: small groups whole, the rest shared evenly among the larger ones (at
    least ``floor`` each, so every group has rows in the table and the verdict grid's links land)."""
    quota, left = {}, limit
    order = sorted(sizes, key=sizes.get)
    for i, key in enumerate(order):
        quota[key] = min(sizes[key], max(floor, left // (len(order) - i)))
        left -= quota[key]
    return quota


def _sampled(results, limit: int, floor: int = 1) -> tuple[list, int]:
    """At most about ``limit`` results, grouped per (backend, dtype, output), each group's failed ones first,
    every group present; and how many groups were cut."""
    groups = _groups(results)
    quota = _quotas({k: len(v) for k, v in groups.items()}, limit, floor)
    rows = []
    for key, rs in groups.items():
        rows += sorted(rs, key=lambda r: r.passed)[: quota[key]]  # stable: case order within failed, then passed
    return rows, sum(quota[k] < len(v) for k, v in groups.items())


def _first_ids(results, prefix: str = "") -> tuple[str, ...]:
    """An id on the first row of each (backend, dtype, output), none on the others."""
    seen, ids = set(), []
    for r in results:
        key = check_id(r.backend, r.dtype, r.output)
        ids.append("" if key in seen else prefix + key)
        seen.add(key)
    return tuple(ids)


def _cell_verdict(rs: list) -> tuple[str, str]:
    """One grid cell's text and the id prefix of the table holding its rows: failures, retests or every check."""
    failed = [r for r in rs if not r.passed]
    waiting = [r for r in failed if r.retest is not None and r.retest.awaiting]
    retested = [r for r in rs if r.passed and r.retest is not None]
    if not rs:
        return "no checks", ""
    if waiting and len(waiting) == len(failed):
        return f"awaiting retest ({len(waiting)} of {len(rs)})", "fail-"
    if failed:
        return f"FAIL ({len(failed)} of {len(rs)})", "fail-"
    if retested:
        return f"pass ({len(retested)} on retest, {len(rs)} checks)", "retest-"
    return f"pass ({len(rs)} checks)", ""


def verdict_grid(rep) -> Table:
    """Did it pass, and where not: per backend and dtype, each output's verdict (pass, passed on retest, failed,
    awaiting the competitor's retest, no checks), each cell linking to its rows: a failed cell to the failed
    checks, a retested one to the retests, a passing one to its group in the folded table of every check."""
    outputs = list(dict.fromkeys(r.output for r in rep.results))
    keys = list(dict.fromkeys((r.backend, r.dtype) for r in rep.results))
    groups = _groups(rep.results)
    rows, links = [], []
    for backend, dtype in keys:
        cells, hrefs = [backend, dtype], ["", ""]
        for out in outputs:
            text, prefix = _cell_verdict(groups.get((backend, dtype, out), []))
            cells.append(text)
            hrefs.append(f"#{prefix}{check_id(backend, dtype, out)}" if text != "no checks" else "")
        rows.append(tuple(cells))
        links.append(tuple(hrefs))
    return Table(
        f"Verdict per backend, dtype and output ({rep.limits} limits): {'PASS' if rep.passed else 'FAIL'}",
        ("backend", "dtype", *outputs),
        tuple(rows),
        "Each cell links to its rows: a failed cell to its failed checks below, a retested one to its retests, a "
        "passing one to its group in the folded table of every check at the end (results.csv holds every check). "
        '"no checks": the provider has no check of that output (an output it does not return, or a findings '
        "column, such as run for a case that did not run, with no finding).",
        anchor="verdict",
        links=tuple(links),
    )


def every_check(rep, limit: int = 3000) -> Table:
    """Every check's ratios and verdict, grouped per (backend, dtype, output); past ``limit`` rows a share per
    group, its failed checks first (folded: the full list is results.csv)."""
    shown, cut = _sampled(rep.results, limit)
    rows = tuple(
        (
            r.backend,
            str(r.case),
            r.dtype,
            r.shape_text(),
            r.value_range,
            r.attrs_text(),
            r.output,
            _g(r.verdict.ratios["mare"]),
            _g(r.verdict.ratios["mere"]),
            _g(r.verdict.ratios["rmse"]),
            "pass" if r.passed else "FAIL",
        )
        for r in shown
    )
    note = "Grouped per backend, dtype and output. Also in results.csv."
    if cut:
        note = (
            f"{len(shown)} of {len(rep.results)} checks, grouped per backend, dtype and output: {cut} groups show a "
            "share of "
            "their rows, failed checks first; every check is in results.csv (filter its backend, dtype and output "
            "columns)."
        )
    return Table(
        "Every check (ratios against the benchmark)",
        (
            "backend",
            "case",
            "dtype",
            "shape",
            "range",
            "attributes",
            "output",
            "MARE ratio",
            "MERE ratio",
            "RMSE ratio",
            "result",
        ),
        rows,
        note,
        fold=True,
        row_ids=_first_ids(shown),
        apart="checks.md",
    )


def _yes(ok: bool) -> str:
    return "yes" if ok else "NO"


def environment(rep) -> Table:
    env = rep.environment
    rows = [(k, str(v)) for k, v in env.items() if v != ""]
    rows += [
        (f"backend {b['name']}", ("available: " if b["available"] else "unavailable: ") + b["reason"])
        for b in rep.backends
    ]
    return Table("Environment", ("item", "value"), tuple(rows))


def summary(rep) -> Table:
    rows = [
        ("operator", rep.op),
        ("level", f"{rep.level} (ratio limits of {rep.limits})"),
        (
            "conforming run",
            "yes"
            if rep.counts.get("conforming")
            else "no: fewer cases and retest seeds than the standard, small-sample fuse off (evidence, not acceptance)",
        ),
        ("device", rep.device),
        ("result", "PASS" if rep.passed else f"FAIL ({len(rep.failures)} failed checks)"),
        (
            "cases",
            f"{rep.cases} ({rep.counts.get('beyond_scale', 0)} special scenarios and extra cases beyond the scale)",
        ),
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
        ""
        if all(met.values())
        else "This run is smaller than the standard asks: its verdict is evidence, not acceptance.",
    )


def case_counts(rep) -> Table:
    """The run's case counts side by side, each saying what it counts: the summary, the standard's table, the
    dual-benchmark table and the terminal's progress bar each count something else."""
    scale, beyond = rep.counts.get("actual", {}).get("cases", rep.cases), rep.counts.get("beyond_scale", 0)
    ran = len({r.case for r in rep.results})
    per = {}
    for a in rep.aggregates:
        per.setdefault(a.backend, []).append(f"{a.dtype} {a.cases}")
    timings = len({(r["mode"], r["dtype"], r["shape"], r["threads"]) for r in rep.perf})
    generated = (
        f"every case of the level, each dtype its own: the summary's cases ({scale} within the standard's scale + "
        f"{beyond} special scenarios and extras beyond it)"
    )
    missing = rep.cases - ran
    ran_what = "cases with results on at least one provider" + (
        f" ({missing} ran on none: see the cases a backend did not run)" if missing else ": every case"
    )
    per_what = "the dual-benchmark table's cases column, per dtype (its checks column counts a case once per output)"
    rows = [
        ("cases generated", str(rep.cases), generated),
        (
            "within the standard's scale",
            str(scale),
            "the cases the standard's minimum counts apply to: its table's cases in total",
        ),
        ("cases that ran", str(ran), ran_what),
        *((f"cases run by {b}", ", ".join(d), per_what) for b, d in per.items()),
    ]
    if timings:
        bar = (
            "(mode, dtype, shape, threads) groups of the performance table: the terminal's progress bar counts them "
            "after "
            f"the cases ({rep.cases} + {timings} = {rep.cases + timings} steps)"
        )
        rows.append(("timing groups", str(timings), bar))
    return Table("Case counts: which is which", ("count", "number", "what it counts"), tuple(rows))


def aggregates(rep) -> Table:
    rows = tuple(
        (
            a.backend,
            a.dtype,
            str(a.cases),
            str(a.checks),
            str(a.failed),
            str(a.retested),
            str(a.elements),
            _g(a.worst.get("mare", 0)),
            _g(a.worst.get("mere", 0)),
            _g(a.worst.get("rmse", 0)),
            "pass" if a.passed else "FAIL",
        )
        for a in rep.aggregates
    )
    bench = rep.environment.get("benchmark", "torch")
    named = "the torch benchmark" if bench == "torch" else "the benchmark"
    return Table(
        f"Dual benchmark per backend and dtype ({rep.limits}: worst ratio against {named})",
        (
            "backend",
            "dtype",
            "cases",
            "checks",
            "failed",
            "retested",
            "elements",
            "worst MARE",
            "worst MERE",
            "worst RMSE",
            "result",
        ),
        rows,
        "The benchmark (the same-dtype torch composite) is not judged against itself; its errors against the golden "
        "are in the next table."
        if bench == "torch"
        else f"The benchmark: {bench}.",
    )


def failures(rep, limit: int = 60) -> Table:
    """The failed checks, a share of each (backend, dtype, output) so every failed cell of the grid has rows here."""
    shown, cut = _sampled(rep.failures, limit, floor=3)
    rows = tuple(
        (
            r.backend,
            str(r.case),
            r.dtype,
            r.shape_text(),
            r.value_range,
            r.attrs_text(),
            r.output,
            "; ".join(r.failures),
        )
        for r in shown
    )
    note = (
        f"{len(shown)} of the {len(rep.failures)} failed checks, a share of each backend, dtype and output; all in "
        "results.csv "
        "(passed False)."
        if cut
        else ""
    )
    return Table(
        "Failed checks",
        ("backend", "case", "dtype", "shape", "range", "attributes", "output", "what failed"),
        rows,
        note,
        row_ids=_first_ids(shown, "fail-"),
    )


def retested(rep, limit: int = 60) -> Table:
    """Checks that passed on retest, a share of each (backend, dtype, output)."""
    passed = [r for r in rep.results if r.retest is not None and r.passed]
    shown, cut = _sampled(passed, limit, floor=3)
    rows = tuple((r.backend, str(r.case), r.dtype, r.shape_text(), r.output, "; ".join(r.failures)) for r in shown)
    note = (
        f"{len(shown)} of {len(passed)}, a share of each backend, dtype and output; all in results.csv (retested True)."
        if cut
        else ""
    )
    return Table(
        "Checks that failed on their first seed and passed the retest",
        ("backend", "case", "dtype", "shape", "output", "detail"),
        rows,
        note,
        row_ids=_first_ids(shown, "retest-"),
    )


def investigate(rep) -> Table:
    """Clause 5.3.3's third outcome: golden, output and benchmark all differ at an inf/nan."""
    rows = tuple(
        (r.backend, str(r.case), r.dtype, r.shape_text(), r.output, str(r.verdict.actual.nonfinite_review))
        for r in rep.results
        if r.verdict.actual.nonfinite_review
    )
    return Table(
        "inf/nan positions that need investigation (5.3.3: golden, output and benchmark all differ)",
        ("backend", "case", "dtype", "shape", "output", "positions"),
        rows,
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
    )
    return Table(
        "Originals: the upstream kernels as competitors",
        ("original", "where", "found", "in the comparison", "why not"),
        rows,
        "An original that runs is one more side of the cross-backend comparison (not judged by the standard); on the "
        "CPU it "
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
    rows = tuple(
        (who, d, o, _g(m), _g(e))
        for (who, d, o), (m, e) in sorted(worst.items(), key=lambda kv: (kv[0][1], kv[0][2], kv[0][0]))
    )
    return Table(
        "Every backend against the float64 golden (worst over the cases)",
        ("backend", "dtype", "output", "max MARE", "max RMSE"),
        rows,
    )


def cross_backend(rep) -> Table:
    rows = tuple(
        (f"{p.a} vs {p.b}", p.dtype, p.output, f"{p.identical}/{p.cases}", _g(p.max_abs), _g(p.max_rel))
        for p in rep.pairs
    )
    return Table(
        "Cross-backend comparison: the backends' outputs against each other",
        ("pair", "dtype", "output", "bit-identical cases", "max |a-b|", "max |a-b|/(|b|+1e-7)"),
        rows,
    )


STUDY_NOTE = (
    "A study of design alternatives, not a check of this run: its pass/fail column judges each alternative by the "
    "standard, and counts in no verdict above."
)


def studies(rep) -> list[Table]:
    """The operator's own studies (its spec names them), as they reported; plain, since their fail rows judge
    alternatives the operator does not ship, not this run."""
    return [
        Table(
            f"Study, not part of the verdict: {st.title}",
            st.headers,
            st.rows,
            f"{STUDY_NOTE} {st.note}".strip(),
            plain=True,
        )
        for st in rep.studies
    ]


def performance(rep) -> Table:
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
        "Where the case batches ran",
        ("host", "ip", "node (or error)", "batches", "cases", "worker processes"),
        rows,
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
    out += [summary(rep), case_counts(rep), counts(rep), aggregates(rep)]
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
