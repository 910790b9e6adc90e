"""verify of an operator declared by named dimensions (rope): every present output judged against the float64
golden and the benchmark, absent ones (k_out of k=None) skipped, a wrong implementation failing, a stub reported
as not implemented, and the report written with each tensor's shape."""

import json

import pytest
import torch

from tileport.report import write_report
from tileport.verify import prepare, run

IMPL = """\
from tileport.ops.rope.spec import composite


def wrong_sign(q, k, cos, sin, position_ids=None, offsets=None, interleaved=False, offset=0):
    return composite(q, k, cos, -sin, position_ids, offsets, interleaved, offset)  # rotates the other way


def todo(q, k, cos, sin, position_ids=None, offsets=None, interleaved=False, offset=0):
    raise NotImplementedError("TODO: rope's kernel")
"""


@pytest.fixture(scope="module")
def torch_run():
    plan = prepare("rope", "quick", backends=["torch"], dtypes=[torch.float32])
    return plan, run(plan, with_perf=False)


def test_quick_on_the_torch_backend_passes_both_layouts(torch_run, tmp_path):
    plan, rep = torch_run
    assert rep.passed, [(r.case, r.output, r.failures) for r in rep.failures[:3]]
    judged = [r for r in rep.results if r.backend == "torch"]
    assert {r.output for r in judged} == {"q_out", "k_out", "dq", "dk"}
    assert {r.attrs["interleaved"] for r in judged} == {False, True}
    no_k = {r.case for r in judged if r.attrs.get("k", "given") is None}
    assert no_k and not any(r.output in ("k_out", "dk") for r in judged if r.case in no_k)  # absent: not judged
    assert any(r.verdict.actual.elements > 0 for r in judged if r.output == "dq")  # the backward was judged
    paths = write_report(rep, tmp_path)
    md, checks = paths["md"].read_text(), paths["checks"].read_text()
    assert "PASS" in md and "q 1x128x8x128, k 1x128x2x128, cos 128x64" in checks  # each tensor's shape, not one (M, D)
    rows = json.loads(paths["json"].read_text())["results"]
    assert any(r["shape"].startswith("q 4x1x8x64") for r in rows)


def _impl_run(tmp_path, name: str, cases: int = 6):
    (tmp_path / "impl.py").write_text(IMPL)
    plan = prepare(
        "rope", "quick", backends=["torch"], dtypes=[torch.float32], impls=[f"{tmp_path / 'impl.py'}:{name}"]
    )
    plan.cases = [c for c in plan.cases if c.counted][:cases]
    return run(plan, with_perf=False)


def test_a_rotation_by_the_wrong_sign_fails(tmp_path):
    rep = _impl_run(tmp_path, "wrong_sign")
    provider = next(b["name"] for b in rep.backends if b["name"].startswith("impl:"))
    failed = {r.output for r in rep.failures if r.backend == provider}
    assert not rep.passed and failed == {"q_out", "k_out", "dq", "dk"}  # the backward through its autograd too
    assert not any(r.backend == "torch" for r in rep.failures)
    paths = write_report(rep, tmp_path / "report")
    assert "FAIL" in paths["md"].read_text() and "MERE ratio" in paths["md"].read_text()


def test_a_stub_is_reported_as_not_implemented(tmp_path):
    rep = _impl_run(tmp_path, "todo", cases=2)
    stub = [r for r in rep.results if r.backend.startswith("impl:")]
    assert stub and all(r.failures == ["not implemented: TODO: rope's kernel"] for r in stub)
    assert "not implemented" in write_report(rep, tmp_path / "report")["md"].read_text()


def test_the_commands_take_an_operator_by_named_dimensions(tmp_path):
    from typer.testing import CliRunner

    from tileport.cli import app

    runner = CliRunner()
    out = tmp_path / "rep"
    result = runner.invoke(
        app,
        ["verify", "rope", "--level", "quick", "--backend", "torch", "--dtype", "bf16", "--no-perf", "--out", str(out)],
    )
    assert result.exit_code == 0, result.output
    assert "checks passed at quick" in result.output and "q 1x128x8x128" in (out / "checks.md").read_text()
    result = runner.invoke(
        app, ["cases", "rope", "--level", "quick", "--dtype", "fp16", "--out", str(tmp_path / "c.json")]
    )
    assert result.exit_code == 0, result.output
    doc = json.loads((tmp_path / "c.json").read_text())
    first = doc["cases"][0]
    assert first["sizes"] == {"B": 1, "T": 128, "Hk": 2, "Hq": 8, "D": 128, "R": 128, "T_ro": 128}
    assert first["inputs"]["cos"] == {"shape": [128, 64], "dtype": "float16"} and first["inputs"]["position_ids"][
        "dtype"
    ] in ("int32", "int64")
    assert doc["coverage"]["scenarios"]["empty"] == 7 and doc["coverage"]["dimension_counts"] == {"4": 48}
