"""The published numbers of the Ascend dual-benchmark precision standard, in one place.

Source: the commercial operator precision standard (hicann/opbase
``docs/zh/ops_precision_standard/commercial_standard.md``, as mirrored in 2026; see
``shared/notes/precision-standard.md``). Implemented version: the 2026 mirror text.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

STANDARD_VERSION = "hicann/opbase commercial_standard.md (2026 mirror)"
REL_EPS = 1e-7  # the denominator guard of MARE / MERE

# level -> (MARE, MERE, RMSE) limits on metric(under test) / metric(benchmark)
LEVELS: dict[str, tuple[float, float, float]] = {
    "L0": (10.0, 2.0, 2.0),
    "L1": (5.0, 1.5, 1.5),
    "L2": (2.0, 1.2, 1.2),
}


@dataclass(frozen=True)
class Counts:
    """The minimum evidence a level asks for."""

    cases: int  # cases in total
    cases_per_dtype: int  # 0 where the standard names none
    runs_per_case: int


COUNTS: dict[str, Counts] = {
    "L0": Counts(5000, 200, 50),
    "L1": Counts(10000, 700, 50),
    "L2": Counts(30000, 0, 1000),
}
MIN_ELEMENTS = 1_000_000  # total output elements of a suite

# dtype -> (small-value threshold on |golden|, error bound for a small value)
SMALL_VALUE: dict[torch.dtype, tuple[float, float]] = {
    torch.float16: (2.0**-11, 2.0**-16),
    torch.bfloat16: (2.0**-8, 2.0**-16),
    torch.float32: (2.0**-14, 2.0**-30),
}
SMALL_COUNT_RATIO = 2.0  # ErrorCount(under test) / max(ErrorCount(benchmark), 1) must not exceed this

# Case generation (section 2). Value distributions per level, as (name, share of the level's cases):
# "uniform" U[-5, 5], "normal" N(mu, sigma) with mu and sigma drawn per case, "tiny" U[-0.001, 0.001],
# "outliers" the noisy distribution (5.1.2) on a U[-5, 5] base.
DISTRIBUTIONS: dict[str, tuple[tuple[str, float], ...]] = {
    "L0": (("uniform", 0.5), ("normal", 0.5)),
    "L1": (("tiny", 0.1), ("uniform", 0.3), ("normal", 0.4), ("outliers", 0.2)),
    "L2": (("tiny", 0.1), ("uniform", 0.3), ("normal", 0.4), ("outliers", 0.2)),
}
UNIFORM_BOUND = 5.0
TINY_BOUND = 0.001
NORMAL_MU = (-100.0, 100.0)
NORMAL_SIGMA = (1.0, 25.0)
OUTLIER_FACTOR = 1000.0  # k = max(1, floor(n / OUTLIER_PER)) distinct positions multiplied by this
OUTLIER_PER = 1000
DIM_NUMBERS = tuple(range(1, 9))  # every dimension count 1-8 is covered
DIM_STEPS = (15, 16)  # L0 generalizes dimension values in these steps; L1 and L2 draw them at random
MAX_ELEMENTS = 2**31  # total elements of one case
MODEL_SHARE = 1 / 3  # L2: generalized cases : model cases = 2 : 1

# The sibling standards of the same text, chosen by a suite's ``standard.acc`` (the dual benchmark is tileport's
# default, ``double_bm``). Th per dtype; single benchmark (experimental): pass if MERE < Th and MARE < 10 Th;
# mixed tolerance: |a - g| <= Th + Th * |g| on at least 99% of the elements, and, where the suite gives one
# (``standard.max_atol``: the text we implement names such a bound without fixing its value), no element's
# absolute error above it.
THRESHOLD: dict[torch.dtype, float] = {torch.float16: 2.0**-10, torch.bfloat16: 2.0**-7, torch.float32: 2.0**-13}
SINGLE_MARE_FACTOR = 10.0
MIXED_SHARE = 0.99
ACC_STANDARDS = {
    "double_bm": "dual benchmark: ratios against a same-dtype benchmark, both measured against a float64 golden",
    "single_bm": "single benchmark (experimental): MERE < Th and MARE < 10 Th against the golden",
    "mixed_tolerance_bm": "mixed tolerance: |a - g| <= Th + Th |g| on >= 99% of elements (and max |a - g| <= max_atol)",
}

RETEST_SEEDS = 1000  # new seeds after a failure
RETEST_MIN_SEEDS = 200  # the small-sample fuse (4.5.2): a retest over fewer new seeds fails outright
RETEST_RESAMPLES = 2000  # bootstrap resamples of the median ratio
