"""The standard's metrics on constructed inputs with known answers."""

import math

import pytest
import torch

from tileport.precision import LEVELS, assert_dual_benchmark, compare, judge, measure, retest
from tileport.precision.metrics import REL_EPS, ratio


def test_known_values():
    g = torch.tensor([1.0, 2.0, 4.0, 0.5], dtype=torch.float64)
    a = torch.tensor([1.1, 2.0, 3.6, 0.5], dtype=torch.float64)
    m = measure(a, g, torch.float32)
    assert m.mare == pytest.approx(0.4 / (4 + REL_EPS))
    assert m.mere == pytest.approx((0.1 / (1 + REL_EPS) + 0.4 / (4 + REL_EPS)) / 4)
    assert m.rmse == pytest.approx(math.sqrt((0.01 + 0.16) / 4))
    assert m.elements == 4 and m.small_errors == 0 and m.nonfinite_match


@pytest.mark.parametrize(
    "dtype,threshold,bound",
    [(torch.float16, 2**-11, 2**-16), (torch.bfloat16, 2**-8, 2**-16), (torch.float32, 2**-14, 2**-30)],
)
def test_small_value_rule_per_dtype(dtype, threshold, bound):
    g = torch.tensor([threshold * 0.5, threshold * 0.5, threshold * 2], dtype=torch.float64)
    a = g + torch.tensor([bound * 2, bound * 0.5, bound * 4], dtype=torch.float64)
    assert measure(a, g, dtype).small_errors == 1  # only the first: small and above the bound


def test_nonfinite_against_the_golden_alone():
    """Without a benchmark, the output must hold the golden's inf/nan exactly."""
    g = torch.tensor([1.0, math.nan, math.inf], dtype=torch.float64)
    assert measure(torch.tensor([1.0, math.nan, math.inf]), g).nonfinite_errors == 0
    assert measure(torch.tensor([1.0, 0.0, math.inf]), g).nonfinite_errors == 1
    assert measure(torch.tensor([1.0, math.nan, -math.inf]), g).nonfinite_errors == 1
    m = measure(torch.tensor([math.nan, math.nan, math.inf]), g)
    assert math.isinf(m.mare)  # nan where the golden is finite


def test_zero_benchmark_rule():
    assert ratio(0.0, 0.0) == 1.0
    assert ratio(1e-9, 0.0) == math.inf
    assert ratio(2e-6, 1e-6) == pytest.approx(2.0)


@pytest.mark.parametrize("level", list(LEVELS))
def test_ratio_limits_per_level(level):
    mare, mere, rmse = LEVELS[level]
    g = torch.linspace(1, 2, 1000, dtype=torch.float64)
    bench = g * (1 + 1e-6)
    within = g * (1 + 1e-6 * min(mere, rmse) * 0.99)
    beyond = g * (1 + 1e-6 * mare * 1.01)
    assert compare(within, g, bench, level, torch.float32).passed
    v = compare(beyond, g, bench, level, torch.float32)
    assert not v.passed and any("MARE ratio" in f for f in v.failures)


def test_judge_rejects_unknown_level():
    m = measure(torch.ones(2), torch.ones(2, dtype=torch.float64))
    with pytest.raises(ValueError, match="level must be one of L0, L1, L2"):
        judge(m, m, "L3")


def test_assert_helper_names_the_failed_metric():
    g = torch.linspace(1, 2, 100, dtype=torch.float64)
    with pytest.raises(AssertionError, match="RMSE ratio .* > 2"):
        assert_dual_benchmark(g * (1 + 1e-3), g, g * (1 + 1e-5), dtype=torch.float32)


