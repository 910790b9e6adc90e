"""The standard's retest rule: after a failure, rerun with new seeds and bootstrap the median ratio.

As published: re-run the case with new seeds (1000 in the standard), bootstrap the median of each metric's
ratio (2000 resamples) and fail only if the 95% confidence interval's lower bound exceeds 1.0, i.e. only when
the operator is worse than the benchmark with confidence. Max-relative-error ratios on outputs that cancel to
near zero (a normalization's dx) swing with the summation order of either side; a single seed cannot settle them.

The seeds run one at a time, and the retest stops as soon as its outcome is decided: no ratios the remaining
seeds could give would pass it. The bootstrap draws its resample indices from the number of values and a fixed
seed alone, and a resample's median and the percentile of the medians never decrease when a value grows; so
the bound computed with every remaining seed at ratio 0 (no ratio is lower: metrics are non-negative) is a
lower bound of the final one, and where it already exceeds 1 the full retest fails too. So does an inf/nan
error in any seed (5.3.3), and a retest planned over fewer seeds than the small-sample fuse. A pass is never
decided early: any remaining seed could still bring an inf/nan error.

At a non-conforming level (quick) a check whose first seed misses a limit by orders of magnitude
(``FAR`` times it) stops after ``FAR_SEEDS`` new seeds that all miss by as much: the result says it was cut.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from .metrics import Verdict
from .standard import LEVELS, RETEST_MIN_SEEDS, RETEST_RESAMPLES

METRICS = ("mare", "mere", "rmse")
FAR = 100.0  # a ratio this many times its limit is a failure by orders of magnitude, not a seed's bad luck
FAR_SEEDS = 3  # quick: new seeds, each as far above a limit as the first, that settle such a failure
DECIDED_MARGIN = 1e-9  # the ratio-0 bound must clear 1 by more than the percentile's interpolation may round


@dataclass(frozen=True)
class RetestResult:
    seeds: int  # new seeds run
    medians: dict[str, float]
    lower_bounds: dict[str, float]  # 95% bootstrap CI lower bound of each median ratio (over the seeds run)
    failures: list[str]
    awaiting: bool = False  # the benchmark is another machine's run, which has not run these seeds yet
    planned: int = 0  # new seeds the rule asked for (0: as many as ran)
    stopped: str = ""  # why it stopped before ``planned`` seeds: the outcome was decided, or quick's cut

    @property
    def passed(self) -> bool:
        return not self.failures

    @classmethod
    def pending(cls, seeds: int) -> RetestResult:
        """A retest that needs the competitor's benchmark on its new seeds: not passed until they come."""
        return cls(
            seeds,
            {},
            {},
            [
                (
                    f"awaiting the competitor's retest over {seeds} seeds (verify --retest-for this run, on the "
                    "benchmark's machine)"
                )
            ],
            True,
        )


def bootstrap_median_lower_bound(values: Sequence[float], resamples: int = RETEST_RESAMPLES, seed: int = 0) -> float:
    """2.5th percentile of the bootstrap distribution of the median of ``values``. The resample indices depend
    on the number of values and ``seed`` only (the early stop's argument rests on it)."""
    # an infinite ratio (a nan where the golden is finite) stays the largest value: percentiles interpolate,
    # and inf - inf would make the bound nan, which no limit catches
    arr = np.nan_to_num(
        np.asarray(values, dtype=np.float64), nan=1e300, posinf=1e300
    )  # a median averages two: no overflow
    rng = np.random.default_rng(seed)
    medians = np.median(arr[rng.integers(0, arr.size, size=(resamples, arr.size))], axis=1)
    return float(np.percentile(medians, 2.5))


def retest(
    run: Callable[[int], Verdict],
    seeds: Sequence[int],
    resamples: int = RETEST_RESAMPLES,
    min_seeds: int = RETEST_MIN_SEEDS,
) -> RetestResult:
    """Run ``run(seed)`` seed by seed and apply the bootstrap rule to each metric's ratio, stopping once the
    outcome is decided."""
    return retest_stream((run(s) for s in seeds), len(seeds), resamples, min_seeds)


