"""Metrics and the ratio rule of the Ascend dual-benchmark precision standard.

Implemented from the published commercial operator precision standard (hicann/opbase
``ops_precision_standard/commercial_standard.md``, as mirrored in 2026): the output under test ``a`` and an
independent same-precision benchmark ``b`` are both measured against a float64 golden ``g``; each metric of
``a`` must stay within a per-level multiple of the benchmark's.

- MARE = max(|a - g| / (|g| + 1e-7)), MERE = mean(|a - g| / (|g| + 1e-7)), RMSE = sqrt(mean((a - g)^2)),
  over the positions where the golden is finite.
- Small values (|g| < threshold per dtype) with |a - g| > bound count as errors; pass if
  count(a) / max(count(b), 1) <= 2.
- inf/nan (clause 5.3.3, ``nonfinite.py``): judged against the golden rounded to the output's dtype and the
  benchmark; metrics are taken over the positions where that rounded golden is finite and the output and the
  benchmark do not share an inf/nan.
- A benchmark metric of 0 is not defined by the standard: here, as in msprobe, both ~0 gives ratio 1 and only
  the benchmark ~0 gives ratio inf (a failure).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from . import nonfinite
from .standard import (
    ACC_STANDARDS,
    LEVELS,
    MIXED_SHARE,
    REL_EPS,
    SINGLE_MARE_FACTOR,
    SMALL_COUNT_RATIO,
    SMALL_VALUE,
    THRESHOLD,
)

ZERO = 1e-30  # a metric at or below this counts as 0 for the ratio rule


@dataclass(frozen=True)
class Metrics:
    mare: float
    mere: float
    rmse: float
    small_errors: int
    nonfinite_errors: int  # clause 5.3.3 errors: the golden is inf/nan, the benchmark matches it, this does not
    elements: int
    nonfinite_review: int = 0  # golden, output and benchmark all differ at an inf/nan: needs investigation
    counted: int = 0  # positions measured (finite golden, no inf/nan shared with the benchmark)
    within_tolerance: int = 0  # of those, |a - g| <= Th + Th |g| (the mixed-tolerance standard)
    max_abs: float = 0.0

    @property
    def nonfinite_match(self) -> bool:
        return self.nonfinite_errors == 0


def measure(actual: torch.Tensor, golden: torch.Tensor, dtype: torch.dtype | None = None) -> Metrics:
    """The standard's metrics of ``actual`` against ``golden`` alone (``dtype`` picks the small-value rule);
    with no benchmark to consult, inf/nan must match the golden's exactly."""
    if actual.shape != golden.shape:
        raise ValueError(f"actual shape {tuple(actual.shape)} != golden shape {tuple(golden.shape)}")
    return measure_batch(actual.reshape(1, -1), golden.reshape(1, -1), dtype or actual.dtype)[0]


def _golden_out(golden: torch.Tensor, dtype: torch.dtype):
    g = golden.detach().cpu().to(torch.float64)
    return g, (golden.detach().cpu().to(dtype) if dtype != torch.float64 else g)


@dataclass
class _Golden:
    """What both sides' metrics share of the golden, computed once per batch: the positions counted, the
    relative-error denominators and the per-position bounds of the small-value and tolerance rules.
    ``counted`` is None when every position counts (no inf/nan anywhere, the common case: no masks)."""

    g: torch.Tensor
    counted: torch.Tensor | None
    counts: torch.Tensor  # positions counted per row, int64
    n: torch.Tensor  # the same, at least 1, float64 (the means' divisor)
    denom: torch.Tensor  # |g| + REL_EPS
    small: torch.Tensor  # counted and |g| below the dtype's small-value threshold
    tolerance: torch.Tensor  # Th + Th |g| (the mixed-tolerance standard)
    bound: float  # a small value's error bound

    @classmethod
    def of(cls, g: torch.Tensor, counted: torch.Tensor | None, dtype: torch.dtype) -> _Golden:
        ga = g.abs() if counted is None else g.abs().nan_to_num_(0.0, 0.0, 0.0)
        rows, cols = g.shape
        counts = torch.full((rows,), cols, dtype=torch.int64) if counted is None else torch.count_nonzero(counted, 1)
        n = counts.clamp(min=1).to(torch.float64)
        threshold, bound = SMALL_VALUE.get(dtype, SMALL_VALUE[torch.float32])
        th = THRESHOLD.get(dtype, THRESHOLD[torch.float32])
        small = ga < threshold
        if counted is not None:
            small &= counted
        denom = ga + REL_EPS
        return cls(g, counted, counts, n, denom, small, ga.mul_(th).add_(th), bound)

    def metrics(self, a: torch.Tensor, errors: torch.Tensor | None, review: torch.Tensor | None) -> list[Metrics]:
        """Metrics of each row of (S, N) ``a`` over the counted positions (``errors``, ``review``: clause
        5.3.3's masks, None where there is no inf/nan)."""
        err = (a.detach().cpu().to(torch.float64) - self.g).abs_()
        err.nan_to_num_(math.inf, math.inf)  # a nan where the golden is finite is an infinite error
        counted = self.counted
        if counted is not None:
            err.masked_fill_(~counted, 0.0)
        rows, cols = err.shape
        small = torch.count_nonzero(self.small & (err > self.bound), 1)
        within = err <= self.tolerance
        if counted is not None:
            within &= counted
        if cols:
            max_abs, rmse = err.amax(1), torch.linalg.vector_norm(err, dim=1) / self.n.sqrt()
            rel = err.div_(self.denom)  # err is spent: its buffer takes the relative errors
            mare, mere = rel.amax(1), rel.sum(1) / self.n
        else:
            max_abs = rmse = mare = mere = torch.zeros(rows, dtype=torch.float64)
        zeros = torch.zeros(rows, dtype=torch.int64)
        per_row = zip(
            mare.tolist(),
            mere.tolist(),
            rmse.tolist(),
            small.tolist(),
            (zeros if errors is None else torch.count_nonzero(errors, 1)).tolist(),
            (zeros if review is None else torch.count_nonzero(review, 1)).tolist(),
            self.counts.tolist(),
            torch.count_nonzero(within, 1).tolist(),
            max_abs.tolist(),
        )
        return [
            Metrics(m, me, r, int(sm), int(e), cols, int(rv), int(c), int(w), mx)
            for m, me, r, sm, e, rv, c, w, mx in per_row
        ]


