"""The accuracy task spread over worker processes gives what one process gives, case for case."""

import pytest

from tileport.cases import generate, load_suite
from tileport.verify.accuracy import Task, merge
from tileport.verify.pool import jobs_for, run_task


def _task():
    suite = load_suite("l2norm")
    return Task(suite, ("tilelang",), "L0", 2, 5, min_seeds=0), generate(suite, "quick", seed=3)


def test_two_workers_match_one_process():
    task, cases = _task()
    cases = cases[:20]
    here, there = merge(run_task(task, cases, 1)), merge(run_task(task, cases, 2))
    assert here[0] == there[0]  # every CaseResult, verdict and metric, in case order
    assert [vars(p) for p in here[1]] == [vars(p) for p in there[1]]
    assert here[2] == there[2]
    assert {r.case for r in there[0]} == {c.index for c in cases}


def test_jobs_must_be_positive():
    task, cases = _task()
    with pytest.raises(ValueError, match="jobs must be at least 1, got 0"):
        run_task(task, cases[:1], 0)


def test_small_runs_and_gpu_runs_stay_in_process():
    assert jobs_for(10, 4) == 1 and jobs_for(5000, 4, "cuda") == 1 and jobs_for(5000, 4) == 4
