"""A finished verify run's ``Report`` rebuilt from its folder: the judged checks and the cross-backend pairs
from its journal (every case's outcome as it ran), the rest from its ``results.json``; so ``tileport report
RUN`` renders a run's full report again without running a case."""

from __future__ import annotations

import json
from pathlib import Path

from ..ops.spec import StudyResult
from ..precision import aggregate
from . import Report, journal
from .accuracy import merge
from .cluster import Placement


class NotARun(ValueError):
    """The folder holds no finished verify run (no results.json, or no journal)."""


def report(folder: Path):
    """The ``Report`` of the verify run written into ``folder``."""
    folder = Path(folder)
    doc_path = folder / "results.json"
    if not doc_path.is_file():
        raise NotARun(f"{folder} holds no results.json: not the folder of a finished `tileport verify --out` run")
    outcomes = journal.read(folder)
    if not outcomes:
        raise NotARun(f"{folder} holds no journal ({journal.RECORDS}): its cases' outcomes are not kept there")
    doc = json.loads(doc_path.read_text())
    if "runs" not in doc:
        raise NotARun(f"{doc_path} was written by an older tileport (it lacks the report's counts): run verify again")
    results, pairs, _ = merge(list(outcomes.values()))
    return Report(
        doc["op"],
        doc["level"],
        doc["limits"],
        doc["seed"],
        doc["environment"],
        doc["backends"],
        doc["cases"],
        doc["elements"],
        doc["runs"],
        doc["retest_seeds"],
        results,
        aggregate(results),
        pairs,
        [
            StudyResult(
                **{
                    **st,
                    "headers": tuple(st["headers"]),
                    "rows": tuple(map(tuple, st["rows"])),
                    "records": tuple(st["records"]),
                }
            )
            for st in doc["studies"]
        ],
        doc["performance"],
        doc["seconds"],
        doc["counts"],
        {k: tuple(v) for k, v in doc["skipped"].items()},
        doc["device"],
        [Placement(**{**p, "cases": tuple(p["cases"])}) for p in doc["placement"]],
        doc["originals"],
    )
