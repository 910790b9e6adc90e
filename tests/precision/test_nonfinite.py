"""Clause 5.3.3, the inf/nan rule, position by position: the output against the golden and the benchmark."""

import math

import torch

from tileport.precision import compare

NAN, INF = math.nan, math.inf


def _verdict(out, golden, bench, dtype=torch.float32):
    t = lambda v, dt: torch.tensor(v, dtype=dt)  # noqa: E731
    return compare(t(out, dtype), t(golden, torch.float64), t(bench, dtype), "L0", dtype)


def test_output_equal_to_the_benchmark_is_correct_whatever_the_golden():
    v = _verdict([1.0, NAN, INF], [1.0, INF, NAN], [1.0, NAN, INF])
    assert v.passed and v.actual.nonfinite_errors == 0 and v.actual.nonfinite_review == 0


def test_output_equal_to_a_nonfinite_golden_is_correct():
    v = _verdict([1.0, INF], [1.0, INF], [1.0, NAN])
    assert v.passed and v.actual.nonfinite_errors == 0


def test_error_only_where_the_benchmark_matches_the_golden_and_the_output_does_not():
    v = _verdict([1.0, NAN, 3.0], [1.0, INF, -INF], [1.0, INF, -INF])
    assert not v.passed and v.actual.nonfinite_errors == 2
    assert any("2 positions where the golden is inf/nan" in f for f in v.failures)


def test_all_three_different_needs_investigation_not_a_failure():
    v = _verdict([1.0, NAN], [1.0, INF], [1.0, -INF])
    assert v.passed and v.actual.nonfinite_review == 1 and v.actual.nonfinite_errors == 0


def test_shared_nonfinite_where_the_golden_is_finite_leaves_the_metrics():
    """An overflow both same-dtype sides share (the golden in float64 does not overflow) is correct by 5.3.3,
    and measured on neither side."""
    v = _verdict([1.0, INF], [1.0, 2.0], [1.0, INF])
    assert v.passed and v.actual.mare == 0.0 and v.benchmark.mare == 0.0


def test_nonfinite_output_where_golden_and_benchmark_are_finite_fails_the_metrics():
    v = _verdict([1.0, NAN], [1.0, 2.0], [1.0, 2.0])
    assert not v.passed and math.isinf(v.actual.mare)


def test_golden_beyond_the_dtype_range_counts_as_inf():
    """fp16 holds at most 65504: a golden of 1e6 is inf in any fp16 implementation."""
    v = _verdict([1.0, INF], [1.0, 1e6], [1.0, INF], dtype=torch.float16)
    assert v.passed
    v = _verdict([1.0, 6e4], [1.0, 1e6], [1.0, INF], dtype=torch.float16)
    assert not v.passed and v.actual.nonfinite_errors == 1
