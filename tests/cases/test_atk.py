"""The test kit's own case design YAML: the shipped examples load and mean what they say; a malformed file
names the file, the key and what was expected."""

from pathlib import Path

import pytest
import torch

from tileport.cases import CaseFileError, generate, load_suite, make_inputs

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "atk"


@pytest.mark.parametrize("op", ["l2norm", "rms_norm", "layer_norm", "add_rms_norm"])
def test_each_shipped_example_loads_for_its_operator(op):
    s = load_suite(EXAMPLES / f"{op}.yaml")
    assert s.name == op and s.standard["acc"] == "double_bm"
    assert set(s.primary.dtypes) == {torch.float32, torch.float16, torch.bfloat16}
    assert s.primary.shapes.dim_numbers == tuple(range(1, 9))
    assert s.level("L0").cases == 200 * 3 and s.level("L0").runs == 50 and s.level("L2").runs == 1000
    assert "dy" in {t.name for t in s.tensors} and s.backward  # the cascade's gradient input is added


def test_rms_norm_example_maps_torch_name_ranges_and_attributes():
    s = load_suite(EXAMPLES / "rms_norm.yaml")
    x, weight = s.tensors[0], s.tensors[1]
    assert x.valid == ((-5.0, 5.0, 3.0), (-100.0, 100.0, 1.0)) and weight.like == "x" and not weight.required
    assert s.primary.shapes.max_dim == 65536 and s.primary.shapes.max_length == 262144
    (eps,) = s.attrs
    assert eps.values[0] == 1e-12 and eps.values[-1] == 1e-5 and eps.values[1] == pytest.approx(1e-12**0.5 * 1e-5**0.5)
    assert eps.invalid == (-1.0, -1e-6)
    cases = generate(s, "L0", dtypes=[torch.float32])
    invalid = [c for c in cases if c.expects_rejection]
    assert sorted(c.attrs["eps"] for c in invalid) == [-1.0, -1e-6]
    uniform = next(c for c in cases if c.counted and c.value_range == "uniform" and c.elements > 10000)
    v = make_inputs(s, uniform)["x"]
    assert v.abs().max() <= 100  # within the valid intervals
    assert any(
        make_inputs(s, c)["x"].abs().max() > 5
        for c in cases
        if c.counted and c.value_range == "uniform" and c.elements > 1000
    )


EXAMPLE = (EXAMPLES / "l2norm.yaml").read_text()


@pytest.mark.parametrize(
    "old, new, key, expected",
    [
        ("generate: reduce", "generate: my_generator", "generate", "generator modules are not supported"),
        ("api_type: function", "api_type: class", "api_type", "function"),
        ("acc: double_bm", "acc: equal", "standard.acc", "one of double_bm"),
        ("name: l2norm\n", "name: torch.no_such_function\n", "name", "a function that imports"),
        ("name: l2norm\n", "", "name", "the key is missing"),
        (
            "dtype_numbers: 200",
            "dtype_numbers: 200\nshape_distribution: x",
            "shape_distribution",
            "one of the keys api",
        ),
        (
            "      max_length: 131072",
            "      max_length: 131072\n      min_length: 1",
            "inputs[0].shapes.min_length",
            "one of the keys",
        ),
        ("type: attr", "type: scalar", "inputs[1].type", "tensor or attr"),
        (
            "  - name: eps",
            "  - name: smoothing",
            "inputs[1].name",
            "an attribute of l2norm",
        ),  # (epsilon: an alias of eps)
        ("valid: {values: [[-5, 5]]}", "valid: {values: [[5, -5]]}", "inputs[0].ranges.valid.values", "low <= high"),
        (
            "valid: {values: [[-5, 5]]}",
            "valid: {values: [[-5, 5]], weights: [1, 2]}",
            "inputs[0].ranges.valid.weights",
            "1 positive numbers",
        ),
        (
            "dtypes: {values: [float32, float16, bfloat16]}",
            "dtypes: {values: [float32, int8]}",
            "inputs[0].dtypes.values",
            "fp32, fp16, bf16",
        ),
        ("extra_numbers: none", "extra_numbers: some", "extra_numbers", "all, none, or a number"),
    ],
)
def test_malformed_atk_file_names_file_key_and_expectation(tmp_path, old, new, key, expected):
    assert old in EXAMPLE, old
    path = tmp_path / "atk.yaml"
    path.write_text(EXAMPLE.replace(old, new, 1))
    with pytest.raises(CaseFileError) as err:
        load_suite(path)
    msg = str(err.value)
    assert str(path) in msg and f"key '{key}'" in msg and expected in msg, msg


def test_a_second_tensor_may_not_declare_shapes(tmp_path):
    text = (
        (EXAMPLES / "rms_norm.yaml")
        .read_text()
        .replace(
            "  - name: weight\n    type: tensor\n",
            "  - name: weight\n    type: tensor\n    shapes: {dim_numbers: {values: [1]}}\n",
        )
    )
    path = tmp_path / "atk.yaml"
    path.write_text(text)
    with pytest.raises(CaseFileError, match=r"inputs\[1\].shapes.*only the first tensor declares them"):
        load_suite(path)


def test_a_file_written_with_the_apis_own_parameter_names():
    """torch.nn.functional.rms_norm(input, normalized_shape, weight=None, eps=None): input is x, normalized_shape
    is derived from it (read, not drawn), eps a list of discrete values with weights, declared float."""
    s = load_suite(EXAMPLES / "rms_norm_api_names.yaml")
    assert s.name == "rms_norm" and [t.name for t in s.tensors] == ["x", "weight", "dy"]
    (eps,) = s.attrs
    assert eps.values == (1e-6, 1e-5, 1e-12) and eps.weights == (2.0, 1.0, 1.0)
    drawn = [c.attrs["eps"] for c in generate(s, "L0", dtypes=[torch.float32]) if c.counted]
    share = drawn.count(1e-6) / len(drawn)
    assert 0.35 < share < 0.65 and set(drawn) == {1e-6, 1e-5, 1e-12}  # drawn by the weights: half of them 1e-6


def _atk(tmp_path, text):
    path = tmp_path / "design.yaml"
    path.write_text(text)
    return path


BASE = """
api: pytorch
api_type: function
name: torch.nn.functional.rms_norm
standard: {acc: double_bm}
inputs:
  - name: input
    type: tensor
    dtypes: {values: [fp32]}
    shapes: {dim_numbers: {values: [2]}}
"""


@pytest.mark.parametrize(
    "extra,key,message",
    [
        ("outputs: [y]\n", "outputs", "not supported yet"),
        ("shape_distributions: {}\n", "shape_distributions", "not supported yet"),
        (
            "  - {name: epsilon, type: attr, ranges: {valid: {values: [1.0e-6, 1.0e-5]}}, dtypes: {values: [int]}}\n",
            "inputs[1].ranges.valid.values",
            "values of dtype int for 'eps'",
        ),
        (
            "  - {name: epsilon, type: attr, ranges: {valid: {values: [1.0e-6, 1.0e-5], weights: [1]}}}\n",
            "inputs[1].ranges.valid.weights",
            "2 positive numbers, one per interval",
        ),
        ("  - {name: gamma2, type: tensor}\n", "inputs[1].name", "by the API's names: input, weight"),
    ],
)
def test_kit_keys_and_attribute_values_are_checked_by_name(tmp_path, extra, key, message):
    text = BASE + extra if extra.startswith("  -") else extra + BASE
    with pytest.raises(CaseFileError, match=message) as info:
        load_suite(_atk(tmp_path, text))
    assert key in str(info.value)
