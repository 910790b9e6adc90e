"""`tileport bench --model CONFIG`: a model's training and forward steps, unpatched, compiled, patched and patched
but for the loss, timed interleaved in one run and printed as one table with what was replaced."""

import json

import pytest

pytest.importorskip("transformers")

from typer.testing import CliRunner

import tileport
from tileport.cli import app
from tileport.transformers import zoo

LINEAR = ("chunk_gated_delta_rule", "fused_recurrent_gated_delta_rule", "causal_conv1d", "causal_conv1d_update")
# what the patched provider must have replaced beside the norms and the fused loss; one hybrid family timed (a run
# is two minutes on 2 cores, most of it torch.compile), every hybrid's bench model patched below
REPLACED = {"qwen3": (), "qwen3_5": LINEAR}


@pytest.mark.parametrize("family", REPLACED)
def test_the_table_has_every_step_and_provider(tmp_path, family):
    cfg = zoo.config(family, hidden=64, vocab=512)
    (tmp_path / "config.json").write_text(json.dumps(cfg.to_dict()))
    result = CliRunner().invoke(
        app, ["bench", "--model", str(tmp_path), "--quick", "--budget", "0.2", "--out", str(tmp_path / "b")]
    )
    assert result.exit_code == 0, result.output
    text = (tmp_path / "b" / "model.md").read_text()
    for step in ("train", "forward"):
        for provider in ("eager", "torch.compile", "tileport", "tileport, eager loss", "tileport, torch.compile"):
            row = next((line for line in text.splitlines() if line.startswith(f"| {step} | {provider} |")), None)
            assert row is not None, (step, provider, text)
            tokens_per_s = float(row.split("|")[3])
            assert tokens_per_s > 0
    assert "| train | eager |" in text and "1.00x" in text  # ratios against eager
    for operator in ("rms_norm", "fused_linear_cross_entropy", *REPLACED[family]):  # what the patched provider replaced
        assert operator in text, (operator, text)


def test_an_unknown_model_says_why():
    result = CliRunner().invoke(app, ["bench", "--model", "nosuch"])
    assert result.exit_code == 2 and "no config 'nosuch'" in result.output


@pytest.mark.parametrize("family", zoo.HYBRID)
def test_the_hybrid_families_bench_model_has_its_linear_attention_patched(family):
    """``tileport bench --model FAMILY``'s model (the bench's width, the family's real vocabulary), on the meta
    device: its gated DeltaNet layer's functions are among what the patched providers replace."""
    cfg = zoo.load(family, bench=True)
    assert cfg.vocab_size == zoo.BENCH_VOCAB[family] and cfg.linear_key_head_dim == 128
    report = tileport.patch(zoo.skeleton(cfg), dry_run=True)
    assert all(report.counts().get(op) == 1 for op in LINEAR) and not report.left, report.table()
