"""The accuracy task's cases spread over worker processes on this machine.

Each worker runs whole cases with one torch thread: the cases are independent (each draws its inputs from
its own seed), and at 2 cores most of a case is Python between small kernel calls, which threads do not
share. A case's outcome does not depend on the worker that ran it or on how many there are: every worker
and the in-process path (``jobs=1``) compute with one thread, since torch's benchmark sums a long row in
thread-count-dependent order (measured: a (1, 3e6) fp32 sum differs in its last bits between 1 and 2
threads). The TileLang kernels give the same bits for any thread count by construction.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import multiprocessing
import os
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor, as_completed

import torch

from ..backends.outputs import set_huge_page_outputs
from ..cases import Case
from .accuracy import CaseOutcome, Judge, Task, available_bytes, run_case_safely

BATCH_CASES = 8  # cases per submitted batch: small enough for even load and frequent progress
MIN_POOL_CASES = 100  # below this, starting workers (imports, kernel loads: seconds each) costs more than it saves
_WORKER: dict = {}


def cpus() -> int:
    """CPUs this process may run on (its affinity, not the machine's count)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


@contextlib.contextmanager
def one_thread():
    """torch at one thread inside the block, the previous setting restored after."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def jobs_for(cases: int, wanted: int, device: str = "cpu") -> int:
    """Worker processes for a run of ``cases`` cases: ``wanted``, or 1 for a run too small to pay for them
    or one on a GPU."""
    return 1 if cases < MIN_POOL_CASES or device != "cpu" else wanted


def keep_freed_memory() -> bool:
    """In a worker process: glibc malloc keeps freed blocks for reuse instead of returning them to the system.
    By default a block above its mmap threshold (128 KiB at first) is mapped fresh on every allocation, and
    every page of a new output then faults on first touch, which made the NaN fill of L0's 50 repeated runs per
    case several times slower. False where the C library is not glibc (nothing changed)."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    m_trim_threshold, m_mmap_threshold = -1, -3  # glibc's <malloc.h>
    return bool(mallopt(m_mmap_threshold, 256 << 20)) and bool(mallopt(m_trim_threshold, 1 << 30))


def _start(task: Task, free: int | None) -> None:
    torch.set_num_threads(1)
    if keep_freed_memory():  # freed blocks reused: fresh huge-page mappings would fault where reuse does not
        set_huge_page_outputs(False)
    _WORKER.update(task=task, judge=Judge.for_task(task), free=free)


def _run(cases: list[Case]) -> list[CaseOutcome]:
    return [run_case_safely(_WORKER["task"], _WORKER["judge"], c, None, _WORKER["free"]) for c in cases]


def run_task(
    task: Task,
    cases: list[Case],
    jobs: int = 1,
    progress: Callable[..., None] | None = None,
    on_outcome: Callable[[CaseOutcome], None] | None = None,
) -> list[CaseOutcome]:
    """Every case's outcome (``accuracy.merge`` folds them), run in ``jobs`` worker processes (1: in this
    process). ``on_outcome`` is told of each as it completes (the journal); ``progress(description,
    advance=n)`` after each case (in process) or each batch (workers). Only the CPU is shared out: on a GPU the
    device does the work. Workers are spawned: a script that asks for jobs > 1 needs the
    ``if __name__ == "__main__":`` guard."""
    free = available_bytes()
    if jobs < 1:
        raise ValueError(f"jobs must be at least 1, got {jobs}")
    if jobs == 1 or task.device != "cpu":
        j = Judge.for_task(task)
        outcomes = []
        with one_thread():
            for case in cases:
                if progress:
                    progress(case.describe())
                outcomes.append(run_case_safely(task, j, case, progress, None if free is None else free // 2))
                if on_outcome:
                    on_outcome(outcomes[-1])
        return outcomes
    share = None if free is None else free // (2 * jobs)
    batches = [cases[i : i + BATCH_CASES] for i in range(0, len(cases), BATCH_CASES)]
    outcomes: list[CaseOutcome] = []
    # spawn, not fork: the parent's OpenMP and torch thread pools do not survive a fork
    with ProcessPoolExecutor(
        jobs, multiprocessing.get_context("spawn"), initializer=_start, initargs=(task, share)
    ) as pool:
        futures = {pool.submit(_run, b): b for b in batches}
        for done in as_completed(futures):
            finished = done.result()
            outcomes += finished
            for outcome in finished if on_outcome else ():
                on_outcome(outcome)
            if progress:
                batch = futures[done]
                progress(f"{batch[-1].describe()} ({jobs} workers)", advance=len(batch))
    return outcomes
