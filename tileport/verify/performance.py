"""The performance and memory tasks of verify: forward and forward+backward latency against torch eager and
torch.compile over a few sizes, and peak allocated bytes, through the benchmark layer."""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from ..bench.run import Group, plan, run
from ..ops.catalog import get as op_spec
from ..providers import Provider

SIZES = [(33, 100), (1024, 512), (256, 4096), (2048, 4096)]


def performance_groups(op: str, dtypes: list[torch.dtype]) -> list[Group]:
    """fwd and fwdbwd at a few sizes: the row-wise (M, D) ones, or an operator by named dimensions' four smallest
    bench shapes (its sweep's)."""
    spec = op_spec(op)
    sizes = sorted(spec.sweep, key=math.prod)[:4] if spec.general else SIZES
    return plan(op, ["fwd", "fwdbwd"], dtypes, sizes, [torch.get_num_threads()])


def performance(
    op: str,
    groups: list[Group],
    tested: list[Provider],
    budget_s: float = 0.2,
    progress: Callable[[str], None] | None = None,
    device: str = "cpu",
    failed: dict | None = None,
) -> list[dict]:
    """The timings of verify's report: the providers under test, each timed unless it says why not (a scaffold
    stub: not implemented). ``failed``: filled with {provider: why} for one that is not timed, or whose first
    call raised (an implementation's own error)."""
    failed = {} if failed is None else failed
    spec = op_spec(op)
    tested = [p for p in tested if p.name != "torch"]  # the torch reference: the baselines' own kernels (eager)
    for p in tested:
        why = p.untimed(spec)
        if why:
            failed[p.name] = why
    timed = [p for p in tested if p.name not in failed]
    try:
        return run(op, groups, timed, budget_s=budget_s, progress=progress, device=device, failed=failed)
    except NotImplementedError as exc:  # a stub without the marker, such as the composite: nothing to time against
        failed[op] = f"not implemented: {exc}"
        return []
