"""Cases of a suite by named dimensions: every tensor in its declared shape, integer tensors by their value rules,
optional inputs present and absent, the special scenarios per dimension and per floating tensor, seeded."""

import collections
import math
import re

import pytest
import torch

from tileport.cases import CaseFileError, generate, load_suite, make_inputs
from tileport.cases.describe import record
from tileport.ops import catalog, dims
from tileport.ops import spec as s

ROPE = load_suite("rope")
DECL = catalog.get("rope").declaration
FLOATING = ("q", "k", "cos", "sin", "dq_out", "dk_out")


@pytest.fixture(scope="module")
def l0_fp32():
    return generate(ROPE, "L0", dtypes=[torch.float32])


def test_tensors_in_their_declared_shapes_and_dtypes():
    for case in [c for c in generate(ROPE, "quick") if c.all_elements < 1 << 20][:200:3]:  # not the 2^31 borders
        inputs = make_inputs(ROPE, case)
        b = dims.bind_sizes(DECL, dict(case.sizes))
        for name, _shape in case.shapes:
            assert tuple(inputs[name].shape) == b.shape_of(name), (case.describe(), name)
            assert inputs[name].dtype == (dict(case.int_dtypes).get(name) or case.dtype)
        present = {n: inputs[n] for n in ("q", "k", "cos", "sin", "position_ids", "offsets")}
        dims.bind(DECL, present, case.attrs)  # the declaration takes them as they are
        assert case.shape == tuple(inputs["q"].shape)


def test_the_scale_draws_dimensions_by_their_rules(l0_fp32):
    scale = [dict(c.sizes) for c in l0_fp32 if c.counted][len(ROPE.fixed) :]
    assert len(scale) > 1000
    for z in scale:
        assert z["R"] % 2 == 0 and z["R"] <= z["D"] and 1 <= z["B"] <= 4 and 1 <= z["T"] <= 64
        assert math.prod((z["B"], z["T"], max(z["Hq"], z["Hk"]), z["D"])) <= ROPE.max_length
    assert {True, False} == {z["T_ro"] >= z["T"] for z in scale}  # positions past the table in some cases
    assert sum(z["T_ro"] < z["T"] for z in scale) < 0.3 * len(scale)
    assert any(z["R"] < z["D"] for z in scale) and any(z["R"] == z["D"] for z in scale)  # partial and full rotary
    for key in ("T", "D"):  # L0: multiples of 15 or 16 where the range holds one
        assert all(z[key] % 15 == 0 or z[key] % 16 == 0 for z in scale), key
    l1 = [dict(c.sizes)["T"] for c in generate(ROPE, "L1", dtypes=[torch.float32]) if c.counted]
    assert any(t % 15 and t % 16 for t in l1)  # random at L1


def test_optional_inputs_present_and_absent(l0_fp32):
    scale = [c for c in l0_fp32 if c.counted]
    share = {n: sum(n in c.omitted for c in scale) / len(scale) for n in ("k", "position_ids", "offsets")}
    assert 0.2 < share["k"] < 0.3 and 0.5 < share["position_ids"] < 0.7 and 0.5 < share["offsets"] < 0.7
    no_k = next(c for c in scale if "k" in c.omitted)
    inputs = make_inputs(ROPE, no_k)
    assert (
        inputs["k"] is None and inputs["dk_out"] is None and inputs["dq_out"] is not None
    )  # k_out absent, its gradient too
    assert "no-k" in no_k.describe() and record(ROPE, no_k)["inputs"]["k"] is None
    both = next(c for c in scale if not c.omitted)
    assert all(make_inputs(ROPE, both)[n] is not None for n in ("k", "position_ids", "offsets", "dk_out"))
    assert {c.attrs["interleaved"] for c in scale} == {False, True} and {c.attrs["offset"] for c in scale} == {0, 3, -2}