def retest_verdicts(
    verdicts: Sequence[Verdict], resamples: int = RETEST_RESAMPLES, min_seeds: int = RETEST_MIN_SEEDS, planned: int = 0
) -> RetestResult:
    """The bootstrap rule over the verdicts of the new seeds (however they were computed). A retest planned
    over fewer than ``min_seeds`` (``planned``, default the verdicts given) fails outright, the standard's
    small-sample fuse; 0 turns it off (a labelled, non-conforming quick run)."""
    if not verdicts:
        raise ValueError("a retest needs at least one new seed")
    planned = planned or len(verdicts)
    medians, lows, failures = {}, {}, []
    if planned < min_seeds:
        failures.append(f"small-sample fuse: {planned} new seeds < {min_seeds} (4.5.2)")
    for m in METRICS:
        ratios = [v.ratios[m] for v in verdicts]
        medians[m] = float(np.median(np.where(np.isnan(ratios), np.inf, ratios)))
        lows[m] = bootstrap_median_lower_bound(ratios, resamples)
        if lows[m] > 1.0:
            failures.append(f"{m.upper()} median ratio {medians[m]:.3g} (95% CI lower bound {lows[m]:.3g} > 1)")
    nonfinite = [v for v in verdicts if not v.actual.nonfinite_match]
    if nonfinite:
        failures.append(f"inf/nan errors (5.3.3) in {len(nonfinite)} of {len(verdicts)} seeds")
    return RetestResult(len(verdicts), medians, lows, failures, planned=planned)


def _may_decide(ratios: Sequence[float], planned: int) -> bool:
    """A cheap filter before the bootstrap: whether the ratios above 1 are enough of ``planned`` for a ratio-0
    completion to stand a chance (a binomial resample's median exceeds 1 only when most draws do). Where it
    says no the check is merely skipped: the retest stops later, never with another outcome."""
    above = sum(1 for r in ratios if not r <= 1.0)  # nan counts as above
    p = above / planned
    return above > planned / 2 and (p == 1.0 or above - planned / 2 >= math.sqrt(planned * p * (1 - p)))


def decided(
    verdicts: Sequence[Verdict], planned: int, resamples: int = RETEST_RESAMPLES, min_seeds: int = RETEST_MIN_SEEDS
) -> str:
    """Why the retest over ``planned`` new seeds fails whatever the seeds after these ``verdicts`` give, or ""
    while its outcome is open."""
    if planned < min_seeds:
        return f"the small-sample fuse fails a retest of {planned} new seeds (< {min_seeds}) whatever they give"
    if any(not v.actual.nonfinite_match for v in verdicts):
        return "an inf/nan error (5.3.3) fails it whatever the other seeds give"
    rest = [0.0] * (planned - len(verdicts))
    for m in METRICS:
        ratios = [v.ratios[m] for v in verdicts]
        if _may_decide(ratios, planned):
            low = bootstrap_median_lower_bound(ratios + rest, resamples)
            if low > 1.0 + DECIDED_MARGIN:
                return (
                    f"with the {len(rest)} seeds left at ratio 0 the {m.upper()} lower bound would still be "
                    f"{low:.3g} > 1"
                )
    return ""


def far_above(v: Verdict) -> list[str]:
    """The metrics whose ratio is at least ``FAR`` times its limit (nan counts as far)."""
    limits = dict(zip(METRICS, LEVELS.get(v.level, (math.inf,) * 3)))
    return [m for m in METRICS if not v.ratios[m] < FAR * limits[m]]


def retest_stream(
    verdicts: Iterable[Verdict],
    planned: int,
    resamples: int = RETEST_RESAMPLES,
    min_seeds: int = RETEST_MIN_SEEDS,
    far: bool = False,
) -> RetestResult:
    """The bootstrap rule over up to ``planned`` new seeds' verdicts, taken one at a time from ``verdicts`` (a
    lazy iterable: the seeds not taken are never run) and stopped once the outcome is decided. ``far`` (a
    non-conforming level whose first seed missed a limit ``FAR`` times over): stop with a failure after
    ``FAR_SEEDS`` new seeds that all miss by as much."""
    seen: list[Verdict] = []
    why = ""
    for v in verdicts:
        seen.append(v)
        if far and len(seen) >= min(FAR_SEEDS, planned) and all(far_above(s) for s in seen):
            worst = max(METRICS, key=lambda m: min(s.ratios[m] / LEVELS[s.level][METRICS.index(m)] for s in seen))
            why = (
                f"cut short at a non-conforming level: these {len(seen)} new seeds all miss a limit {FAR:g} times "
                "over, "
                f"as the first did ({worst.upper()} ratio at least {min(s.ratios[worst] for s in seen):.3g})"
            )
            break
        if len(seen) < planned:
            why = decided(seen, planned, resamples, min_seeds)
            if why:
                why = f"decided after {len(seen)} of {planned} new seeds: {why}"
                break
        if len(seen) == planned:
            break
    result = retest_verdicts(seen, resamples, min_seeds, planned)
    if not why:
        return result
    return RetestResult(
        result.seeds, result.medians, result.lower_bounds, [why, *result.failures], planned=planned, stopped=why
    )
