"""The competitor chip as the benchmark, on the CPU: a run on "the GPU" (its own process, the original as
``--impl``) serves as the benchmark of a run of the port (``--benchmark-run``); a digest that differs stops the
run naming the case; checks that fail their first seed await the competitor's retest until a ``--retest-for``
run brings the new seeds; ``compare`` puts the two runs side by side; bad runs are refused by name."""

import csv
import pickle
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from tileport.cli import app
from tileport.verify import journal
from tileport.verify.competitor import Side

runner = CliRunner()
pytestmark = pytest.mark.xdist_group("competitor")  # one competitor run for the module
DESIGN = Path(__file__).resolve().parents[2] / "examples" / "atk" / "gelu_approximate.yaml"
PORTS = """
import torch

def original(input, approximate="none"):  # the competitor's kernel: fp32 math, rounded once
    x = input.float()
    if approximate == "tanh":
        return (0.5 * x * (1 + torch.tanh(0.7978845608028654 * (x + 0.044715 * x ** 3)))).to(input.dtype)
    return (0.5 * x * (1 + torch.erf(x * 0.7071067811865476))).to(input.dtype)

def port(input, approximate="none"):  # a faithful port
    return original(input, approximate)

def port_in_dtype(input, approximate="none"):  # the formula in the input's own dtype: worse in bf16
    x = input
    if approximate == "tanh":
        return 0.5 * x * (1 + torch.tanh(0.7978845608028654 * (x + 0.044715 * x ** 3)))
    return 0.5 * x * (1 + torch.erf(x * 0.7071067811865476))
"""
COMMON = ["--cases", str(DESIGN), "--level", "quick", "--dtype", "bf16"]


def _verify(*args):
    result = runner.invoke(app, ["verify", *map(str, args)])
    return result, " ".join(result.output.replace("│", " ").split())


@pytest.fixture(scope="module")
def gpu_run(tmp_path_factory):
    """The competitor's run, in a process of its own (as on another machine): the original as --impl."""
    root = tmp_path_factory.mktemp("competitor")
    (root / "ports.py").write_text(textwrap.dedent(PORTS))
    out = root / "gpu-run"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "tileport.cli",
            "verify",
            *COMMON,
            "--impl",
            f"{root / 'ports.py'}:original",
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return root, out


def test_a_faithful_port_passes_against_the_competitors_run_in_another_process(gpu_run):
    root, gpu = gpu_run
    npu = root / "npu-run"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "tileport.cli",
            "verify",
            *COMMON,
            "--impl",
            f"{root / 'ports.py'}:port",
            "--benchmark-run",
            str(gpu),
            "--out",
            str(npu),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    md = (npu / "report.md").read_text()
    assert f"original of run {gpu}" in md and "worst ratio against the benchmark" in md
    assert all(
        r["mare_ratio"] == "1.0" for r in csv.DictReader(open(npu / "results.csv"))
    )  # the same bits as the benchmark
    result = runner.invoke(app, ["compare", str(gpu), str(npu), "--out", str(root / "cmp")])
    assert result.exit_code == 0, result.output[-2000:]
    assert {p.name for p in (root / "cmp").iterdir()} == {"compare.md", "compare.html", "compare.png"}
    assert "Cases where the verdicts disagree" in (root / "cmp" / "compare.md").read_text()


def test_a_worse_port_awaits_the_competitors_retest_then_is_judged(gpu_run):
    root, gpu = gpu_run
    first, text = _verify(
        *COMMON, "--impl", f"{root / 'ports.py'}:port_in_dtype", "--benchmark-run", gpu, "--out", root / "worse"
    )
    assert first.exit_code == 1 and "checks await the competitor's retest" in text
    waiting = [
        r
        for r in csv.DictReader(open(root / "worse" / "results.csv"))
        if "awaiting the competitor's retest" in r["failures"]
    ]
    assert waiting and all(r["passed"] == "False" for r in waiting)
    more, text = _verify("--retest-for", root / "worse", "--out", root / "more")
    assert more.exit_code == 0, text[-2000:]
    seeds = sum(len(o.retests) for o in journal.read(root / "more").values())
    assert seeds == 30 * len(waiting)  # quick's 30 new seeds per check, run with the benchmark's provider
    again, text = _verify(
        *COMMON,
        "--impl",
        f"{root / 'ports.py'}:port_in_dtype",
        "--benchmark-run",
        gpu,
        "--benchmark-run",
        root / "more",
        "--out",
        root / "worse2",
    )
    rows = list(csv.DictReader(open(root / "worse2" / "results.csv")))
    assert not any("awaiting" in r["failures"] for r in rows) and any(
        "retest over 30 seeds failed" in r["failures"] for r in rows
    )
    assert again.exit_code == 1  # the port really is worse: its retests fail against the competitor's seeds
    result = runner.invoke(app, ["compare", str(gpu), str(root / "worse2"), "--out", str(root / "cmp2")])
    md = (root / "cmp2" / "compare.md").read_text()
    assert result.exit_code == 0 and "| pass |" in md and "| FAIL |" in md  # the disagreeing cases are listed


