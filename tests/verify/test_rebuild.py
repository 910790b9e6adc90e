"""``tileport report RUN`` renders a finished verify run's report again from its journal and results.json: the
same report.md, results.csv and results.json (but for the time it took), in another folder; a folder that holds
no run is refused, naming what it lacks."""

import json
from pathlib import Path

from typer.testing import CliRunner

from tileport.cli import app

runner = CliRunner()


def _doc(path):
    doc = json.loads(path.read_text())
    doc.pop("seconds")
    return doc


def test_a_run_renders_again_the_same(tmp_path):
    run, again = tmp_path / "run", tmp_path / "again"
    args = ["verify", "rms_norm", "--level", "quick", "--dtype", "fp32", "--backend", "tilelang", "--out", str(run)]
    made = runner.invoke(app, args)
    assert made.exit_code == 0, made.output
    done = runner.invoke(app, ["report", str(run), "--out", str(again)])
    assert done.exit_code == 0, done.output
    assert "PASS" in done.output and str(again / "report.html") in done.output
    for name in ("report.md", "results.csv"):
        assert (again / name).read_text() == (run / name).read_text(), name
    assert _doc(again / "results.json") == _doc(run / "results.json")
    assert (again / "ratios.png").stat().st_size > 0


def test_a_folder_without_a_run_is_refused(tmp_path):
    done = runner.invoke(app, ["report", str(tmp_path)])
    assert done.exit_code == 2
    assert "holds no results.json" in done.output
    (tmp_path / "results.json").write_text("{}")
    done = runner.invoke(app, ["report", str(tmp_path)])
    assert done.exit_code == 2 and "holds no journal" in done.output


def test_a_failed_run_renders_as_failed(tmp_path):
    run, again = tmp_path / "run", tmp_path / "again"
    impl = str(Path(__file__).parents[2] / "examples" / "impl" / "my_norms.py") + ":rms_norm_autograd"
    args = ["verify", "rms_norm", "--level", "quick", "--dtype", "fp32", "--impl", impl, "--no-perf", "--out", str(run)]
    assert runner.invoke(app, args).exit_code == 1  # its dx fails the large value range
    done = runner.invoke(app, ["report", str(run), "--out", str(again)])
    assert done.exit_code == 1 and done.output.startswith("FAIL")
    for name in ("report.md", "checks.md"):  # every check's table too, written apart
        assert (again / name).read_text() == (run / name).read_text()
