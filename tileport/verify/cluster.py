"""The accuracy task's case batches as Ray tasks (``tileport verify --ray [ADDRESS]``), for runs that outgrow
one machine (the standard's L2: 30,000 cases of 1,000 runs each).

Ray schedules, ships and retries; tileport only cuts the cases into batches and folds what comes back. Each
batch is one Ray task on one CPU, running whole cases with one torch thread as the local pool's workers do,
so a case's outcome does not depend on where it ran. The driver journals each outcome as its batch returns
(``--resume`` works as without Ray: at most the batches in flight are lost). Failures:

- a case that raises is that case's failed checks (``accuracy.run_case_safely``), not a failed task;
- a task lost with its worker or node (a crash, the OOM killer) is rerun by Ray, up to ``RETRIES`` times;
- a batch that still fails is split into single cases, each with its retries, so one bad case cannot take
  its neighbours down; a case that still cannot run is reported as failed (``accuracy.not_run``), never passed.

Every node needs the same tileport (and torch) installed: the tasks import it there.
"""

from __future__ import annotations

import contextlib
import os
import socket
from collections.abc import Callable
from dataclasses import dataclass

import torch

from ..cases import Case
from .accuracy import CaseOutcome, Judge, Task, available_bytes, not_run, run_case_safely
from .pool import cpus, keep_freed_memory

LOCAL = "local"  # --ray without an address: start a Ray instance on this machine
BATCH_CASES = 8  # cases per Ray task: even load, frequent journal records, little per-task overhead
RETRIES = 3  # reruns of a task whose worker or node died
MISSING = "--ray needs Ray, an optional extra: pip install 'tileport[ray]'"


class RayUnavailable(RuntimeError):
    """Ray is not installed, or the cluster cannot be reached."""


@dataclass(frozen=True)
class Placement:
    """Where one batch ran: ``cases`` its case indices; ``host``/``node`` empty and ``error`` set for a batch
    that did not come back (it was then split, or its case reported as not run)."""

    batch: int
    cases: tuple[int, ...]
    host: str = ""
    ip: str = ""
    node: str = ""
    pid: int = 0
    error: str = ""


def _ray():
    try:
        # ray: optional (tileport[ray]), kept out of start-up
        import ray
    except ImportError as exc:
        raise RayUnavailable(MISSING) from exc
    return ray


def connect(address: str | None = None):
    """The ray module, connected: to ``address`` (``auto``, ``HOST:PORT``, ``ray://HOST:PORT``), or to a fresh
    local instance for None / ``local``; an instance already started in this process (``ray.init`` in a
    script or a test) is used as it is."""
    ray = _ray()
    if address not in (None, LOCAL, "auto"):
        _reachable(address)  # Ray itself retries a dead address for minutes, its bar at 0/?; checked even when
        # this process holds an instance already: an address given must answer
    if ray.is_initialized():
        return ray
    try:
        if address in (None, LOCAL):
            ray.init(include_dashboard=False, log_to_driver=False, configure_logging=False)
        else:
            ray.init(address=address, log_to_driver=False, configure_logging=False)
    except (ConnectionError, RuntimeError, ValueError) as exc:
        raise RayUnavailable(f"cannot reach the Ray cluster at {address!r}: {exc}") from exc
    return ray


def _reachable(address: str, timeout: float = 10.0) -> None:
    """RayUnavailable unless something accepts a TCP connection at the address's host and port."""
    hostport = address.removeprefix("ray://")
    host, _, port = hostport.rpartition(":")
    if not host or not port.isdigit():
        raise RayUnavailable(f"--ray {address!r}: expected auto, HOST:PORT or ray://HOST:PORT")
    try:
        socket.create_connection((host, int(port)), timeout=timeout).close()
    except OSError as exc:
        why = exc.strerror or type(exc).__name__
        raise RayUnavailable(
            f"cannot reach the Ray cluster at {address!r}: nothing answers at {host}:{port} ({why}, "
            f"within {timeout:.0f} s); start one (ray start --head) or drop --ray"
        ) from None