def _counted(pos: nonfinite.Positions | None, g_out: torch.Tensor) -> torch.Tensor | None:
    return None if pos is None else torch.isfinite(g_out) & ~pos.shared


def measure_batch(actual: torch.Tensor, golden: torch.Tensor, dtype: torch.dtype) -> list[Metrics]:
    """The metrics of each row of (S, N) ``actual`` against ``golden``: S independent samples (seeds) at once."""
    g, g_out = _golden_out(golden, dtype)
    pos = nonfinite.positions(actual.detach().cpu(), g_out)
    gold = _Golden.of(g, None if pos is None else torch.isfinite(g_out), dtype)
    return gold.metrics(actual, *((None, None) if pos is None else (pos.error, pos.review)))


def dual_measure_batch(actual: torch.Tensor, benchmark: torch.Tensor, golden: torch.Tensor, dtype: torch.dtype):
    """(metrics of ``actual``, metrics of ``benchmark``) per row of (S, N) tensors, with clause 5.3.3 applied
    to the three together: both sides measured over the same positions."""
    g, g_out = _golden_out(golden, dtype)
    pos = nonfinite.positions(actual.detach().cpu(), g_out, benchmark.detach().cpu())
    gold = _Golden.of(g, _counted(pos, g_out), dtype)
    if pos is None:
        return gold.metrics(actual, None, None), gold.metrics(benchmark, None, None)
    own = nonfinite.positions(benchmark.detach().cpu(), g_out)  # the benchmark's own errors, for the report
    return gold.metrics(actual, pos.error, pos.review), gold.metrics(
        benchmark, None if own is None else own.error, None
    )


def ratio(under_test: float, benchmark: float) -> float:
    """metric(under test) / metric(benchmark), with the zero rule above."""
    if benchmark <= ZERO:
        return 1.0 if under_test <= ZERO else math.inf
    return under_test / benchmark


@dataclass(frozen=True)
class Verdict:
    """The outcome of one comparison: each ratio and which limits it broke."""

    level: str
    actual: Metrics
    benchmark: Metrics
    ratios: dict[str, float]
    failures: list[str] = field(default_factory=list)
    standard: str = "double_bm"  # the suite's standard.acc

    @property
    def passed(self) -> bool:
        return not self.failures


def _sibling_failures(actual: Metrics, acc: str, dtype: torch.dtype, max_atol: float | None) -> list[str]:
    """The single-benchmark and mixed-tolerance standards: limits on the output's own errors."""
    th = THRESHOLD.get(dtype, THRESHOLD[torch.float32])
    if acc == "single_bm":
        out = [f"MERE {actual.mere:.3g} >= Th {th:g}"] if actual.mere >= th else []
        if actual.mare >= SINGLE_MARE_FACTOR * th:
            out.append(f"MARE {actual.mare:.3g} >= {SINGLE_MARE_FACTOR:g} Th {SINGLE_MARE_FACTOR * th:g}")
        return out
    share = actual.within_tolerance / actual.counted if actual.counted else 1.0
    out = [f"{share:.2%} of elements within Th + Th |g| (Th {th:g}) < {MIXED_SHARE:.0%}"] if share < MIXED_SHARE else []
    if max_atol is not None and actual.max_abs > max_atol:
        out.append(f"max absolute error {actual.max_abs:.3g} > max_atol {max_atol:g}")
    return out


