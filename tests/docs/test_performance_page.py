"""docs/performance.md is generated from the benchmark CSVs: each operator's latest run, its machine named,
the speed bar judged on it and the key figures; an operator without a run says so."""

import importlib.util
import sys
from pathlib import Path

import pytest

from tileport.bench import csvfile

SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"


@pytest.fixture
def page(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(SCRIPTS))
    spec = importlib.util.spec_from_file_location("performance_page", SCRIPTS / "performance_page.py")
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "performance_page", module)
    spec.loader.exec_module(module)
    monkeypatch.setattr(module, "RESULTS", tmp_path)
    return module


def _rows(run, machine, kernel_us, shape="1024x512", threads=1):
    base = dict(
        operator="l2norm",
        mode="fwd",
        dtype="fp32",
        shape=shape,
        threads=threads,
        statistic="min_us",
        machine=machine,
        versions="torch 2.13.0+cpu",
        run=run,
        workload="",
    )
    us = {"tilelang": 100.0, "tilelang:kernel": kernel_us, "torch-eager": 300.0, "torch-compile": 160.0, "copy": 50.0}
    rows = [base | dict(provider=p, value=v) for p, v in us.items()]
    rows += [base | dict(provider=p, statistic="bandwidth_share", value=50.0 / v) for p, v in us.items()]
    rows += [
        base | dict(provider=p, statistic="speedup_vs_compile", value=160.0 / v)
        for p, v in us.items()
        if p.startswith("tilelang")
    ]
    return rows


def test_the_latest_run_is_shown_with_its_machine_and_bar(page, tmp_path):
    csvfile.append(tmp_path / "l2norm" / "bench.csv", _rows("2026-12-01T00:00:00", "Old CPU", 200.0))
    csvfile.append(tmp_path / "l2norm" / "bench.csv", _rows("2026-12-05T00:00:00", "AMD EPYC (2 cpus)", 62.5))
    text = page.section("l2norm")
    assert "Run 2026-12-05T00:00:00 on AMD EPYC (2 cpus)" in text and "Old CPU" not in text
    assert "| fwd in cache: kernel-only share of copy | 0.7 | 1 of 1 | float32 1024x512 fwd, 1 thread: 0.80 |" in text
    assert "| fwd in cache vs torch.compile | 1.5 | 1 of 1 |" in text  # 160 / 100
    assert "| fwd | float32 | 1024x512 | 100.0 | 62.5 | 300.0 | 160.0 | 50.0 | 0.80 | 1.60 |" in text


def test_key_figures_are_at_the_runs_fewest_threads_and_absent_without_a_key_shape(page, tmp_path):
    csvfile.append(tmp_path / "l2norm" / "bench.csv", _rows("2026-12-05T00:00:00", "AMD EPYC", 62.5, threads=2))
    text = page.section("l2norm")
    assert "Key figures, 2 threads" in text and "Key figures, 1 thread" not in text
    assert "| fwd | float32 | 1024x512 | 100.0 | 62.5 |" in text
    csvfile.append(tmp_path / "l2norm" / "bench.csv", _rows("2026-12-06T00:00:00", "AMD EPYC", 62.5, shape="7x9"))
    assert "Key figures" not in page.section("l2norm")  # no empty table under a heading


def test_an_operator_without_a_run_says_so(page):
    assert "No benchmark CSV yet" in page.section("softmax")
