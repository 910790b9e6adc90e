"""`tileport bench`: rows in the one CSV schema, the markdown table and the PNGs, and argument errors."""

from pathlib import Path

from typer.testing import CliRunner

from tileport.bench import csvfile
from tileport.cli import app

runner = CliRunner()


def test_bench_appends_csv_and_draws(tmp_path):
    csv, out = tmp_path / "bench.csv", tmp_path / "out"
    args = [
        "bench",
        "l2norm",
        "--shape",
        "33x100",
        "--dtype",
        "fp32",
        "--threads",
        "1",
        "--mode",
        "fwd",
        "--mode",
        "bwd",
        "--no-compile",
        "--budget",
        "0.05",
        "--csv",
        str(csv),
        "--out",
        str(out),
    ]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    rows = csvfile.read(csv)
    assert {r["provider"] for r in rows} >= {"tilelang", "tilelang:kernel", "torch-eager", "copy"}
    assert {r["mode"] for r in rows} == {"fwd", "bwd"} and {r["statistic"] for r in rows} <= set(csvfile.STATISTICS)
    assert all(r["value"] > 0 for r in rows if r["statistic"] == "min_us")
    eager = [r for r in rows if r["provider"] == "torch-eager" and r["statistic"] == "speedup_vs_eager"]
    assert eager and all(r["value"] == 1.0 for r in eager)
    assert "| fwd | float32 | 33x100 | 1 | tilelang |" in (out / "l2norm.md").read_text()  # fp32 in, one spelling out
    assert (out / "l2norm_fwd_latency_t1.png").stat().st_size > 0
    assert (out / "l2norm_bwd_bandwidth_share_t1.png").stat().st_size > 0
    again = runner.invoke(app, ["bench", "l2norm", "--plot", "--csv", str(csv), "--out", str(tmp_path / "replot")])
    assert again.exit_code == 0, again.output
    assert (tmp_path / "replot" / "l2norm_fwd_gbps_t1.png").exists()
    assert len(csvfile.read(csv)) == len(rows)  # --plot times nothing


def test_bench_argument_errors(tmp_path):
    cases = [
        (["bench", "no_such_op"], "unknown operator 'no_such_op'; available: "),  # then every operator
        (["bench", "l2norm", "--dtype", "int8"], "unknown dtype 'int8'"),
        (["bench", "l2norm", "--mode", "sideways"], "unknown mode 'sideways'"),
        (["bench", "l2norm", "--workload", "gpt-9"], "unknown workload 'gpt-9'"),
        (["bench", "l2norm", "--shape", "10by10"], "shape '10by10' is not like 1024x512"),
        (["bench", "l2norm", "--plot", "--csv", str(tmp_path / "none.csv")], "holds no l2norm rows"),
    ]
    for args, message in cases:
        result = runner.invoke(app, args)
        text = " ".join(result.output.replace("│", " ").split())  # rich wraps long messages in a box
        assert result.exit_code == 2 and message in text, (args, result.output)


def test_bench_rms_norm_times_torch_fused_op_and_judges_its_bar(tmp_path):
    csv, out = tmp_path / "bench.csv", tmp_path / "out"
    args = [
        "bench",
        "rms_norm",
        "--shape",
        "1024x512",
        "--dtype",
        "bfloat16",
        "--threads",
        "1",
        "--mode",
        "fwd",
        "--mode",
        "fwdbwd",
        "--no-compile",
        "--budget",
        "0.05",
        "--csv",
        str(csv),
        "--out",
        str(out),
    ]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    rows = csvfile.read(csv)
    assert {r["provider"] for r in rows} >= {"tilelang", "tilelang:kernel", "torch-rms_norm", "torch-eager", "copy"}
    assert {r["dtype"] for r in rows} == {"bfloat16"}
    text = (out / "rms_norm.md").read_text()
    assert "## The speed bar" in text and "fwd in cache vs eager" in text and "fwdbwd vs eager autograd" in text


def test_bench_out_writes_only_there(tmp_path, monkeypatch):
    """``--out DIR`` without ``--csv``: the rows go to DIR/bench.csv, never to the tracked benchmarks/results
    (relative to the working folder, here an empty one)."""
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "run"
    args = [
        "bench",
        "l2norm",
        "--shape",
        "33x100",
        "--dtype",
        "fp32",
        "--threads",
        "1",
        "--mode",
        "fwd",
        "--no-compile",
        "--budget",
        "0.05",
        "--out",
        str(out),
    ]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert csvfile.read(out / "bench.csv") and (out / "l2norm.md").exists()
    assert not (tmp_path / "benchmarks").exists()


TINY = ["--shape", "4x8", "--mode", "fwd", "--threads", "1", "--no-compile", "--budget", "0.01"]


def test_bench_without_out_writes_into_an_ignored_folder(tmp_path, monkeypatch):
    """No --out: ./tileport-bench (ignored by git), never the project's tracked benchmarks/results."""
    monkeypatch.chdir(tmp_path)
    result = runner.invoke(app, ["bench", "l2norm", "--dtype", "fp32", *TINY])
    assert result.exit_code == 0, result.output
    assert (
        csvfile.read(tmp_path / "tileport-bench" / "bench.csv") and (tmp_path / "tileport-bench" / "l2norm.md").exists()
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tileport-bench"]
    ignored = (Path(__file__).resolve().parents[1] / ".gitignore").read_text().splitlines()
    assert "tileport-bench/" in ignored


def test_bench_dtype_no_backend_takes_is_a_usage_error_naming_who_does(tmp_path):
    result = runner.invoke(app, ["bench", "rms_norm", "--dtype", "float64", *TINY, "--out", str(tmp_path)])
    text = " ".join(result.output.replace("│", " ").split())
    assert result.exit_code == 2, result.output
    assert "nothing to time at float64" in text and "backends that take it: torch (--backend torch)" in text
    assert "Traceback" not in result.output and not (tmp_path / "bench.csv").exists()


def test_bench_times_each_dtype_on_the_backends_that_take_it(tmp_path):
    args = ["bench", "rms_norm", "--dtype", "float64", "--dtype", "fp32", "--backend", "tilelang", "--backend", "torch"]
    result = runner.invoke(app, args + TINY + ["--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert "not timing tilelang at float64" in result.output
    rows = csvfile.read(tmp_path / "bench.csv")
    by = {d: {r["provider"] for r in rows if r["dtype"] == d} for d in ("float64", "float32")}
    assert "torch" in by["float64"] and "tilelang" not in by["float64"] and {"tilelang", "torch"} <= by["float32"]


def test_bench_names_a_backend_that_cannot_run(tmp_path):
    result = runner.invoke(app, ["bench", "l2norm", "--backend", "cuda-magic", *TINY, "--out", str(tmp_path)])
    assert result.exit_code == 2 and "unknown backend 'cuda-magic'" in result.output, result.output
