"""The performance and memory tasks of verify: forward and forward+backward latency against torch eager and
torch.compile over a few sizes, and peak allocated bytes, through the benchmark layer."""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from ..backends.registry import REGISTRY
from ..bench.run import Group, plan, run
from ..ops.catalog import get as op_spec

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
    backends: list[str],
    budget_s: float = 0.2,
    progress: Callable[[str], None] | None = None,
    device: str = "cpu",
    impls: tuple = (),
    failed: dict | None = None,
) -> list[dict]:
    """The timings of verify's report: tileport's backends (an ``impl:`` provider is passed in ``impls``, as
    ``external.Impl``, and timed under its name). ``failed``: filled with {provider: why} for an
    implementation whose call raised, which is then not timed. A scaffold stub (its kernels, or the spec's
    composite, the baseline) is not timed either: it goes into ``failed`` as not implemented."""
    failed = {} if failed is None else failed
    tested = [b for b in backends if b != "torch" and not b.startswith("impl:")]
    for b in tested:
        note = REGISTRY.stub(b, op_spec(op).kernel_op)  # a composed operator: the kernels it runs on
        if note:
            failed[b] = f"not implemented: {note}"
    tested = [b for b in tested if b not in failed]
    try:
        return run(
            op, groups, backends=tested, budget_s=budget_s, progress=progress, device=device, impls=impls, failed=failed
        )
    except NotImplementedError as exc:  # a stub without the marker, such as the composite: nothing to time against
        failed[op] = f"not implemented: {exc}"
        return []
