"""What `tileport` prints: the verdict first (then failures, retests, what did not run, a short summary), the
full tables only with --verbose, brackets printed as typed, and option types that read in --help."""

import pytest
from typer.testing import CliRunner

import tileport
from tileport import cli
from tileport.cli import app
from tileport.verify import estimate

runner = CliRunner()
QUICK = ["verify", "l2norm", "--level", "quick", "--dtype", "fp32", "--backend", "tilelang", "--no-perf", "--jobs", "1"]


def _after_progress(output: str) -> list[str]:
    """The lines after the progress display (its last line says ``done``)."""
    lines = output.splitlines()
    done = max(i for i, line in enumerate(lines) if "] done " in line)
    return lines[done + 1 :]


def test_verify_leads_with_the_verdict_and_keeps_tables_for_verbose(tmp_path):
    result = runner.invoke(app, QUICK + ["--verbose", "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    first = result.output.splitlines()[0]
    assert first.startswith("l2norm at quick: ") and "cases on tilelang" in first  # what runs, before it runs
    assert "rough estimate: about " in result.output.splitlines()[1]
    verdict, report = _after_progress(result.output)[:2]
    assert verdict.startswith("PASS: all ") and "checks passed at quick (L0 ratio limits)" in verdict
    assert report.startswith(f"report: {tmp_path / 'report.html'}")
    assert "Every check (ratios against the benchmark)" in result.output  # --verbose: the report's tables
    assert "Install them with pip install tileport[peers]." in " ".join(result.output.split())  # not eaten as markup


def test_verify_failure_lists_the_first_failures_then_a_summary(tmp_path):
    impl = tmp_path / "l1.py"
    impl.write_text("def l2norm(x, eps=1e-6):\n    return x / x.abs().sum(-1, keepdim=True)\n")
    out = tmp_path / "rep"
    result = runner.invoke(app, QUICK + ["--impl", f"{impl}:l2norm", "--retest-seeds", "3", "--out", str(out)])
    assert result.exit_code == 1, result.output
    lines = _after_progress(result.output)
    assert lines[0].startswith("FAIL: ") and "checks failed at quick (L0 ratio limits)" in lines[0]
    assert lines[1].startswith(f"report: {out / 'report.html'}")
    assert lines[2].startswith("Failed checks (the first 10 of ")
    text = "\n".join(lines)
    listed = text[text.index("Failed checks") : text.index("Retests: ")]  # long lines wrap: counted, not split
    assert listed.count(f"  impl:{impl}:l2norm float32 ") == 10 and listed.count("ratio") >= 10
    assert " ".join(listed.split()).endswith(f"more in {out / 'report.html'} and {out / 'results.csv'}")
    assert "Retests: " in text and "retested over at most 3 new seeds each" in " ".join(text.split())
    assert f"impl:{impl}:l2norm rstd: " in text and "not returned by the function" in text  # what it does not give
    assert "Checks per backend and dtype" in text and "FAIL" in text
    assert (
        "Every check (ratios" not in result.output and "MERE ratio ┃" not in result.output
    )  # the long tables stay in the report


def test_backends_prints_the_extras_in_brackets(monkeypatch):
    """A reason naming an extra (``pip install tileport[triton]``) lost its brackets to rich markup."""
    reason = "triton is not installed (pip install tileport[triton], or tileport[ascend] for A2/A3)"
    fake = tileport.available_backends()[:1] + [tileport.backends.registry.BackendInfo("triton", False, reason, (), ())]
    monkeypatch.setattr(tileport, "available_backends", lambda: fake)
    monkeypatch.setattr(cli.console, "width", 400)  # one line per row: the reason is not wrapped in its cell
    result = runner.invoke(app, ["backends"])
    assert result.exit_code == 0, result.output
    assert "tileport[triton], or tileport[ascend] for A2/A3" in result.output


@pytest.mark.parametrize("columns", ["80", "120"])
@pytest.mark.parametrize("command", ["verify", "bench", "cases"])
def test_help_names_option_values_not_python_types(command, columns):
    result = CliRunner(env={"COLUMNS": columns}).invoke(app, [command, "--help"])
    assert result.exit_code == 0
    assert "list[" not in result.output and "<int range>" not in result.output
    assert "--dtype DTYPE" in " ".join(result.output.split())
    assert max(len(line) for line in result.output.splitlines()) <= int(columns)


def test_the_estimate_grows_with_cases_runs_and_timing_groups():
    from types import SimpleNamespace

    from tileport.cases import generate, load_suite

    suite = load_suite("l2norm")

    def plan(level, names=("tilelang",), interpreted=()):
        return SimpleNamespace(
            suite=suite,
            level=level,
            cases=generate(suite, level, None, 0),
            names=list(names),
            interpreted=set(interpreted),
        )

    quick, l0 = estimate.estimate_s(plan("quick"), 0, 2), estimate.estimate_s(plan("L0"), 0, 2)
    assert 0 < quick < l0
    assert estimate.estimate_s(plan("quick"), 24, 2) == pytest.approx(quick + 24 * estimate.GROUP_S)
    assert estimate.estimate_s(plan("quick"), 0, 1) == pytest.approx(2 * quick)
    assert estimate.estimate_s(plan("quick", ("tilelang", "triton"), {"triton"}), 0, 2) > quick
    assert [estimate.duration(s) for s in (42, 600, 4 * 3600)] == ["42 s", "10 min", "4.0 h"]
