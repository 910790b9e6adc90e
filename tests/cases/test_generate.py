"""The generator: seeded, counted per level with the standard's value mix, dimension counts, steps and special
scenarios, and inputs that honour what each case says."""

import collections
import math

import pytest
import torch

from tileport.cases import generate, load_suite, make_inputs
from tileport.cases.values import outlier_count
from tileport.precision.standard import NORMAL_MU, NORMAL_SIGMA

SUITE = load_suite("rms_norm")  # x, an optional vector weight, dy: every role the generator knows


def test_same_seed_same_cases_and_inputs():
    a, b = generate(SUITE, "quick", seed=3), generate(SUITE, "quick", seed=3)
    assert a == b
    assert generate(SUITE, "quick", seed=4) != a
    case = a[10]
    ia, ib = make_inputs(SUITE, case), make_inputs(SUITE, case)
    assert torch.equal(ia["x"], ib["x"]) and torch.equal(ia["dy"], ib["dy"])


def test_level_counts_split_among_dtypes_specials_beyond_the_scale():
    cases = generate(SUITE, "L0")
    counted = [c for c in cases if c.counted]
    per = collections.Counter(c.dtype for c in counted)
    assert len(counted) >= 5000 and min(per.values()) >= 200
    assert sum(c.elements for c in counted) >= 1_000_000
    only = generate(SUITE, "quick", dtypes=[torch.bfloat16])
    assert sum(c.counted for c in only) == 48 and {c.dtype for c in only} == {torch.bfloat16}


@pytest.mark.parametrize(
    "level,shares",
    [("L0", {"uniform": 0.5, "normal": 0.5}), ("L1", {"tiny": 0.1, "uniform": 0.3, "normal": 0.4, "outliers": 0.2})],
)
def test_value_mix_follows_the_standard(level, shares):
    counted = [c for c in generate(SUITE, level, dtypes=[torch.float32]) if c.counted]
    got = collections.Counter(c.value_range for c in counted)
    assert {k: round(v / len(counted), 2) for k, v in got.items()} == shares
    for c in counted:
        drawn = c.value_range == "normal"
        assert (c.mu is not None) == drawn and (c.sigma is not None) == drawn
        if drawn:
            assert NORMAL_MU[0] <= c.mu <= NORMAL_MU[1] and NORMAL_SIGMA[0] <= c.sigma <= NORMAL_SIGMA[1]


def test_every_dimension_count_and_the_l0_steps():
    rule = SUITE.primary.shapes
    counted = [c for c in generate(SUITE, "L0") if c.counted and c.shape not in rule.fixed]
    assert {len(c.shape) for c in counted} == set(range(1, 9))
    for c in counted:
        assert c.elements <= rule.max_length and c.shape[-1] <= rule.max_dim
        assert all(d == 1 or d % 15 == 0 or d % 16 == 0 for d in c.shape), c.shape
    l1 = [c for c in generate(SUITE, "L1") if c.counted]
    assert any(d > 1 and d % 15 and d % 16 for c in l1 for d in c.shape)  # random at L1


def test_values_mean_what_the_case_says():
    cases = [
        c
        for c in generate(SUITE, "L1", dtypes=[torch.float32])
        if c.counted and c.elements >= 4000 and "weight" not in c.omitted
    ]
    first = {c.value_range: c for c in reversed(cases)}
    u, t = make_inputs(SUITE, first["uniform"])["x"], make_inputs(SUITE, first["tiny"])["x"]
    assert u.abs().max() <= 5 and u.abs().max() > 4 and t.abs().max() <= 1e-3
    n = first["normal"]
    x = make_inputs(SUITE, n)["x"].double()
    assert abs(x.mean() - n.mu) < 5 * n.sigma / math.sqrt(x.numel()) + 1e-3 and abs(x.std() / n.sigma - 1) < 0.1
    o = first["outliers"]
    inputs = make_inputs(SUITE, o)
    for name in ("x", "dy", "weight"):  # every computed input, each its own positions
        k = outlier_count(inputs[name].numel())  # x1000 takes a base value above 0.005 past U[-5, 5]'s bound
        assert 0.99 * k <= (inputs[name].abs() > 5).sum() <= k, name
    assert not torch.equal(inputs["x"].abs() > 5, inputs["dy"].abs() > 5)


