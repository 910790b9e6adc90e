"""bench of an operator declared by named dimensions (rope): its own 4-D shapes, example inputs and bytes moved
from its spec; eager, torch.compile and the backends timed; an absent output (k_out of k=None) has no gradient."""

import math

import pytest
import torch
from typer.testing import CliRunner

from tileport.bench.providers import group_inputs, tileport_backends
from tileport.bench.run import plan, run
from tileport.cli import app
from tileport.ops.catalog import get
from tileport.providers import Backend
from tileport.providers.timed import in_mode

SHAPE = (1, 8, 4, 16)  # B x T x Hq x D


def test_a_tiny_shape_runs_eager_compile_and_the_backends():
    spec = get("rope")
    backends = ["torch", *tileport_backends("rope")]
    groups = plan("rope", ["fwd", "bwd", "fwdbwd"], [torch.float32], [SHAPE], [1])
    tested = [Backend(b) for b in backends]
    rows = run("rope", groups[:1], tested, budget_s=0.01) + run(
        "rope", groups[1:], tested, budget_s=0.01, compile_baseline=False
    )
    timed = {(r["mode"], r["provider"]) for r in rows if r["statistic"] == "min_us"}
    for mode in ("fwd", "bwd", "fwdbwd"):
        assert {(mode, p) for p in (*backends, "torch-eager", "copy")} <= timed, mode
    assert ("fwd", "torch-compile") in timed
    assert {r["shape"] for r in rows} == {"1x8x4x16"}
    for r in rows:  # GB/s from the spec's bytes moved at that shape, not rows x D
        if r["statistic"] == "gbps":
            us = next(
                x["value"]
                for x in rows
                if x["statistic"] == "min_us" and x["provider"] == r["provider"] and x["mode"] == r["mode"]
            )
            assert r["value"] == pytest.approx(spec.bytes_moved(SHAPE, torch.float32, r["mode"]) / (us * 1e-6) / 1e9)


def test_example_and_bytes_moved_come_from_the_spec():
    spec = get("rope")
    inputs, dy, grads = group_inputs(spec, SHAPE, torch.bfloat16)
    assert inputs["q"].shape == SHAPE and inputs["k"].shape == (1, 8, 1, 16) and inputs["cos"].shape == (8, 8)
    assert grads == ["q", "k"] and dy.shape == SHAPE  # cos and sin are not differentiated
    q_k, tables = (4 + 1) * 8 * 16, 8 * 16  # q and k's elements; cos and sin's
    assert spec.bytes_moved(SHAPE, torch.bfloat16, "fwd") == (2 * q_k + tables) * 2
    assert spec.bytes_moved(SHAPE, torch.bfloat16, "fwdbwd") == 2 * spec.bytes_moved(SHAPE, torch.bfloat16, "bwd")
    assert all(len(shape) == 4 for shape in spec.sweep) and all(len(c.shapes[0].split("x")) == 4 for c in spec.bar)


def test_an_absent_output_gets_no_gradient():
    spec = get("rope")
    inputs, dy, _ = group_inputs(spec, SHAPE, torch.float32)
    inputs = inputs | {"k": None}
    (dq,) = in_mode(lambda **kw: spec.function(**kw, backend="torch"), inputs, dy, "fwdbwd", ["q"])()
    assert dq.shape == SHAPE and math.isfinite(float(dq.abs().sum()))


def test_a_shape_the_example_does_not_take_is_a_usage_error(tmp_path):
    result = CliRunner().invoke(app, ["bench", "rope", "--shape", "4x1024x512", "--out", str(tmp_path)])
    assert (
        result.exit_code == 2
        and "not a shape rope's benchmarks take" in result.output
        and "1x1x32x128" in result.output
    )


def test_the_speed_bar_judges_the_specs_own_shape_classes():
    from tileport.bench.bar import judge_bar

    spec = get("rope")
    base = dict(mode="fwd", dtype="float32", threads=1)
    stats = (("tilelang", "speedup_vs_compile", 1.3), ("tilelang", "min_us", 10.0), ("torch-eager", "min_us", 30.0))
    rows = [
        base | dict(shape=shape, provider=p, statistic=stat, value=v)
        for shape in ("1x1024x32x128", "1x1x32x128")  # a prefill shape of the bar, a decode shape it does not name
        for p, stat, v in stats
    ]
    judged = judge_bar(rows, spec.bar)
    assert [(j["criterion"], j["shape"], j["met"]) for j in judged] == [("fwd vs torch.compile", "1x1024x32x128", True)]