@contextlib.contextmanager
def session(address: str | None = None):
    """``connect``, and a local instance this started is shut down on leaving (one already running stays)."""
    started = not _ray().is_initialized()
    ray = connect(address)
    try:
        yield ray
    finally:
        if started:
            ray.shutdown()


def cluster_cpus(ray) -> int:
    return int(ray.cluster_resources().get("CPU", 1))


def describe(ray) -> str:
    """The cluster in a line, for the report's environment."""
    alive = [n for n in ray.nodes() if n.get("Alive")]
    return f"Ray {ray.__version__}: {len(alive)} node(s), {cluster_cpus(ray)} CPUs, one case batch per CPU"


def _where(ray) -> dict:
    return {
        "host": socket.gethostname(),
        "ip": ray.util.get_node_ip_address(),
        "node": ray.get_runtime_context().get_node_id()[:12],
        "pid": os.getpid(),
    }


def run_batch(task: Task, cases: list[Case]) -> tuple[list[CaseOutcome], dict]:
    """A Ray task's body: the batch's outcomes, and where it ran."""
    ray = _ray()
    torch.set_num_threads(1)
    keep_freed_memory()  # a Ray worker is a process of its own, as a pool worker
    free = available_bytes()
    share = None if free is None else free // (2 * cpus())  # as the local pool: a worker per CPU of the node
    j = Judge.for_task(task)
    return [run_case_safely(task, j, c, None, share) for c in cases], _where(ray)


def run_task(
    task: Task,
    cases: list[Case],
    address: str | None = None,
    progress: Callable[..., None] | None = None,
    on_outcome: Callable[[CaseOutcome], None] | None = None,
    batch_cases: int = BATCH_CASES,
    retries: int = RETRIES,
    body: Callable = run_batch,
) -> tuple[list[CaseOutcome], list[Placement]]:
    """Every case's outcome, run as Ray tasks of ``batch_cases`` cases, and where each batch ran. ``progress``
    and ``on_outcome`` as in ``pool.run_task``. ``body``: the task function (``run_batch``)."""
    ray = connect(address)
    remote = ray.remote(num_cpus=1, max_retries=retries)(body)
    task_ref = ray.put(task)  # shipped to each node once, not with every batch
    n_cpus = cluster_cpus(ray)
    nodes = len([n for n in ray.nodes() if n.get("Alive")])
    pending: dict = {}
    next_batch = 0

    def submit(batch: list[Case]) -> None:
        nonlocal next_batch
        pending[remote.remote(task_ref, batch)] = (next_batch, batch)
        next_batch += 1

    for i in range(0, len(cases), batch_cases):
        submit(cases[i : i + batch_cases])
    outcomes: list[CaseOutcome] = []
    placements: list[Placement] = []

    def finish(got: list[CaseOutcome]) -> None:
        outcomes.extend(got)
        for o in got if on_outcome else ():
            on_outcome(o)

    while pending:
        (ref,), _ = ray.wait(list(pending), num_returns=1)
        index, batch = pending.pop(ref)
        ids = tuple(c.index for c in batch)
        try:
            got, where = ray.get(ref)
        except ray.exceptions.RayError as exc:  # the task failed after its retries (a lost worker or node)
            why = f"{type(exc).__name__} after {retries + 1} attempts"
            placements.append(Placement(index, ids, error=why))
            if len(batch) > 1:  # isolate the case that keeps failing: each alone, with its own retries
                for c in batch:
                    submit([c])
            else:
                finish([not_run(task, batch[0], why)])
                if progress:
                    progress(f"{batch[0].describe()} did not run ({why})", advance=1)
            continue
        placements.append(Placement(index, ids, **where))
        finish(got)
        if progress:
            progress(
                (
                    f"{batch[-1].describe()} on {where['host']} ({nodes} nodes, {n_cpus} CPUs, {len(pending)} batches "
                    "queued)"
                ),
                advance=len(batch),
            )
    return outcomes, placements
