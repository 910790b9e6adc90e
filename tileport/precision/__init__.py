"""The dual-benchmark precision standard: metrics, levels, the ratio rule, the retest rule, results, and a
pytest helper. The standard's numbers live in ``standard.py``."""

from .metrics import (  # noqa: F401
    Metrics,
    Verdict,
    assert_dual_benchmark,
    compare,
    compare_equal,
    dual_measure_batch,
    judge,
    measure,
    measure_batch,
)
from .results import Aggregate, CaseResult, aggregate  # noqa: F401
from .retest import RetestResult, retest, retest_verdicts  # noqa: F401
from .standard import COUNTS, LEVELS, MIN_ELEMENTS, SMALL_VALUE, STANDARD_VERSION  # noqa: F401
