"""The journal: a run killed mid-way resumes to the report an uninterrupted run gives, no case lost or doubled."""

import json
import os
import re
import signal
import subprocess
import sys
import time

import torch
from typer.testing import CliRunner

from tileport.cases import generate, load_suite
from tileport.cli import app
from tileport.verify import journal
from tileport.verify.accuracy import Task, merge
from tileport.verify.pool import run_task

ARGS = ["verify", "l2norm", "--level", "quick", "--dtype", "fp32", "--backend", "tilelang", "--no-perf", "--jobs", "1"]


def test_records_round_trip_a_torn_tail_is_dropped_and_a_writer_continues_after_it(tmp_path):
    suite = load_suite("l2norm")
    task, cases = Task(suite, ("tilelang",), "L0", 2, 5, min_seeds=0), generate(suite, "quick", seed=1)[:12]
    writer = journal.Writer(tmp_path)
    outcomes = run_task(task, cases[:8], 1, on_outcome=writer.append)
    writer.close()
    with open(tmp_path / journal.RECORDS, "ab") as f:  # a record cut short by a kill
        f.write(b"\x40\x00\x00\x00partial")
    assert sorted(journal.read(tmp_path)) == [c.index for c in cases[:8]]
    writer = journal.Writer(tmp_path)
    outcomes += run_task(task, cases[6:], 1, on_outcome=writer.append)  # two cases again: a retried batch
    writer.close()
    back = journal.read(tmp_path)
    assert sorted(back) == [c.index for c in cases]  # none lost, none twice
    assert merge(list(back.values())) == merge(outcomes[:8] + outcomes[10:])


def test_resume_without_a_run_says_so(tmp_path):
    result = CliRunner().invoke(app, ["verify", "--resume", str(tmp_path)], terminal_width=400)
    assert result.exit_code == 2 and "holds no verify run to resume" in " ".join(
        re.sub(r"[│╭╮╰╯─]", " ", result.output).split()
    )


def _verdicts(folder):
    doc = json.loads((folder / "results.json").read_text())
    return doc["results"], doc["aggregates"]


def _wait_for_records(folder, n: int, timeout: float = 180.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if len(journal.read(folder)) >= n:
            return
        time.sleep(0.05)
    raise AssertionError(f"no {n} journal records in {folder} after {timeout} s")


def test_a_run_killed_mid_way_resumes_to_the_uninterrupted_report(tmp_path):
    whole, cut = tmp_path / "whole", tmp_path / "cut"
    assert CliRunner().invoke(app, ARGS + ["--out", str(whole)]).exit_code == 0
    proc = subprocess.Popen(
        [sys.executable, "-m", "tileport.cli", *ARGS, "--out", str(cut)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    _wait_for_records(cut, 1)  # at the first record: the rest of the run is still ahead (a few seconds)
    os.killpg(proc.pid, signal.SIGKILL)  # mid-run, as a lost machine would
    proc.wait()
    total = len(generate(load_suite("l2norm"), "quick", [torch.float32]))
    assert 1 <= len(journal.read(cut)) < total, "the kill should land mid-run"
    resumed = CliRunner().invoke(app, ["verify", "--resume", str(cut)])
    assert resumed.exit_code == 0, resumed.output
    assert _verdicts(cut) == _verdicts(whole)
