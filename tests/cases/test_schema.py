"""The suite loader: the shipped suite loads, and each kind of malformed file names file, key and expectation."""

import textwrap

import pytest
import torch

from tileport.cases import CaseFileError, load_suite
from tileport.cases.schema import SUITES

GOOD = """
name: toy
api: tileport.l2norm_fwd
backward: true
outputs: [y, rstd]
standard: {acc: double_bm, golden: float64, benchmark: torch}
levels:
  quick: {cases: 6, runs: 2, limits: L0}
inputs:
  - name: x
    type: tensor
    dtypes: {values: [float32, float16]}
    ranges:
      normal: {kind: normal, scale: 1.0}
    shapes: {dim_numbers: [2], max_dim: 16, max_length: 1024, fixed: [[2, 8]]}
    boundary: {has_empty: true}
  - name: dy
    type: tensor
    like: x
    ranges:
      normal: {kind: normal}
  - name: eps
    type: attrs
    values: [1.0e-6]
"""


def write(tmp_path, text):
    p = tmp_path / "suite.yaml"
    p.write_text(textwrap.dedent(text))
    return p


def test_shipped_l2norm_suite_covers_the_issue():
    s = load_suite("l2norm")
    x = s.primary
    assert set(x.dtypes) == {torch.float16, torch.bfloat16, torch.float32}
    assert x.shapes.dim_numbers == tuple(range(1, 9)) and x.shapes.max_dim == 65536
    assert {r.kind for r in x.ranges} == {"near_eps", "large"}  # tileport's extras; the standard's mix is built in
    assert all(x.boundary[f] for f in ("has_empty", "has_infnan", "has_scalar", "has_upper_border", "has_lower_border"))
    assert len(s.attrs[0].values) >= 3 and s.backward
    assert s.level("L1").cases == 10000 and s.level("L1").limits == "L1"


def test_small_suite_loads(tmp_path):
    s = load_suite(write(tmp_path, GOOD))
    assert s.name == "toy" and s.primary.shapes.fixed == ((2, 8),) and s.tensors[1].like == "x"


@pytest.mark.parametrize(
    "old, new, key, expected",
    [
        ("max_length: 1024", "max_length: -3", "inputs[0].shapes.max_length", "a positive integer"),
        ("kind: normal, scale: 1.0", "kind: gaussian", "inputs[0].ranges.normal.kind", "one of normal"),
        ("values: [float32, float16]", "values: [float32, int8]", "inputs[0].dtypes.values", "dtype names"),
        ("cases: 6", "cases: many", "levels.quick.cases", "a positive integer"),
        ("limits: L0", "limits: L9", "levels.quick.limits", "one of L0"),
        ("like: x", "like: z", "inputs[1].like", "an earlier tensor input"),
        ("has_empty: true", "has_empty: maybe", "inputs[0].boundary.has_empty", "true/false"),
        ("api: tileport.l2norm_fwd\n", "", "api", "the key is missing"),
        ("dim_numbers: [2]", "dim_numbers: []", "inputs[0].shapes.dim_numbers", "non-empty list"),
        ("dim_numbers: [2]", "dim_numbers: [2, 9]", "inputs[0].shapes.dim_numbers", "dimension counts from 1 to 8"),
        ("max_dim: 16", "max_dims: 16", "inputs[0].shapes.max_dims", "one of the keys dim_numbers"),
        ("name: toy", "name: toy\nadapter: l2norm", "adapter", "one of the keys name, api"),
        ("acc: double_bm", "acc: triple_bm", "standard.acc", "one of double_bm, single_bm, mixed_tolerance_bm"),
        ("acc: double_bm", "acc: double_bm, rtol: 1", "standard.rtol", "one of acc, golden"),
        ("golden: float64", "golden: float32", "standard.golden", "float64"),
    ],
)
def test_malformed_suite_names_file_key_and_expectation(tmp_path, old, new, key, expected):
    assert old in GOOD
    path = write(tmp_path, GOOD.replace(old, new))
    with pytest.raises(CaseFileError) as err:
        load_suite(path)
    msg = str(err.value)
    assert str(path) in msg and f"key '{key}'" in msg and expected in msg
    assert err.value.key == key


def test_invalid_yaml_and_unknown_suite(tmp_path):
    with pytest.raises(CaseFileError, match="valid YAML"):
        load_suite(write(tmp_path, "name: [unclosed"))
    suites = ", ".join(sorted(p.stem for p in SUITES.glob("*.yaml")))  # what is there: a new suite keeps this true
    with pytest.raises(ValueError, match=f"no case suite for operator 'no_such_op'; suites: {suites}"):
        load_suite("no_such_op")
    with pytest.raises(ValueError, match="no level 'L7'"):
        load_suite("l2norm").level("L7")
