"""``tileport compare RUN_A RUN_B``: two verify runs matched case by case (the original GPU kernel against the
port), per provider, dtype and output: each side's errors against the golden (worst MARE, median MERE, worst
RMSE), the median of the per-case MERE ratio A / B, each side's verdicts, and the cases where the verdicts
disagree. A case whose inputs differ between the runs (another digest) stops the compare. Rendering is
``report/compare.py``'s.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from pathlib import Path

from ..report.table import Table
from ..report.table import number as _g
from . import journal
from .competitor import CompetitorError, providers


@dataclass
class Run:
    folder: str
    request: dict
    outcomes: dict
    providers: list[str]


def _run(spec: str) -> Run:
    """RUN or RUN:PROVIDER (the providers to compare; default every one the run holds)."""
    folder, _, want = spec.partition(":") if not Path(spec).exists() else (spec, "", "")
    try:
        request = journal.read_request(Path(folder))
    except journal.JournalError as exc:
        raise CompetitorError(f"compare {spec}: {exc}") from None
    outcomes = journal.read(Path(folder))
    found = providers(outcomes.values())
    if want and want not in found:
        raise CompetitorError(
            f"compare {spec}: run {folder} has no provider {want!r}; it holds {', '.join(found) or 'none'}"
        )
    return Run(folder, request, outcomes, [want] if want else found)


def _verdicts(run: Run) -> dict:
    return {(r.case, r.backend, r.output): r for o in run.outcomes.values() for r in o.results}


def compare(a_spec: str, b_spec: str) -> tuple[list[Table], list[dict]]:
    """The comparison's tables and its per-case points (for the plot); CompetitorError naming the run where the
    two cannot be compared."""
    a, b = _run(a_spec), _run(b_spec)
    if a.request.get("op") != b.request.get("op"):
        raise CompetitorError(
            f"compare: {a.folder} is a run of {a.request.get('op')}, {b.folder} of {b.request.get('op')}: no cases "
            "in "
            "common"
        )
    common = sorted(set(a.outcomes) & set(b.outcomes))
    if not common:
        raise CompetitorError(
            f"compare: {a.folder} and {b.folder} have no cases in common (levels {a.request.get('level')} and "
            f"{b.request.get('level')})"
        )
    for i in common:
        da, db = getattr(a.outcomes[i], "digest", ""), getattr(b.outcomes[i], "digest", "")
        if da and db and da != db:
            raise CompetitorError(
                f"compare: case {i} drew other inputs in {a.folder} than in {b.folder} (another digest): not the "
                "same "
                "case"
            )
    va, vb = _verdicts(a), _verdicts(b)
    rows, disagree, points = [], [], []
    for pa in a.providers:
        for pb in b.providers:
            groups: dict[tuple, list] = {}
            for i in common:
                for (p, name), sa in a.outcomes[i].sides.items():
                    sb = b.outcomes[i].sides.get((pb, name))
                    if p != pa or sb is None:
                        continue
                    ra, rb = va.get((i, pa, name)), vb.get((i, pb, name))
                    dtype = ra.dtype if ra else rb.dtype if rb else "?"
                    groups.setdefault((dtype, name), []).append((i, sa, sb, ra, rb))
            for (dtype, name), items in groups.items():
                ratios = [
                    sa.metrics.mere / sb.metrics.mere
                    for _, sa, sb, _, _ in items
                    if sb.metrics.mere > 0 and math.isfinite(sa.metrics.mere)
                ]
                passed_a = sum(1 for *_, ra, _ in items if ra is not None and ra.passed)
                passed_b = sum(1 for *_, rb in items if rb is not None and rb.passed)
                rows.append(
                    (
                        pa,
                        pb,
                        dtype,
                        name,
                        str(len(items)),
                        _g(max(sa.metrics.mare for _, sa, *_ in items)),
                        _g(statistics.median(sa.metrics.mere for _, sa, *_ in items)),
                        _g(max(sa.metrics.rmse for _, sa, *_ in items)),
                        _g(max(sb.metrics.mare for _, _, sb, *_ in items)),
                        _g(statistics.median(sb.metrics.mere for _, _, sb, *_ in items)),
                        _g(max(sb.metrics.rmse for _, _, sb, *_ in items)),
                        _g(statistics.median(ratios)) if ratios else "-",
                        f"{passed_a}/{len(items)}",
                        f"{passed_b}/{len(items)}",
                    )
                )
                for i, sa, sb, ra, rb in items:
                    points.append(
                        {
                            "a": pa,
                            "b": pb,
                            "dtype": dtype,
                            "output": name,
                            "mere_a": sa.metrics.mere,
                            "mere_b": sb.metrics.mere,
                        }
                    )
                    if ra is not None and rb is not None and ra.passed != rb.passed:
                        disagree.append(
                            (
                                str(i),
                                dtype,
                                ra.shape_text(),
                                ra.value_range,
                                name,
                                pa,
                                "pass" if ra.passed else "FAIL",
                                pb,
                                "pass" if rb.passed else "FAIL",
                                _g(sa.metrics.mere),
                                _g(sb.metrics.mere),
                            )
                        )
    if not rows:
        raise CompetitorError(
            f"compare: {a.folder} ({', '.join(a.providers)}) and {b.folder} ({', '.join(b.providers)}) share no "
            "output "
            "to compare"
        )
    side = Table(
        f"{a.folder} (A) against {b.folder} (B): errors against the float64 golden, {len(common)} cases in common",
        (
            "A",
            "B",
            "dtype",
            "output",
            "cases",
            "A worst MARE",
            "A median MERE",
            "A worst RMSE",
            "B worst MARE",
            "B median MERE",
            "B worst RMSE",
            "median MERE A/B",
            "A passed",
            "B passed",
        ),
        tuple(rows),
        (
            "Each side as its own run judged it (its benchmark, its retests). A median MERE ratio above 1: A's errors "
            "are "
            "larger."
        ),
    )
    diff = Table(
        "Cases where the verdicts disagree",
        ("case", "dtype", "shape", "range", "output", "A", "A verdict", "B", "B verdict", "A MERE", "B MERE"),
        tuple(disagree[:200]),
        f"{len(disagree)} cases" + (" (the first 200 shown)" if len(disagree) > 200 else ""),
    )
    runs = Table(
        "Runs",
        ("run", "operator", "level", "device", "providers"),
        tuple(
            (
                r.folder,
                str(r.request.get("op")),
                str(r.request.get("level")),
                str(r.request.get("device", "cpu")),
                ", ".join(r.providers),
            )
            for r in (a, b)
        ),
    )
    return [runs, side, diff], points