def test_outliers_stay_in_the_dtype_range():
    o = next(
        c for c in generate(SUITE, "L1", dtypes=[torch.float16]) if c.value_range == "outliers" and c.elements > 2000
    )
    x = make_inputs(SUITE, o)["x"]
    assert torch.isfinite(x).all() and x.abs().max() > 1000


def test_special_scenarios_per_dtype():
    cases = [c for c in generate(SUITE, "quick", dtypes=[torch.float16]) if not c.counted]
    by = collections.defaultdict(list)
    for c in cases:
        by[c.scenario].append(c)
    assert sorted(c.shape for c in by["empty"]) == [(0, 3, 16), (2, 0, 16), (2, 3, 0)]
    assert sorted(len(c.shape) for c in by["lower_border"]) == list(range(1, 9)) and all(
        c.elements == 1 for c in by["lower_border"]
    )
    assert {c.shape for c in by["upper_border"]} == {(2**31, 1), (1, 2**31)} and [c.shape for c in by["scalar"]] == [
        (1,)
    ]
    for what in ("nan", "inf", "-inf", "mixed_inf"):
        group = by[f"all_{what}"]
        assert collections.Counter(c.filled for c in group) == {"x": 4, "weight": 4, "dy": 4}
    c = next(c for c in by["all_mixed_inf"] if c.filled == "dy" and c.elements > 100)
    inputs = make_inputs(SUITE, c)
    assert torch.isinf(inputs["dy"]).all() and (inputs["dy"] > 0).any() and (inputs["dy"] < 0).any()
    assert torch.isfinite(inputs["x"]).all()
    x = make_inputs(SUITE, by["infnan_rows"][0])["x"]
    assert torch.isnan(x).sum() == 1 and torch.isinf(x).sum() == 2
    z = make_inputs(SUITE, by["zero_rows"][0])["x"]
    assert (z[::2] == 0).all() and (z[1::2] != 0).any()


def test_extras_use_the_suite_ranges():
    extras = [c for c in generate(SUITE, "L0", dtypes=[torch.float32]) if c.value_range in ("near_eps", "large")]
    assert not any(c.counted for c in extras) and len(extras) >= 0.09 * 1667
    large = make_inputs(SUITE, next(c for c in extras if c.value_range == "large"))["x"]
    assert large.abs().min() >= 1e15
    near = next(c for c in extras if c.value_range == "near_eps" and c.shape[-1] >= 16)
    x = make_inputs(SUITE, near)["x"].double()
    ms, eps = (x * x).mean(-1), near.attrs["eps"]
    assert ((ms > eps / 500) & (ms < eps * 500)).all()  # per row within a factor 10 of eps (plus sampling)


def test_a_smaller_level_is_a_prefix_of_a_larger_one():
    quick, full = generate(SUITE, "quick"), generate(SUITE, "L0")
    by_key = {(c.dtype, c.rank): c for c in full}
    for c in quick:
        if not c.counted:
            continue
        twin = by_key[(c.dtype, c.rank)]
        assert (twin.shape, twin.value_range, twin.attrs, twin.mu, twin.seed) == (
            c.shape,
            c.value_range,
            c.attrs,
            c.mu,
            c.seed,
        )


def test_l2_has_a_model_third_from_the_captured_activations():
    from tileport.cases import modelcases

    cases = [c for c in generate(SUITE, "L2", dtypes=[torch.bfloat16]) if c.counted]
    model = [c for c in cases if c.value_range == "model"]
    assert abs(len(model) / len(cases) - 1 / 3) < 0.01 and {c.source[0] for c in model} == set(modelcases.configs())
    c = next(c for c in model if c.shape[0] > 3)
    config, index, start, rows = c.source
    inputs = make_inputs(SUITE, c)
    stored = modelcases.pool(config)
    assert torch.equal(inputs["x"], stored["hidden"][index, start : start + rows])  # bf16 in, bf16 out: exact
    assert torch.equal(inputs["weight"], stored["hidden_weight"][index])
    assert torch.equal(inputs["dy"], stored["hidden_grad"][index, start : start + rows])
    assert not any(c.value_range == "model" for c in generate(SUITE, "L1", dtypes=[torch.bfloat16]))
