"""Cases from a model: `tileport cases --from-model CONFIG` records what the patched operators get in a training
step and writes case files that `tileport verify OP --cases` runs at exactly those shapes, dtypes and attributes."""

import pytest

pytest.importorskip("transformers")

import torch
from typer.testing import CliRunner

import tileport
from tileport import ops
from tileport.backends.registry import REGISTRY
from tileport.cases import capture, generate, load_suite
from tileport.cli import app
from tileport.transformers import zoo


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    out = tmp_path_factory.mktemp("model-cases")
    result = CliRunner().invoke(app, ["cases", "--from-model", "llama", "--out", str(out)])
    assert result.exit_code == 0, result.output
    return out, result.output


def test_each_patched_operator_gets_a_case_file_at_the_models_shapes(written):
    out, said = written
    cfg = zoo.config("llama")
    tokens, hidden = 2 * 64, cfg.hidden_size  # the capture's batch x seq
    names = sorted(p.stem for p in out.glob("*.yaml"))
    assert names == ["cross_entropy", "fused_linear_cross_entropy", "rms_norm", "rope", "swiglu"], said
    norm = load_suite(out / "rms_norm.yaml")
    cases = generate(norm, "quick")
    assert {c.shape for c in cases} == {(tokens, hidden)} and {c.dtype for c in cases} == {torch.bfloat16}
    assert {c.attrs["eps"] for c in cases} == {cfg.rms_norm_eps} and not any(c.scenario for c in cases)
    mlp = generate(load_suite(out / "swiglu.yaml"), "quick")
    assert [dict(c.shapes)["gate"] for c in mlp] == [(2, 64, cfg.intermediate_size)]
    assert [c.attrs["casting"] for c in mlp] == ["eager"]  # as transformers' LlamaMLP rounds
    loss = generate(load_suite(out / "fused_linear_cross_entropy.yaml"), "quick")
    assert [dict(c.shapes)["lm_weight"] for c in loss] == [(cfg.vocab_size, hidden)]
    assert set(loss[0].omitted) == {"bias", "ce_weight"}  # the model's head has neither
    rope = generate(load_suite(out / "rope.yaml"), "quick")
    heads, kv = cfg.num_attention_heads, cfg.num_key_value_heads
    assert dict(rope[0].shapes)["q"] == (2, 64, heads, cfg.head_dim) and dict(rope[0].shapes)["k"][2] == kv


def test_a_written_file_verifies(written, tmp_path):
    out, _ = written
    result = CliRunner().invoke(
        app,
        [
            "verify",
            "swiglu",
            "--cases",
            str(out / "swiglu.yaml"),
            "--level",
            "quick",
            "--no-perf",
            "--out",
            str(tmp_path / "v"),
        ],
    )
    assert result.exit_code == 0 and "PASS" in result.output, result.output
    assert "gate 2x64x" in (tmp_path / "v" / "checks.md").read_text()  # every check's row names its shapes


def test_recording_leaves_the_registry_and_the_ops_as_they_were():
    before = (REGISTRY.kernels, ops.fused_linear_cross_entropy)
    x = torch.randn(4, 8)
    with capture.record() as rec:
        tileport.rms_norm(x, torch.ones(8), eps=1e-6)
        assert ops.fused_linear_cross_entropy is not before[1]  # a composed operator's public call is recorded
    assert (REGISTRY.kernels, ops.fused_linear_cross_entropy) == before and "kernels" not in vars(REGISTRY)
    (call,) = rec.calls
    assert call.op == "rms_norm" and call.shape == (4, 8) and dict(call.attrs)["eps"] == 1e-6


def test_bad_requests_say_why(tmp_path):
    runner = CliRunner()
    none = runner.invoke(app, ["cases"])
    assert none.exit_code == 2 and "name an operator, or give --from-model" in none.output
    unknown = runner.invoke(app, ["cases", "--from-model", "nosuch", "--out", str(tmp_path)])
    assert unknown.exit_code == 2 and "no config 'nosuch'" in unknown.output and "Traceback" not in unknown.output
