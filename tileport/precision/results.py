"""Results of a suite run: one ``CaseResult`` per (case, output), aggregated per (op, backend, dtype, level).

A case result says which metric failed and by how much (the ratio against its limit); the aggregate counts
cases and elements and says whether the standard's minimum counts for the level were met, so a quick run
cannot be mistaken for the standard's evidence.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from .metrics import Verdict
from .retest import RetestResult
from .standard import COUNTS, LEVELS, MIN_ELEMENTS


def shape_text(shape: tuple[int, ...], shapes: tuple = ()) -> str:
    """A case's shape as reports print it: ``4x16``, or by named dimensions each tensor's (``q 2x5x4x64, cos 8x16``)."""
    if not shapes:
        return "x".join(map(str, shape))
    return ", ".join(f"{n} {'x'.join(map(str, s)) or '[]'}" for n, s in shapes)


@dataclass
class CaseResult:
    op: str
    backend: str
    case: int  # index of the case in its suite
    dtype: str
    shape: tuple[int, ...]
    value_range: str
    attrs: dict  # the case's attributes (eps, ...) and optional inputs left out (None)
    output: str  # y, rstd, dx, ...
    verdict: Verdict
    retest: RetestResult | None = None
    deterministic: bool = True  # repeated runs gave bit-identical outputs
    runs: int = 1
    shapes: tuple = ()  # a case by named dimensions: each tensor's (name, shape); ``shape`` is then its first's

    def shape_text(self) -> str:
        return shape_text(self.shape, self.shapes)

    @property
    def passed(self) -> bool:
        first = self.verdict.passed or (self.retest is not None and self.retest.passed)
        return first and self.deterministic

    @property
    def failures(self) -> list[str]:
        """What failed: the first seed's broken limits, the retest's outcome, non-determinism."""
        out = list(self.verdict.failures)
        if self.retest is not None:
            out.append(
                f"retest over {self.retest.seeds} seeds "
                + ("passed" if self.retest.passed else "failed: " + "; ".join(self.retest.failures))
            )
        if not self.deterministic:
            out.append(f"outputs differ between {self.runs} repeated runs")
        return out

    def excess(self) -> dict[str, float]:
        """Each ratio divided by its limit: above 1 is a failure, and says by how much."""
        limits = dict(zip(("mare", "mere", "rmse"), LEVELS[self.verdict.level]))
        return {m: self.verdict.ratios[m] / limit for m, limit in limits.items()}

    def attrs_text(self) -> str:
        return " ".join(f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}" for k, v in self.attrs.items())

    def row(self) -> dict:
        """A flat record for CSV and JSON."""
        a, b, r = self.verdict.actual, self.verdict.benchmark, self.verdict.ratios
        return {
            "op": self.op,
            "backend": self.backend,
            "case": self.case,
            "dtype": self.dtype,
            "shape": self.shape_text(),
            "range": self.value_range,
            "attrs": self.attrs_text(),
            "output": self.output,
            "level": self.verdict.level,
            "elements": a.elements,
            "mare": a.mare,
            "mere": a.mere,
            "rmse": a.rmse,
            "small_errors": a.small_errors,
            "bm_mare": b.mare,
            "bm_mere": b.mere,
            "bm_rmse": b.rmse,
            "bm_small_errors": b.small_errors,
            "mare_ratio": r["mare"],
            "mere_ratio": r["mere"],
            "rmse_ratio": r["rmse"],
            "small_ratio": r["small"],
            "nonfinite_errors": a.nonfinite_errors,
            "nonfinite_review": a.nonfinite_review,
            "deterministic": self.deterministic,
            "runs": self.runs,
            "retested": self.retest is not None,
            "passed": self.passed,
            "failures": "; ".join(self.failures),
        }


@dataclass
class Aggregate:
    op: str
    backend: str
    dtype: str
    level: str  # the ratio limits applied
    cases: int = 0
    checks: int = 0  # (case, output) pairs
    failed: int = 0
    retested: int = 0
    elements: int = 0  # output elements checked
    worst: dict[str, float] = field(default_factory=dict)  # largest ratio per metric

    @property
    def passed(self) -> bool:
        return self.checks > 0 and self.failed == 0

    def counts_met(self, total_cases: int, total_elements: int) -> dict[str, bool]:
        """Whether the standard's minimum counts for the level hold (the totals span every dtype)."""
        need = COUNTS[self.level]
        return {
            "cases": total_cases >= need.cases,
            "cases_per_dtype": self.cases >= need.cases_per_dtype,
            "elements": total_elements >= MIN_ELEMENTS,
        }


def aggregate(results: list[CaseResult]) -> list[Aggregate]:
    """One aggregate per (op, backend, dtype, level), in first-seen order."""
    groups: dict[tuple, Aggregate] = {}
    seen_cases: dict[tuple, set] = defaultdict(set)
    for r in results:
        key = (r.op, r.backend, r.dtype, r.verdict.level)
        agg = groups.setdefault(key, Aggregate(*key))
        if r.case not in seen_cases[key]:
            seen_cases[key].add(r.case)
            agg.cases += 1
        agg.checks += 1
        agg.failed += not r.passed
        agg.retested += r.retest is not None
        agg.elements += r.verdict.actual.elements
        for m in ("mare", "mere", "rmse"):
            agg.worst[m] = max(agg.worst.get(m, 0.0), r.verdict.ratios[m])
    return list(groups.values())
