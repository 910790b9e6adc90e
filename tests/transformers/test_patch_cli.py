"""`tileport patch --dry-run CONFIG`: the report of a model built on the meta device, from a family or a file."""

import json
import subprocess
import sys

import pytest

pytest.importorskip("transformers")

from tileport.transformers import zoo


def _cli(*args):
    return subprocess.run(
        [sys.executable, "-m", "tileport.cli", *args],
        check=False,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_dry_run_of_a_config_file_reports_each_operator(tmp_path):
    cfg = zoo.config("gemma2", hidden=128, layers=3)
    (tmp_path / "config.json").write_text(json.dumps(cfg.to_dict()))
    run = _cli("patch", "--dry-run", str(tmp_path))
    assert run.returncode == 0, run.stderr
    for line in (
        "fused_linear_cross_entropy     1 x Gemma2ForCausalLM",
        "rms_norm                      13 x Gemma2RMSNorm (offset=1.0",
        "geglu                          3 x Gemma2MLP (gelu_tanh",
        "rope                           3 x Gemma2Attention",
    ):
        assert line in run.stdout, run.stdout


def test_without_dry_run_or_with_an_unknown_config_it_says_why():
    run = _cli("patch", "llama")
    assert run.returncode == 2 and "add --dry-run" in run.stderr and "Traceback" not in run.stderr
    run = _cli("patch", "--dry-run", "no-such-model")
    assert run.returncode == 2 and "no config 'no-such-model'" in run.stderr and "Traceback" not in run.stderr
