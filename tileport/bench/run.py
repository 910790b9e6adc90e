"""``tileport bench OP``: providers side by side, interleaved, per (mode, dtype, shape, threads).

Each group times every provider and a copy of the same traffic in the same rounds (the roofline; for a
matmul-bound operator also torch.matmul of its own product sizes), then derives GB/s from the minimum traffic, the
share of the copy's bandwidth (and of the matmul's flop rate), the speed-ups against eager and torch.compile, and
measures each provider's peak allocated bytes once outside the timing (on the CPU also by the process's resident
memory, the one measure that sees torch.compile's allocations).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch

from .. import devices
from ..dtypes import name as dtype_name
from ..ops.catalog import get as op_spec
from ..providers import Backend, Provider
from . import contention
from .environment import machine, versions
from .memory import peak_bytes, resident_peak_bytes
from .providers import providers, tileport_backends
from .roofline import copy_provider, gbps
from .timing import interleave


@dataclass(frozen=True)
class Group:
    mode: str
    dtype: torch.dtype
    shape: tuple[int, ...]
    threads: int
    workload: str = ""


def plan(op: str, modes, dtypes, shapes, threads, workloads: list[str] | None = None) -> list[Group]:
    s = op_spec(op)
    named = [(w, s.workloads[w]) for w in (workloads or [])]
    groups = [("", shape) for shape in shapes] + named
    return [Group(m, d, tuple(shape), t, w) for t in threads for m in modes for d in dtypes for w, shape in groups]


def _budget(shape, budget_s: float) -> float:
    return budget_s if math.prod(shape) < 1 << 22 else 3 * budget_s


def _working(provs: dict, excused: set[str], failed: dict) -> dict:
    """The calls to time: an excused provider's (a user's implementation) whose first call raises goes into
    ``failed`` with its error instead (its call is its warm-up too); the others are not excused: their errors
    propagate from the timing's own warm-up."""
    out = {}
    for name, fn in provs.items():
        if name in failed:
            continue
        if name in excused:
            try:
                fn()
            except Exception as exc:  # the implementation's own error, reported instead of timed
                failed[name] = f"{type(exc).__name__}: {exc}".splitlines()[0][:300]
                continue
        out[name] = fn
    return out


def run(
    op: str,
    groups: list[Group],
    tested: list[Provider] | None = None,
    budget_s: float = 0.4,
    compile_baseline: bool = True,
    progress: Callable[[str], None] | None = None,
    device: str = "cpu",
    busy: int = 0,
    failed: dict | None = None,
) -> list[dict]:
    """Long-format rows (the CSV schema) for every group. On a GPU every call is followed by a
    synchronize, so times are wall times of finished work. ``tested``: the providers under test (by default
    tileport's backends that serve the operator there), timed beside the baselines. ``busy``: competing
    processes spinning while the groups are timed (``contention``), named in the rows' machine field.
    ``failed``: filled with {provider: why} for an excused provider (a user's implementation) whose first call
    raised: it is left out of the timing instead of ending the run."""
    s = op_spec(op)
    kind = devices.kind(device)
    tested = [Backend(b) for b in tileport_backends(op, kind)] if tested is None else tested
    accelerator = devices.module(device)  # torch.cuda or torch.npu: every call is followed by its synchronize
    sync = accelerator.synchronize if accelerator is not None else None
    stamp, mach, vers = time.strftime("%Y-%m-%dT%H:%M:%S"), machine() + contention.label(busy), versions()
    rows: list[dict] = []
    threads_before = torch.get_num_threads()
    with contention.busy(busy):
        try:
            for g in groups:
                if progress:
                    progress(f"{op} {g.mode} {dtype_name(g.dtype)} {'x'.join(map(str, g.shape))} t{g.threads}")
                torch.set_num_threads(g.threads)
                provs, excused = providers(s, g.shape, g.dtype, g.mode, tested, compile_baseline, device)
                nbytes = s.bytes_moved(g.shape, g.dtype, g.mode)
                provs["copy"] = copy_provider(nbytes // 2, device)
                gemm_flops = 0.0
                if s.gemm is not None:  # a matmul-bound operator: its products' rate against torch.matmul's
                    provs["matmul"], gemm_flops = s.gemm(g.shape, g.dtype, device)
                if sync is not None:
                    provs = {name: (lambda f=f: (f(), sync())) for name, f in provs.items()}
                provs = _working(provs, excused, {} if failed is None else failed)
                times = interleave(provs, _budget(g.shape, budget_s))
                base = dict(
                    operator=op,
                    mode=g.mode,
                    dtype=dtype_name(g.dtype),
                    shape="x".join(map(str, g.shape)),
                    threads=g.threads,
                    machine=mach if kind == "cpu" else f"{mach}; {devices.name(device)}",
                    versions=vers,
                    run=stamp,
                    workload=g.workload,
                )
                copy_gbps = gbps(nbytes, times["copy"])
                gemm_rate = gemm_flops / (times["matmul"].min_us * 1e3) if "matmul" in times else 0.0
                for name, t in times.items():
                    stats = {
                        "min_us": t.min_us,
                        "median_us": t.median_us,
                        "p80_us": t.p80_us,
                        "rounds": t.rounds,
                        "gbps": gbps(nbytes, t),
                        "bandwidth_share": gbps(nbytes, t) / copy_gbps,
                    }
                    if gemm_rate and name not in ("copy", "matmul"):
                        stats["gflops"] = s.flops(g.shape, g.mode) / (t.min_us * 1e3)
                        stats["matmul_share"] = stats["gflops"] / gemm_rate
                    elif name == "matmul":
                        stats["gflops"] = gemm_rate
                    for ref, key in (("torch-eager", "speedup_vs_eager"), ("torch-compile", "speedup_vs_compile")):
                        if ref in times and name not in ("copy", "matmul"):
                            stats[key] = times[ref].min_us / t.min_us
                    if name not in ("copy", "matmul") and (accelerator is not None or name != "torch-compile"):
                        stats["peak_bytes"] = peak_bytes(provs[name], device)  # on the CPU compiled code runs unseen
                    if name not in ("copy", "matmul") and accelerator is None:
                        resident = resident_peak_bytes(provs[name])
                        if resident is not None:
                            stats["peak_resident_bytes"] = resident
                    rows += [dict(base, provider=name, statistic=k, value=float(v)) for k, v in stats.items()]
        finally:
            torch.set_num_threads(threads_before)
    return rows
