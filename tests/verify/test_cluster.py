"""verify on Ray: sharded runs match the in-process run, a killed run resumes, failing cases are reported."""

import dataclasses
import json
import os
import re
import signal
import subprocess
import sys
import time

import pytest
import torch
from typer.testing import CliRunner

from tileport.cases import generate, load_suite
from tileport.cli import _ray_flag, app
from tileport.verify import accuracy, cluster, journal, prepare, run
from tileport.verify.accuracy import Task, merge

# one local Ray instance at a time: these tests share an xdist worker (pytest -n 2 --dist loadgroup)
pytestmark = pytest.mark.xdist_group("ray")

ARGS = ["verify", "l2norm", "--level", "quick", "--dtype", "bf16", "--backend", "tilelang", "--no-perf"]


def _plain(text: str) -> str:
    return " ".join(re.sub(r"[│╭╮╰╯─]", " ", text).split())


def test_ray_flag_takes_an_optional_address():
    assert _ray_flag(["verify", "l2norm", "--ray"]) == ["verify", "l2norm", "--ray", "local"]
    assert _ray_flag(["verify", "--ray", "l2norm"]) == ["verify", "--ray", "local", "l2norm"]
    assert _ray_flag(["verify", "--ray", "--level", "L2"]) == ["verify", "--ray", "local", "--level", "L2"]
    for address in ("auto", "10.0.0.7:6379", "ray://head:10001"):
        assert _ray_flag(["verify", "l2norm", "--ray", address]) == ["verify", "l2norm", "--ray", address]


def test_without_ray_installed_the_message_says_how_to_get_it(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray now raises ImportError
    with pytest.raises(cluster.RayUnavailable, match=re.escape("pip install 'tileport[ray]'")):
        cluster.connect()
    result = CliRunner().invoke(app, ARGS + ["--ray", "local", "--out", str(tmp_path)], terminal_width=400)
    assert result.exit_code == 2 and "--ray needs Ray, an optional extra" in _plain(result.output)


def test_a_case_that_raises_is_reported_as_not_run_and_the_others_still_run(monkeypatch):
    plan = prepare("l2norm", "quick", ["tilelang"], [torch.float32])
    plan = dataclasses.replace(plan, cases=plan.cases[:4])
    bad = plan.cases[1].index
    real = accuracy.run_case

    def flaky(task, j, case, *args):
        if case.index == bad:
            raise RuntimeError("kernel exploded")
        return real(task, j, case, *args)

    monkeypatch.setattr(accuracy, "run_case", flaky)
    rep = run(plan, with_perf=False)
    failed = {(r.case, r.output) for r in rep.failures}
    assert failed == {(bad, "run")}
    assert rep.failures[0].failures == ["did not run: raised RuntimeError: kernel exploded"]
    assert {r.case for r in rep.results if r.passed} == {c.index for c in plan.cases} - {bad}
    assert not rep.passed


ray = pytest.importorskip("ray", reason="Ray is an optional extra (tileport[ray])")


@pytest.fixture(scope="module")
def local_cluster():
    assert not ray.is_initialized(), "a test left Ray running"
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    yield
    ray.shutdown()


def _dies_on(index: int):
    """A batch body that kills its worker process whenever its batch holds case ``index`` (a segfault in a
    kernel, the OOM killer): Ray retries the task, then the batch is split and the case reported."""

    def body(task, cases):
        if any(c.index == index for c in cases):
            os._exit(1)
        return cluster.run_batch(task, cases)

    return body


def test_sharded_quick_run_matches_the_in_process_run(local_cluster):
    plan = prepare("l2norm", "quick", ["tilelang"], [torch.bfloat16])
    sharded = run(plan, with_perf=False, ray_address="local")
    alone = run(plan, with_perf=False)
    assert [r.row() for r in sharded.results] == [r.row() for r in alone.results]
    assert sharded.aggregates == alone.aggregates and sharded.pairs == alone.pairs and sharded.passed
    ran = sorted(i for p in sharded.placement for i in p.cases)
    assert ran == sorted(c.index for c in plan.cases), "every case ran in exactly one batch"
    assert all(p.host and p.pid and not p.error for p in sharded.placement)
    assert sharded.environment["executor"].startswith("Ray ") and "2 CPUs" in sharded.environment["executor"]


def test_a_case_whose_worker_keeps_dying_is_isolated_and_reported(local_cluster):
    suite = load_suite("l2norm")
    task = Task(suite, ("tilelang",), "L0", 2, 5, min_seeds=0)
    cases = generate(suite, "quick", [torch.float32], seed=2)[:6]
    bad = cases[2].index
    outcomes, placement = cluster.run_task(task, cases, batch_cases=3, retries=1, body=_dies_on(bad))
    results, _, _ = merge(outcomes)
    assert sorted(o.index for o in outcomes) == sorted(c.index for c in cases), "no case lost, none twice"
    failed = [r for r in results if not r.passed]
    assert [(r.case, r.output) for r in failed] == [(bad, "run")]
    assert failed[0].failures[0].startswith("did not run: ") and "after 2 attempts" in failed[0].failures[0]
    errors = [p for p in placement if p.error]
    assert [p.cases for p in errors] == [tuple(c.index for c in cases[:3]), (bad,)]  # the batch, then the case alone


def _verdicts(folder):
    doc = json.loads((folder / "results.json").read_text())
    return doc["results"], doc["aggregates"]


def test_a_sharded_run_killed_mid_way_resumes_to_the_uninterrupted_report(tmp_path, local_cluster):
    whole, cut = tmp_path / "whole", tmp_path / "cut"
    assert CliRunner().invoke(app, ARGS + ["--jobs", "1", "--out", str(whole)]).exit_code == 0
    proc = subprocess.Popen(
        [sys.executable, "-m", "tileport.cli", *ARGS, "--ray", "--out", str(cut)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    deadline = time.monotonic() + 300
    while len(journal.read(cut)) < 16:
        assert time.monotonic() < deadline and proc.poll() is None, "the sharded run should journal cases"
        time.sleep(0.1)
    os.killpg(proc.pid, signal.SIGKILL)  # the driver and its local Ray instance, as a lost machine would
    proc.wait()
    total = len(generate(load_suite("l2norm"), "quick", [torch.bfloat16]))
    assert 16 <= len(journal.read(cut)) < total, "the kill should land mid-run"
    resumed = CliRunner().invoke(app, ["verify", "--resume", str(cut), "--ray", "local"])
    assert resumed.exit_code == 0, resumed.output
    assert _verdicts(cut) == _verdicts(whole)


def test_an_address_where_nothing_answers_is_one_clear_error_at_once(tmp_path):
    """Ray retries a dead GCS address for minutes (its bar at 0/?, its warnings streaming): tileport checks the
    port first and stops with one line naming the address."""
    t0 = time.monotonic()
    result = CliRunner().invoke(
        app, ["verify", "l2norm", "--level", "quick", "--no-perf", "--ray", "127.0.0.1:1", "--out", str(tmp_path)]
    )
    text = " ".join(result.output.replace("│", " ").split())
    assert (
        result.exit_code == 2
        and "cannot reach the Ray cluster at '127.0.0.1:1': nothing answers at 127.0.0.1:1" in text
    )
    assert time.monotonic() - t0 < 30
    with pytest.raises(cluster.RayUnavailable, match="expected auto, HOST:PORT or ray://HOST:PORT"):
        cluster._reachable("no-port")
