"""The standard's retest rule: after a failure, rerun with new seeds and bootstrap the median ratio.

As published: re-run the case with new seeds (1000 in the standard), bootstrap the median of each metric's
ratio (2000 resamples) and fail only if the 95% confidence interval's lower bound exceeds 1.0, i.e. only when
the operator is worse than the benchmark with confidence. Max-relative-error ratios on outputs that cancel to
near zero (a normalization's dx) swing with the summation order of either side; a single seed cannot settle them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

from .metrics import Verdict
from .standard import RETEST_MIN_SEEDS, RETEST_RESAMPLES

METRICS = ("mare", "mere", "rmse")


@dataclass(frozen=True)
class RetestResult:
    seeds: int
    medians: dict[str, float]
    lower_bounds: dict[str, float]  # 95% bootstrap CI lower bound of each median ratio
    failures: list[str]
    awaiting: bool = False  # the benchmark is another machine's run, which has not run these seeds yet

    @property
    def passed(self) -> bool:
        return not self.failures

    @classmethod
    def pending(cls, seeds: int) -> "RetestResult":
        """A retest that needs the competitor's benchmark on its new seeds: not passed until they come."""
        return cls(seeds, {}, {}, [f"awaiting the competitor's retest over {seeds} seeds (verify --retest-for this run, on the benchmark's machine)"], True)


def bootstrap_median_lower_bound(values: Sequence[float], resamples: int = RETEST_RESAMPLES, seed: int = 0) -> float:
    """2.5th percentile of the bootstrap distribution of the median of ``values``."""
    # an infinite ratio (a nan where the golden is finite) stays the largest value: percentiles interpolate,
    # and inf - inf would make the bound nan, which no limit catches
    arr = np.nan_to_num(np.asarray(values, dtype=np.float64), nan=1e300, posinf=1e300)  # a median averages two: no overflow
    rng = np.random.default_rng(seed)
    medians = np.median(arr[rng.integers(0, arr.size, size=(resamples, arr.size))], axis=1)
    return float(np.percentile(medians, 2.5))


def retest(
    run: Callable[[int], Verdict], seeds: Sequence[int], resamples: int = RETEST_RESAMPLES, min_seeds: int = RETEST_MIN_SEEDS
) -> RetestResult:
    """Run ``run(seed)`` for each seed and apply the bootstrap rule to each metric's ratio."""
    return retest_verdicts([run(s) for s in seeds], resamples, min_seeds)


def retest_verdicts(
    verdicts: Sequence[Verdict], resamples: int = RETEST_RESAMPLES, min_seeds: int = RETEST_MIN_SEEDS
) -> RetestResult:
    """The bootstrap rule over the verdicts of the new seeds (however they were computed). Fewer than
    ``min_seeds`` fails outright, the standard's small-sample fuse; 0 turns it off (a labelled,
    non-conforming quick run)."""
    if not verdicts:
        raise ValueError("a retest needs at least one new seed")
    medians, lows, failures = {}, {}, []
    if len(verdicts) < min_seeds:
        failures.append(f"small-sample fuse: {len(verdicts)} new seeds < {min_seeds} (4.5.2)")
    for m in METRICS:
        ratios = [v.ratios[m] for v in verdicts]
        medians[m] = float(np.median(np.where(np.isnan(ratios), np.inf, ratios)))
        lows[m] = bootstrap_median_lower_bound(ratios, resamples)
        if lows[m] > 1.0:
            failures.append(f"{m.upper()} median ratio {medians[m]:.3g} (95% CI lower bound {lows[m]:.3g} > 1)")
    nonfinite = [v for v in verdicts if not v.actual.nonfinite_match]
    if nonfinite:
        failures.append(f"inf/nan errors (5.3.3) in {len(nonfinite)} of {len(verdicts)} seeds")
    return RetestResult(len(verdicts), medians, lows, failures)
