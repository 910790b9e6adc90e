"""``tileport verify OP``: the operator on the default backend against a float64 golden and the torch
reference (the dual benchmark), over built-in shapes and dtypes, with timings.

Flow: cases -> public API with a backend name -> precision.compare -> table. It never imports a backend.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from typing import Callable

import torch

from . import ops
from .backends.registry import REGISTRY
from .precision import compare

SHAPES = [(1, 1), (33, 100), (1024, 512), (256, 4096), (7, 4097), (4, 65536), (2, 3, 7)]
DTYPES = [torch.float32, torch.float16, torch.bfloat16]
EPS = 1e-6


@dataclass
class Row:
    shape: tuple[int, ...]
    dtype: torch.dtype
    output: str  # y, rstd or dx
    backend: str
    mare: float
    mare_ratio: float
    rmse_ratio: float
    mere_ratio: float
    passed: bool
    failures: str
    us_backend: float
    us_reference: float


def _median_us(fn: Callable[[], object], repeats: int) -> float:
    fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e6


def default_backend(dtype: torch.dtype, device: torch.device) -> str:
    return REGISTRY.resolve("l2norm", device, (dtype,)).name


def verify_l2norm(
    backend: str | None = None,
    dtypes: list[torch.dtype] | None = None,
    shapes: list[tuple[int, ...]] | None = None,
    level: str = "L0",
    seed: int = 0,
    repeats: int = 10,
    progress: Callable[[str], None] | None = None,
) -> list[Row]:
    rows: list[Row] = []
    gen = torch.Generator().manual_seed(seed)
    for dtype in dtypes or DTYPES:
        for shape in shapes or SHAPES:
            if progress:
                progress(f"l2norm {dtype} {shape}")
            x = torch.randn(shape, generator=gen).to(dtype)
            dy = torch.randn(shape, generator=gen).to(dtype)
            name = backend or default_backend(dtype, x.device)
            y, rstd = ops.l2norm_fwd(x, EPS, backend=name)
            dx = ops.l2norm_bwd(x, rstd, dy, backend=name)
            yb, rb = ops.l2norm_fwd(x, EPS, backend="torch")
            dxb = ops.l2norm_bwd(x, rb, dy, backend="torch")
            yg, rg = ops.l2norm_fwd(x.double(), EPS, backend="torch")
            dxg = ops.l2norm_bwd(x.double(), rg, dy.double(), backend="torch")
            t_fwd = _median_us(lambda: ops.l2norm_fwd(x, EPS, backend=name), repeats)
            t_ref = _median_us(lambda: ops.l2norm_fwd(x, EPS, backend="torch"), repeats)
            t_bwd = _median_us(lambda: ops.l2norm_bwd(x, rstd, dy, backend=name), repeats)
            t_bref = _median_us(lambda: ops.l2norm_bwd(x, rb, dy, backend="torch"), repeats)
            for output, a, b, g, ta, tb, dt in (
                ("y", y, yb, yg, t_fwd, t_ref, dtype),
                ("rstd", rstd, rb, rg, t_fwd, t_ref, torch.float32),
                ("dx", dx, dxb, dxg, t_bwd, t_bref, dtype),
            ):
                v = compare(a, g, b, level=level, dtype=dt)
                rows.append(
                    Row(
                        shape, dtype, output, name, v.actual.mare, v.ratios["mare"], v.ratios["rmse"],
                        v.ratios["mere"], v.passed, "; ".join(v.failures), ta, tb,
                    )
                )  # fmt: skip
    return rows