def judge(
    actual: Metrics,
    benchmark: Metrics,
    level: str = "L0",
    acc: str = "double_bm",
    dtype: torch.dtype = torch.float32,
    max_atol: float | None = None,
) -> Verdict:
    """Apply the rule of the standard ``acc`` (the dual benchmark's ratio limits of ``level``, or a sibling's
    limits on the output's own errors for ``dtype``) to the metrics of the output and of the benchmark."""
    if level not in LEVELS:
        raise ValueError(f"level must be one of {', '.join(LEVELS)}, got {level!r}")
    if acc not in ACC_STANDARDS:
        raise ValueError(f"standard.acc must be one of {', '.join(ACC_STANDARDS)}, got {acc!r}")
    limits = dict(zip(("mare", "mere", "rmse"), LEVELS[level]))
    ratios = {name: ratio(getattr(actual, name), getattr(benchmark, name)) for name in limits}
    ratios["small"] = actual.small_errors / max(benchmark.small_errors, 1)
    if acc != "double_bm":
        failures = _sibling_failures(actual, acc, dtype, max_atol)
    else:
        failures = [
            f"{n.upper()} ratio {ratios[n]:.3g} > {limit:g}" for n, limit in limits.items() if ratios[n] > limit
        ]
    if acc == "double_bm" and ratios["small"] > SMALL_COUNT_RATIO:
        failures.append(
            f"small-value errors {actual.small_errors} > {SMALL_COUNT_RATIO:g} x benchmark's {benchmark.small_errors}"
        )
    if actual.nonfinite_errors:
        failures.append(
            f"inf/nan: {actual.nonfinite_errors} positions where the golden is inf/nan, the benchmark matches it "
            "and the output does not (5.3.3)"
        )
    return Verdict(level, actual, benchmark, ratios, failures, acc)


def compare(
    actual: torch.Tensor,
    golden: torch.Tensor,
    benchmark: torch.Tensor,
    level: str = "L0",
    dtype: torch.dtype | None = None,
    acc: str = "double_bm",
    max_atol: float | None = None,
) -> Verdict:
    """Dual-benchmark comparison: ``actual`` and ``benchmark`` both against the float64 ``golden``."""
    dtype = dtype or actual.dtype
    if not actual.shape == golden.shape == benchmark.shape:
        raise ValueError(
            f"shapes differ: actual {tuple(actual.shape)}, golden {tuple(golden.shape)}, benchmark "
            f"{tuple(benchmark.shape)}"
        )
    (a,), (b,) = dual_measure_batch(actual.reshape(1, -1), benchmark.reshape(1, -1), golden.reshape(1, -1), dtype)
    return judge(a, b, level, acc, dtype, max_atol)


def compare_equal(actual: torch.Tensor, golden: torch.Tensor, level: str = "L0") -> Verdict:
    """The kit's ``equal`` standard, for outputs that are not floating point (indices, masks): every element
    equal to the golden's. Ratios are 1 (nothing to weigh); the failure counts the elements that differ."""
    if actual.shape != golden.shape:
        raise ValueError(f"shapes differ: actual {tuple(actual.shape)}, golden {tuple(golden.shape)}")
    n = actual.numel()
    if actual.dtype != golden.dtype:
        differ = n
        failures = [
            (
                f"dtype {str(actual.dtype).removeprefix('torch.')}, the golden's is "
                f"{str(golden.dtype).removeprefix('torch.')}"
            )
        ]
    else:
        differ = int((actual.cpu() != golden.cpu()).sum())
        failures = (
            [f"{differ} of {n} elements differ from the golden (exact equality: not a floating-point output)"]
            if differ
            else []
        )
    m = Metrics(0.0, 0.0, 0.0, 0, 0, n, counted=n - differ, within_tolerance=n - differ)
    return Verdict(level, m, m, {"mare": 1.0, "mere": 1.0, "rmse": 1.0, "small": 0.0}, failures, "equal")


def assert_dual_benchmark(
    actual: torch.Tensor,
    golden: torch.Tensor,
    benchmark: torch.Tensor,
    level: str = "L0",
    dtype: torch.dtype | None = None,
) -> Verdict:
    """pytest helper: raise AssertionError naming each broken limit, else return the verdict."""
    verdict = compare(actual, golden, benchmark, level, dtype)
    if not verdict.passed:
        a, b = verdict.actual, verdict.benchmark
        raise AssertionError(
            f"dual-benchmark {level} failed: {'; '.join(verdict.failures)} "
            f"(under test MARE {a.mare:.3g} MERE {a.mere:.3g} RMSE {a.rmse:.3g}; "
            f"benchmark MARE {b.mare:.3g} MERE {b.mere:.3g} RMSE {b.rmse:.3g})"
        )
    return verdict
