"""`tileport bench --model CONFIG`: a model's training and forward steps, unpatched, compiled, patched and patched
but for the loss, timed interleaved in one run and printed as one table with what was replaced."""

import json

import pytest

pytest.importorskip("transformers")

from typer.testing import CliRunner

from tileport.cli import app
from tileport.transformers import zoo


def test_the_table_has_every_step_and_provider(tmp_path):
    cfg = zoo.config("qwen3", hidden=64, vocab=512)
    (tmp_path / "config.json").write_text(json.dumps(cfg.to_dict()))
    result = CliRunner().invoke(
        app, ["bench", "--model", str(tmp_path), "--quick", "--budget", "0.2", "--out", str(tmp_path / "b")]
    )
    assert result.exit_code == 0, result.output
    text = (tmp_path / "b" / "model.md").read_text()
    for step in ("train", "forward"):
        for provider in ("eager", "torch.compile", "tileport", "tileport, eager loss"):
            row = next((line for line in text.splitlines() if line.startswith(f"| {step} | {provider} |")), None)
            assert row is not None, (step, provider, text)
            tokens_per_s = float(row.split("|")[3])
            assert tokens_per_s > 0
    assert "| train | eager |" in text and "1.00x" in text  # ratios against eager
    assert "rms_norm" in text and "fused_linear_cross_entropy" in text  # what the patched provider replaced


def test_an_unknown_model_says_why():
    result = CliRunner().invoke(app, ["bench", "--model", "nosuch"])
    assert result.exit_code == 2 and "no config 'nosuch'" in result.output