def test_retest_passes_noise_and_fails_a_systematic_loss():
    g = torch.linspace(1, 2, 200, dtype=torch.float64)

    def noisy(seed):  # same error scale as the benchmark: ratios scatter around 1
        gen = torch.Generator().manual_seed(seed)
        e1 = torch.randn(200, generator=gen, dtype=torch.float64) * 1e-6
        e2 = torch.randn(200, generator=gen, dtype=torch.float64) * 1e-6
        return compare(g + e1, g, g + e2, dtype=torch.float32)

    def worse(seed):  # 1.5x the benchmark's error every time
        gen = torch.Generator().manual_seed(seed)
        e = torch.randn(200, generator=gen, dtype=torch.float64) * 1e-6
        return compare(g + 1.5 * e, g, g + e, dtype=torch.float32)

    assert retest(noisy, range(200)).passed
    result = retest(worse, range(200))
    assert not result.passed and result.medians["rmse"] == pytest.approx(1.5)


def test_small_sample_fuse_fails_a_retest_under_200_seeds():
    g = torch.linspace(1, 2, 50, dtype=torch.float64)
    same = lambda seed: compare(g, g, g, dtype=torch.float32)  # noqa: E731  (ratios all 1: passes on its merits)
    short = retest(same, range(199))  # decided before its seeds: it stops after the first
    assert not short.passed and short.failures[-1] == "small-sample fuse: 199 new seeds < 200 (4.5.2)"
    assert short.seeds == 1 and short.planned == 199 and "small-sample fuse" in short.stopped
    assert retest(same, range(200)).passed
    assert retest(same, range(30), min_seeds=0).passed  # a labelled, non-conforming quick run


@pytest.mark.parametrize("dtype,th", [(torch.float16, 2**-10), (torch.bfloat16, 2**-7), (torch.float32, 2**-13)])
def test_single_benchmark_standard_limits_mere_and_mare_by_th(dtype, th):
    g = torch.linspace(1, 2, 1000, dtype=torch.float64)
    bench = g.clone()  # the sibling standards do not consult the benchmark's errors
    assert compare(g * (1 + 0.5 * th), g, bench, dtype=dtype, acc="single_bm").passed
    v = compare(g * (1 + 1.5 * th), g, bench, dtype=dtype, acc="single_bm")
    assert not v.passed and v.failures[0].startswith("MERE") and v.standard == "single_bm"
    spike = g.clone()
    spike[0] *= 1 + 11 * th  # one element: MERE stays small, MARE passes 10 Th
    v = compare(spike, g, bench, dtype=dtype, acc="single_bm")
    assert [f.split()[0] for f in v.failures] == ["MARE"]


def test_mixed_tolerance_standard_counts_elements_within_atol_plus_rtol():
    th = 2**-13
    g = torch.linspace(1, 2, 1000, dtype=torch.float64)
    off = g.clone()
    off[:10] += 3 * th * (1 + g[:10])  # 1% of the elements outside the tolerance: 99% within passes
    assert compare(off, g, g, dtype=torch.float32, acc="mixed_tolerance_bm").passed
    off[10] += 3 * th * (1 + g[10])
    v = compare(off, g, g, dtype=torch.float32, acc="mixed_tolerance_bm")
    assert not v.passed and "98.90% of elements" in v.failures[0]
    v = compare(g + 2e-4, g, g, dtype=torch.float32, acc="mixed_tolerance_bm", max_atol=1e-4)  # within Th + Th |g|
    assert v.failures == ["max absolute error 0.0002 > max_atol 0.0001"]


def test_unknown_standard_is_rejected():
    m = measure(torch.ones(2), torch.ones(2, dtype=torch.float64))
    with pytest.raises(ValueError, match="standard.acc must be one of double_bm"):
        judge(m, m, "L0", acc="equal")


def test_retest_fails_an_output_with_infinite_errors():
    """A nan where the golden is finite gives an infinite ratio every seed: the bootstrap must not turn
    inf - inf into a nan bound that no limit catches."""
    g = torch.linspace(1, 2, 100, dtype=torch.float64)
    broken = g.clone()
    broken[-1] = math.nan
    result = retest(lambda seed: compare(broken, g, g * (1 + 1e-7), dtype=torch.float32), range(200))
    assert not result.passed and "MARE" in result.failures[0]