def test_positions_by_their_rule_some_out_of_range(l0_fp32):
    inside = outside = below = 0
    dtypes = set()
    for c in [c for c in l0_fp32 if c.counted and "position_ids" not in c.omitted][:300]:
        z, p = dict(c.sizes), make_inputs(ROPE, c)["position_ids"]
        dtypes.add(p.dtype)
        inside += int(((p >= 0) & (p < z["T_ro"])).sum())
        outside += int(((p < 0) | (p >= z["T_ro"])).sum())
        below += int((p < 0).sum())
        assert bool((p >= -z["T_ro"] - 1).all() and (p < 2 * z["T_ro"] + 1).all())  # within one range's width
    assert dtypes == {torch.int32, torch.int64}
    assert (
        0.07 < outside / (inside + outside) < 0.2 and below > 0
    )  # 10% outside, half of them negative (plus empty tables)
    offsets = [
        (dict(c.sizes), make_inputs(ROPE, c)["offsets"]) for c in l0_fp32 if c.counted and "offsets" not in c.omitted
    ][:200]
    assert all(
        bool(((o >= -z["T"]) & (o < max(z["T_ro"], -z["T"] + 1))).all()) for z, o in offsets if z["T_ro"] > -z["T"]
    )
    assert any(bool((o < 0).any()) for _, o in offsets)  # left-padded rows


def test_special_scenarios_per_dimension_and_floating_tensor():
    cases = [c for c in generate(ROPE, "quick", dtypes=[torch.bfloat16]) if not c.counted]
    by = collections.defaultdict(list)
    for c in cases:
        by[c.scenario].append(c)
    zero = {k for c in by["empty"] for k, v in c.sizes if v == 0}
    assert zero == {"B", "T", "Hq", "Hk", "D", "R", "T_ro"}  # each dimension 0 in turn (D = 0 takes R = 0 with it)
    assert all(any(math.prod(s) == 0 for _, s in c.shapes) for c in by["empty"])
    assert all(all(v in (0, 1) for _, v in c.sizes) for c in by["lower_border"] + by["scalar"])
    assert {k for c in by["upper_border"] for k, v in c.sizes if v == 2**31} >= {"B", "T", "Hq", "Hk", "D", "R"}
    for what in ("nan", "inf", "-inf", "mixed_inf"):
        filled = collections.Counter(c.filled for c in by[f"all_{what}"])
        assert filled == {n: 4 for n in FLOATING}, what  # every floating tensor, 4 sizes each; never an integer one
    c = next(c for c in by["all_nan"] if c.filled == "cos" and math.prod(dict(c.shapes)["cos"]) > 1)
    inputs = make_inputs(ROPE, c)
    assert inputs["cos"].isnan().all() and torch.isfinite(inputs["q"]).all() and inputs["cos"].dtype == torch.bfloat16
    mixed = make_inputs(
        ROPE, next(c for c in by["all_mixed_inf"] if c.filled == "dq_out" and dict(c.shapes)["dq_out"] != (1, 1, 1, 1))
    )
    assert mixed["dq_out"].isinf().all() and {True, False} == set((mixed["dq_out"] > 0).flatten().tolist())


def test_same_seed_same_cases_and_inputs():
    a, b = generate(ROPE, "quick", seed=5), generate(ROPE, "quick", seed=5)
    assert a == b and generate(ROPE, "quick", seed=6) != a
    for case in (a[3], a[10]):
        x, y = make_inputs(ROPE, case), make_inputs(ROPE, case)
        assert all(
            (x[n] is None and y[n] is None) or torch.equal(x[n], y[n])
            for n in x
            if isinstance(x[n], torch.Tensor) or x[n] is None
        )
    quick, l0 = generate(ROPE, "quick"), generate(ROPE, "L0")
    assert [c for c in quick if c.counted][:8] == [c for c in l0 if c.counted and c.dtype == quick[0].dtype][:8]


# ------------------------------------------------------------------ a toy operator: class indices with ignore_index

TOY = s.OpSpec(
    name="toy_gather",
    summary="each row's value at its target column (a test-only operator)",
    math="y[n] = x[n, target[n]]",
    inputs=(
        "x: [N, C] float grad",
        "target: [N] index in [0, C) or ignore_index",
        "lengths: [N] index",
        "mask: [N] bool optional",
    ),
    attrs=(s.Attr("ignore_index", -100, "an int", s.INT),),
    outputs=("y: [N] like:x",),
    grads=("dx: [N, C] like:x",),
    composite=lambda x, target, lengths=None, mask=None, ignore_index=-100: x.gather(1, target.clamp(0)[:, None])[:, 0],
    example=lambda shape, dtype, device, generator: {},
    bytes_moved=lambda shape, dtype, mode: 0,
)

TOY_SUITE = """\
name: toy_gather
api: toy.gather
backward: {backward}
outputs: [y]
standard: {{acc: double_bm}}
levels: {{quick: {{cases: 60, runs: 1, limits: L0}}}}
dims: {{N: [1, 300], C: [1, 40]}}
max_length: 6000
inputs:
  - {{name: x, type: tensor, dtypes: {{values: [float32, float16]}}}}
  - {{name: target, type: tensor, values: {{kind: index, ignore: 0.2}}}}
  - {{name: lengths, type: tensor, dtypes: {{values: [int32]}}, values: {{kind: lengths, low: 0, high: C}}}}
  - {{name: mask, type: tensor, required: false}}
  - {{name: ignore_index, type: attrs, values: [-100, -1]}}
"""


