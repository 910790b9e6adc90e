"""Report writers: a verify run as report.md, a self-contained report.html, results.json and results.csv,
beside the PNG plots."""

from __future__ import annotations

import csv
import dataclasses
import json
import math
from pathlib import Path

from . import html, markdown, tables


def _clean(v):
    """JSON has no inf/nan: write them as strings."""
    if isinstance(v, float) and not math.isfinite(v):
        return str(v)
    if isinstance(v, dict):
        return {k: _clean(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_clean(x) for x in v]
    return v


def write_report(rep, out: str | Path) -> dict[str, Path]:
    """Write every file of the report into ``out``; returns {kind: path}."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    from . import plots  # matplotlib: imported where a report is drawn, kept out of the command line's start-up

    images = plots.verify_plots(rep, out)
    tbls = tables.all_tables(rep)
    title = f"tileport verify {rep.op} ({rep.level}): {'PASS' if rep.passed else 'FAIL'}"
    paths = {
        "md": out / "report.md",
        "html": out / "report.html",
        "json": out / "results.json",
        "csv": out / "results.csv",
    }
    paths["md"].write_text(markdown.document(title, tbls, [p.name for p in images]))
    for name, text in markdown.apart(title, tbls).items():
        paths[Path(name).stem] = out / name
        paths[Path(name).stem].write_text(text)
    paths["html"].write_text(html.document(title, tbls, images))
    rows = [r.row() for r in rep.results]
    with paths["csv"].open("w", newline="") as f:
        if rows:
            w = csv.DictWriter(f, fieldnames=list(rows[0]))
            w.writeheader()
            w.writerows(rows)
    doc = {
        "op": rep.op,
        "level": rep.level,
        "limits": rep.limits,
        "passed": rep.passed,
        "seed": rep.seed,
        "environment": rep.environment,
        "backends": rep.backends,
        "counts": rep.counts,
        "cases": rep.cases,
        "elements": rep.elements,
        "runs": rep.runs,
        "retest_seeds": rep.retest_seeds,
        "skipped": {k: list(v) for k, v in rep.skipped.items()},
        "seconds": rep.seconds,
        "aggregates": [dataclasses.asdict(a) | {"passed": a.passed} for a in rep.aggregates],
        "cross_backend": [dataclasses.asdict(p) for p in rep.pairs],
        "device": rep.device,
        "placement": [dataclasses.asdict(p) for p in rep.placement],
        "originals": list(getattr(rep, "originals", [])),
        "studies": [dataclasses.asdict(st) for st in rep.studies],
        "performance": rep.perf,
        "results": rows,
    }
    paths["json"].write_text(json.dumps(_clean(doc), indent=1))
    for p in images:
        paths[p.stem] = p
    return paths