def test_a_tampered_digest_stops_the_run_naming_the_case(gpu_run, tmp_path):
    _, gpu = gpu_run
    tampered = tmp_path / "tampered"
    tampered.mkdir()
    (tampered / journal.REQUEST).write_text((gpu / journal.REQUEST).read_text())
    outcomes = journal.read(gpu)
    victim = sorted(outcomes)[5]
    outcomes[victim].digest = "0" * 32  # as another torch's draw would give
    writer = journal.Writer(tampered)
    for o in outcomes.values():
        writer.append(o)
    writer.close()
    result, text = _verify(
        *COMMON,
        "--backend",
        "function",
        "--benchmark-run",
        f"{tampered}:impl:{gpu.parent / 'ports.py'}:original",
        "--out",
        tmp_path / "out",
    )
    assert result.exit_code == 2 and f"case #{victim} " in text and "differ from those of benchmark run" in text


def test_bad_benchmark_runs_are_refused_by_name(gpu_run, tmp_path):
    root, gpu = gpu_run
    other_level, text = _verify(
        "--cases", DESIGN, "--level", "L0", "--dtype", "bf16", "--benchmark-run", gpu, "--out", tmp_path / "a"
    )
    assert other_level.exit_code == 2 and "at quick; this is torch.nn.functional.gelu at L0" in text
    no_provider, text = _verify(*COMMON, "--benchmark-run", f"{gpu}:tilelang", "--out", tmp_path / "b")
    assert no_provider.exit_code == 2 and "has no provider 'tilelang'" in text
    not_a_run, text = _verify(*COMMON, "--benchmark-run", tmp_path, "--out", tmp_path / "c")
    assert not_a_run.exit_code == 2 and "holds no verify run" in text
    nothing_to_retest, text = _verify("--retest-for", gpu, "--out", tmp_path / "d")
    assert nothing_to_retest.exit_code == 2 and "not judged against a benchmark run" in text


def test_a_run_with_several_providers_needs_one_named(gpu_run, tmp_path):
    root, _ = gpu_run
    two = tmp_path / "two"
    result, _ = _verify(
        *COMMON, "--impl", f"{root / 'ports.py'}:original", "--impl", f"{root / 'ports.py'}:port", "--out", two
    )
    assert result.exit_code == 0
    result, text = _verify(*COMMON, "--backend", "function", "--benchmark-run", two, "--out", tmp_path / "x")
    assert (
        result.exit_code == 2
        and "name the one to use" in text
        and "ports.py:original" in text
        and "ports.py:port" in text
    )
    result, text = _verify(
        *COMMON,
        "--impl",
        f"{root / 'ports.py'}:port",
        "--benchmark-run",
        f"{two}:impl:{root / 'ports.py'}:original",
        "--out",
        tmp_path / "y",
    )
    assert result.exit_code == 0, text[-2000:]


def test_compare_refuses_runs_with_no_cases_in_common(gpu_run, tmp_path):
    _, gpu = gpu_run
    other, _ = _verify(
        "--api", "torch.nn.functional.silu", "--level", "quick", "--dtype", "bf16", "--out", tmp_path / "silu"
    )
    assert other.exit_code == 0
    result = runner.invoke(app, ["compare", str(gpu), str(tmp_path / "silu"), "--out", str(tmp_path / "c")])
    assert result.exit_code == 2 and "no cases in common" in " ".join(result.output.replace("│", " ").split())


def test_a_side_keeps_metrics_and_inf_nan_positions_not_the_output():
    out = torch.randn(64, 1024, dtype=torch.float64).to(torch.bfloat16)
    out[3, 7], out[10, 0], out[63, 1023] = float("nan"), float("inf"), float("-inf")
    gold = out.double()
    side = Side.of(out, gold, torch.bfloat16)
    stand_in = side.stand_in()
    assert torch.isnan(stand_in[3, 7]) and stand_in[10, 0] == float("inf") and stand_in[63, 1023] == float("-inf")
    assert int(torch.isfinite(stand_in).sum()) == out.numel() - 3 and side.metrics.mare == 0.0
    assert len(pickle.dumps(side)) < 1000 < out.numel() * 2  # about a hundred bytes, not the 128 KiB output