@pytest.fixture
def toy(tmp_path, monkeypatch):
    monkeypatch.setitem(catalog.specs(), TOY.name, TOY)
    path = tmp_path / "toy_gather.yaml"
    path.write_text(TOY_SUITE.format(backward="true"))
    return load_suite(path)


def test_class_indices_in_range_with_a_share_of_ignore_index(toy):
    ignored = total = 0
    masks = []
    for c in [c for c in generate(toy, "quick") if c.counted]:
        inputs = make_inputs(toy, c)
        t, n = inputs["target"], dict(c.sizes)
        ignore = c.attrs["ignore_index"]
        assert t.dtype == torch.int64 and tuple(t.shape) == (n["N"],)
        assert bool((((t >= 0) & (t < n["C"])) | (t == ignore)).all())
        dims.bind(
            TOY.declaration, {"x": inputs["x"], "target": t, "lengths": inputs["lengths"]}, c.attrs
        ).check_values()
        ignored, total = ignored + int((t == ignore).sum()), total + t.numel()
        lengths = inputs["lengths"]
        assert lengths.dtype == torch.int32 and bool(
            ((lengths >= 0) & (lengths <= n["C"])).all()
        )  # lengths: C included
        assert (
            tuple(inputs["dy"].shape) == (n["N"],) and inputs["dy"].dtype == c.dtype
        )  # the output's gradient, its shape
        masks += [inputs["mask"]] if inputs["mask"] is not None else []
    assert 0.15 < ignored / total < 0.25
    assert masks and all(m.dtype == torch.bool for m in masks) and {True, False} == set(torch.cat(masks).tolist())
    assert {c.attrs["ignore_index"] for c in generate(toy, "quick")} == {-100, -1}


def test_a_forward_suite_draws_no_output_gradients(tmp_path, monkeypatch):
    monkeypatch.setitem(catalog.specs(), TOY.name, TOY)
    path = tmp_path / "toy_gather.yaml"
    path.write_text(TOY_SUITE.format(backward="false"))
    suite = load_suite(path)
    case = next(c for c in generate(suite, "quick") if c.counted)
    assert [n for n, _ in case.shapes][:3] == ["x", "target", "lengths"] and make_inputs(suite, case)["dy"] is None


@pytest.mark.parametrize(
    "old,new,key,expected",
    [
        ("C: [1, 40]}", "}", "dims", "missing: C"),
        ("C: [1, 40]}", "C: [1, 40], M: [1, 2]}", "dims.M", "a dimension of the declaration"),
        ("C: [1, 40]", "C: [1, K]", "dims.C[0].range", "over the dimensions above"),
        (
            "  - {name: lengths, type: tensor, dtypes: {values: [int32]}, values: {kind: lengths, low: 0, high: C}}\n",
            "",
            "inputs",
            "missing: lengths",
        ),
        ("values: {kind: lengths, low: 0, high: C}", "dtypes: {values: [int32]}", "inputs[2].values", "a value rule"),
        ("{values: [int32]}, values", "{values: [float32]}, values", "inputs[2].dtypes.values", "int64, int32"),
        (
            "mask, type: tensor, required: false}",
            "mask, type: tensor, values: {kind: index}}",
            "inputs[3].values",
            "no value rule for a bool",
        ),
        ("{kind: index, ignore: 0.2}", "{kind: index, ignore: 1.5}", "inputs[1].values.ignore", "a share from 0 to 1"),
        ("max_length: 6000", "max_length: 6000\nextra_share: 0.1", "extra_share", "no extra cases yet"),
        ("outputs: [y]", "outputs: [z]", "outputs", "names of toy_gather's outputs"),
    ],
)
def test_a_malformed_suite_names_the_key(tmp_path, monkeypatch, old, new, key, expected):
    monkeypatch.setitem(catalog.specs(), TOY.name, TOY)
    text = TOY_SUITE.format(backward="true")
    assert old in text
    path = tmp_path / "toy_gather.yaml"
    path.write_text(text.replace(old, new))
    with pytest.raises(CaseFileError, match=f"key '{re.escape(key)}'.*{expected}"):
        load_suite(path)
