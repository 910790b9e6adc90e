"""The generator: seeded, counted per level, with the fixed and boundary cases, and inputs that honour them."""

import torch

from tileport.cases import generate, load_suite, make_inputs

SUITE = load_suite("l2norm")


def test_same_seed_same_cases_and_inputs():
    a, b = generate(SUITE, "quick", seed=3), generate(SUITE, "quick", seed=3)
    assert a == b
    assert generate(SUITE, "quick", seed=4) != a
    case = a[10]
    ia, ib = make_inputs(SUITE, case), make_inputs(SUITE, case)
    assert torch.equal(ia["x"], ib["x"]) and torch.equal(ia["dy"], ib["dy"])


def test_level_counts_split_among_dtypes():
    cases = generate(SUITE, "L0")
    per = {d: sum(c.dtype == d for c in cases) for d in SUITE.primary.dtypes}
    assert len(cases) >= 5000 and min(per.values()) >= 200
    assert sum(c.elements for c in cases) >= 1_000_000
    only = generate(SUITE, "quick", dtypes=[torch.bfloat16])
    assert len(only) == 48 and {c.dtype for c in only} == {torch.bfloat16}


def test_shapes_follow_the_rules():
    rule = SUITE.primary.shapes
    for c in generate(SUITE, "L0"):
        if c.shape in rule.fixed:
            continue
        assert c.shape[-1] in rule.last_dim_values
        assert len(c.shape) in rule.dim_numbers
        assert c.elements <= rule.max_length
        assert c.attrs["eps"] in SUITE.attrs[0].values


def test_boundary_cases_are_present_and_planted():
    cases = generate(SUITE, "quick", dtypes=[torch.float16])
    kinds = {c.boundary: c for c in cases if c.boundary}
    assert set(kinds) == {"empty", "infnan", "zeros"}
    assert kinds["empty"].elements == 0
    x = make_inputs(SUITE, kinds["infnan"])["x"]
    assert torch.isnan(x).sum() == 1 and torch.isinf(x).sum() == 2
    z = make_inputs(SUITE, kinds["zeros"])["x"]
    assert (z[::2] == 0).all() and (z[1::2] != 0).any()


def test_value_ranges_mean_what_they_say():
    by_range = {}
    for c in generate(SUITE, "L0", dtypes=[torch.float32]):
        if not c.boundary and c.elements >= 512 and c.shape[-1] >= 100:
            by_range.setdefault(c.value_range, c)
    near = by_range["near_eps"]
    x = make_inputs(SUITE, near)["x"].double()
    ss = (x * x).sum(-1)
    eps = near.attrs["eps"]
    assert ((ss > eps / 200) & (ss < eps * 200)).all()  # per row within a factor 10 of eps (plus sampling)
    assert make_inputs(SUITE, by_range["large"])["x"].abs().min() >= 1e15
    u = make_inputs(SUITE, by_range["uniform"])["x"]
    assert u.min() >= -5 and u.max() <= 5


def test_a_smaller_level_is_a_prefix_of_a_larger_one():
    quick, full = generate(SUITE, "quick"), generate(SUITE, "L0")
    by_key = {(c.dtype, c.rank): c for c in full}
    for c in quick:
        twin = by_key[(c.dtype, c.rank)]
        assert (twin.shape, twin.value_range, twin.attrs, twin.boundary, twin.seed) == (c.shape, c.value_range, c.attrs, c.boundary, c.seed)
