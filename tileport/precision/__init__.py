"""The dual-benchmark precision standard: metrics, levels, the ratio rule, the retest rule, a pytest helper."""

from .metrics import LEVELS, SMALL_VALUE, Metrics, Verdict, assert_dual_benchmark, compare, judge, measure  # noqa: F401
from .retest import RetestResult, retest  # noqa: F401
