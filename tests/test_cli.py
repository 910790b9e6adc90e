import io
import json

import pytest
import torch
from typer.testing import CliRunner

from tileport.cli import app
from tileport.ops.catalog import get as op_spec

runner = CliRunner()


def test_backends_lists_each_backend():
    result = runner.invoke(app, ["backends"])
    assert result.exit_code == 0, result.output
    assert "tilelang" in result.output and "torch" in result.output


def test_verify_quick_writes_the_report(tmp_path):
    out = tmp_path / "rep"
    result = runner.invoke(app, ["verify", "l2norm", "--level", "quick", "--dtype", "bf16", "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "checks passed at quick" in result.output
    for name in ("report.md", "report.html", "results.json", "results.csv", "ratios.png", "latency_fwd.png"):
        assert (out / name).stat().st_size > 0, name
    assert not (out / "memory.png").exists()  # peak memory is the performance table's column, not a plot of slivers
    assert "peak bytes" in (out / "report.md").read_text()
    doc = json.loads((out / "results.json").read_text())
    assert doc["passed"] is True and doc["level"] == "quick"
    judged = {a["backend"] for a in doc["aggregates"]}  # the torch benchmark is not judged against itself
    assert "tilelang" in judged and "torch" not in judged
    assert ("tilelang", "torch") in {(p["a"], p["b"]) for p in doc["cross_backend"]}
    if "triton" in judged:  # the interpreter, when the extra is installed: compared with the others too
        assert ("triton", "tilelang") in {(p["a"], p["b"]) for p in doc["cross_backend"]}
    assert doc["counts"]["met"]["cases"] is False  # a quick run is not the standard's evidence, and says so
    (study,) = doc["studies"]  # l2norm's spec names its rsqrt-refinement study
    assert any(r["steps"] == 2 and r["passes_L0"] for r in study["records"])
    html = (out / "report.html").read_text()
    assert "data:image/png;base64," in html and 'src="http' not in html  # self-contained
    md = (out / "report.md").read_text()
    assert "Cross-backend comparison" in md and "torch (benchmark)" in md


def test_verify_on_forced_torch_backend_without_perf(tmp_path):
    args = ["verify", "l2norm", "--level", "quick", "--dtype", "fp32", "--backend", "torch", "--no-perf"]
    result = runner.invoke(app, args + ["--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    doc = json.loads((tmp_path / "results.json").read_text())
    assert {a["backend"] for a in doc["aggregates"]} == {"torch"} and doc["performance"] == []


def test_verify_rms_norm_quick_checks_dweight_and_runs_no_study(tmp_path):
    args = ["verify", "rms_norm", "--level", "quick", "--dtype", "bfloat16", "--backend", "tilelang", "--no-perf"]
    result = runner.invoke(app, args + ["--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    doc = json.loads((tmp_path / "results.json").read_text())
    outputs = {r["output"] for r in doc["results"]}
    assert outputs == {"y", "rstd", "dx", "dweight"} and doc["studies"] == []
    assert any("weight=None" in r["attrs"] for r in doc["results"])  # some cases leave the optional weight out


def test_verify_rejects_unknown_operator_dtype_level_backend_device():
    result = runner.invoke(app, ["verify", "no_such_op"])
    assert result.exit_code == 2 and "unknown operator 'no_such_op'" in result.output
    result = runner.invoke(app, ["verify", "l2norm", "--level", "quick", "--device", "tpu"])
    assert result.exit_code == 2 and "device must be one of cpu, cuda, npu" in " ".join(
        result.output.replace("│", " ").split()
    )
    if not torch.cuda.is_available():
        result = runner.invoke(app, ["verify", "l2norm", "--level", "quick", "--device", "cuda"])
        assert result.exit_code == 2 and "torch sees no CUDA GPU" in " ".join(result.output.replace("│", " ").split())
    result = runner.invoke(app, ["verify", "l2norm", "--dtype", "int8"])
    assert result.exit_code == 2 and "unknown dtype 'int8'" in result.output
    result = runner.invoke(app, ["verify", "l2norm", "--level", "L9"])
    assert result.exit_code == 2 and "unknown level 'L9'" in result.output
    result = runner.invoke(app, ["verify", "l2norm", "--level", "quick", "--backend", "cuda-magic"])
    assert result.exit_code == 2 and "unknown backend 'cuda-magic'" in result.output


def test_verify_exits_non_zero_on_failure(monkeypatch, tmp_path):
    """A backend whose y is 1% off fails on the first seed and on the retest (both run it), so verify exits 1."""
    import dataclasses

    import tileport.verify.accuracy as accuracy

    real = op_spec("l2norm")

    def wrong_run(inputs, backend, backward):
        out = real.run(inputs, backend, backward)
        return out | {"y": out["y"] * 1.01} if backend == "tilelang" else out

    monkeypatch.setattr(
        accuracy, "spec_of", lambda suite: dataclasses.replace(real, run=wrong_run)
    )  # here, not in workers
    args = [
        "verify",
        "l2norm",
        "--level",
        "quick",
        "--dtype",
        "fp16",
        "--backend",
        "tilelang",
        "--no-perf",
        "--retest-seeds",
        "3",
        "--jobs",
        "1",
    ]
    result = runner.invoke(app, args + ["--out", str(tmp_path)])
    assert result.exit_code == 1 and "checks failed at quick" in result.output
    doc = json.loads((tmp_path / "results.json").read_text())
    failed = [r for r in doc["results"] if not r["passed"]]
    assert failed and {r["output"] for r in failed} == {"y"}  # only the broken output, and each one
    assert all(r["retested"] and "retest over 3 seeds failed" in r["failures"] for r in failed)


def test_cases_writes_the_level_without_running_it(tmp_path):
    out = tmp_path / "c.json"
    result = runner.invoke(app, ["cases", "l2norm", "--level", "L1", "--out", str(out)])
    assert result.exit_code == 0, result.output
    doc = json.loads(out.read_text())
    cov = doc["coverage"]
    assert cov["scale"] >= 10000 and set(cov["dimension_counts"]) == {str(d) for d in range(1, 9)}
    assert {k: round(v / cov["scale"], 1) for k, v in cov["distributions"].items()} == {
        "tiny": 0.1,
        "uniform": 0.3,
        "normal": 0.4,
        "outliers": 0.2,
    }
    assert {
        "empty",
        "lower_border",
        "upper_border",
        "scalar",
        "all_nan",
        "all_inf",
        "all_-inf",
        "all_mixed_inf",
    } <= set(cov["scenarios"])
    normal = next(c for c in doc["cases"] if c["distribution"] == "normal")
    assert -100 <= normal["mu"] <= 100 and 1 <= normal["sigma"] <= 25
    noisy = next(c for c in doc["cases"] if c["distribution"] == "outliers")
    assert all(
        v["outliers"] == max(1, v_n // 1000) for v, v_n in ((v, _n(v["shape"])) for v in noisy["inputs"].values())
    )


def _n(shape):
    n = 1
    for d in shape:
        n *= d
    return n


def test_cases_rejects_an_unknown_level(tmp_path):
    result = runner.invoke(app, ["cases", "l2norm", "--level", "L7", "--out", str(tmp_path / "c.json")])
    assert result.exit_code != 0 and "unknown level 'L7'" in result.output


def test_verify_reads_a_test_kit_case_file(tmp_path):
    out = tmp_path / "rep"
    args = [
        "verify",
        "--cases",
        "examples/atk/l2norm.yaml",
        "--level",
        "quick",
        "--backend",
        "tilelang",
        "--no-perf",
        "--dtype",
        "fp16",
        "--out",
        str(out),
    ]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    doc = json.loads((out / "results.json").read_text())
    assert doc["op"] == "l2norm"
    rejects = [r for r in doc["results"] if r["output"] == "rejects"]
    assert rejects and all(r["passed"] for r in rejects) and rejects[0]["attrs"] == "eps=-1"


def test_verify_names_a_malformed_case_file(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: l2norm\napi: pytorch\nstandard: {acc: double_bm}\ninputs: []\nsurprise: 1\n")
    result = runner.invoke(app, ["verify", "--cases", str(bad), "--level", "quick"])
    assert result.exit_code != 0 and "surprise" in result.output


@pytest.mark.parametrize("command", ["ops", "backends", "doctor", "verify", "cases", "bench", "lower", "scaffold"])
def test_help_shows_brackets_literally_and_one_example(command):
    """Help text is plain (rich markup swallowed ``[ray]`` in ``tileport[ray]``), wrapped by the terminal's
    formatter, and gives one example line."""
    result = CliRunner().invoke(app, [command, "--help"])
    assert result.exit_code == 0
    assert f"Example: tileport {command}" in result.output
    if command == "verify":
        assert "tileport[ray]" in " ".join(result.output.split())


def test_off_a_terminal_progress_is_a_line_every_few_seconds():
    """CI logs printed nothing until the end (a rich bar off a terminal); now a line says what is being done."""
    from rich.console import Console

    from tileport.progress import Lines, progress

    console = Console(file=io.StringIO(), force_terminal=False, width=120)
    assert isinstance(progress(console), Lines)
    with Lines(console, every=0) as bar:
        task = bar.add_task("verify", total=3)
        bar.update(task, description="case 1 of 3: float32", advance=1)
        bar.update(task, description="retest y on tilelang over 30 new seeds", advance=0)
    lines = console.file.getvalue().splitlines()
    assert (
        "at 1 of 3, eta ~" in lines[0]
        and lines[0].endswith(": case 1 of 3: float32")
        and "retest y on tilelang" in lines[1]
    )
    assert "done 1 of 3: " in lines[-1] and "eta" not in lines[-1]


def test_progress_eta_follows_the_rate_so_far():
    from tileport.progress import eta_text

    assert eta_text(10, 5, 10) == ", eta ~10 s"  # 5 steps in 10 s, 5 to go
    assert eta_text(60, 10, 110) == ", eta ~10 min"
    assert eta_text(3, 0, 10) == "" and eta_text(3, 2, None) == "" and eta_text(3, 10, 10) == ""
