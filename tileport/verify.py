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
from .precision import compare, retest

SHAPES = [(1, 1), (33, 100), (1024, 512), (256, 4096), (7, 4097), (4, 65536), (2, 3, 7)]
DTYPES = [torch.float32, torch.float16, torch.bfloat16]
EPS = 1e-6
RETEST_SEEDS = 30  # the standard asks 1000 new seeds; this quick run uses fewer and says so in the report
DTYPE_LABEL = {torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16"}


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
    note: str  # failures of the first seed and the retest's outcome, empty when it passed outright
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


def _case_inputs(shape, dtype, seed):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(shape, generator=gen).to(dtype)
    return x, torch.randn(shape, generator=gen).to(dtype)


def _verdicts(shape, dtype, seed, name, level):
    """Each output (y, rstd, dx) of one seeded case, judged against the golden and the torch benchmark."""
    return _run_case(shape, dtype, seed, name, level)[0]


def _run_case(shape, dtype, seed, name, level):
    """The verdicts of one seeded case, with the inputs and both rstd (the timings reuse them)."""
    x, dy = _case_inputs(shape, dtype, seed)
    y, rstd = ops.l2norm_fwd(x, EPS, backend=name)
    dx = ops.l2norm_bwd(x, rstd, dy, backend=name)
    yb, rb = ops.l2norm_fwd(x, EPS, backend="torch")
    dxb = ops.l2norm_bwd(x, rb, dy, backend="torch")
    yg, rg = ops.l2norm_fwd(x.double(), EPS, backend="torch")
    dxg = ops.l2norm_bwd(x.double(), rg, dy.double(), backend="torch")
    verdicts = {
        "y": compare(y, yg, yb, level=level, dtype=dtype),
        "rstd": compare(rstd, rg, rb, level=level, dtype=torch.float32),
        "dx": compare(dx, dxg, dxb, level=level, dtype=dtype),
    }
    return verdicts, x, dy, rstd, rb


def verify_l2norm(
    backend: str | None = None,
    dtypes: list[torch.dtype] | None = None,
    shapes: list[tuple[int, ...]] | None = None,
    level: str = "L0",
    seed: int = 0,
    repeats: int = 10,
    retest_seeds: int = RETEST_SEEDS,
    progress: Callable[[str], None] | None = None,
) -> list[Row]:
    """One row per (dtype, shape, output). A failing output is retested as the standard prescribes."""
    rows: list[Row] = []
    for dtype in dtypes or DTYPES:
        for shape in shapes or SHAPES:
            if progress:
                progress(f"l2norm {DTYPE_LABEL[dtype]} {'x'.join(map(str, shape))}")
            name = backend or default_backend(dtype, torch.device("cpu"))
            verdicts, x, dy, rstd, rb = _run_case(shape, dtype, seed, name, level)
            t_fwd = _median_us(lambda: ops.l2norm_fwd(x, EPS, backend=name), repeats)
            t_ref = _median_us(lambda: ops.l2norm_fwd(x, EPS, backend="torch"), repeats)
            t_bwd = _median_us(lambda: ops.l2norm_bwd(x, rstd, dy, backend=name), repeats)
            t_bref = _median_us(lambda: ops.l2norm_bwd(x, rb, dy, backend="torch"), repeats)
            for output, v in verdicts.items():
                passed, note = v.passed, "; ".join(v.failures)
                if not passed:
                    seeds = range(seed + 1, seed + 1 + retest_seeds)
                    result = retest(lambda s, o=output: _verdicts(shape, dtype, s, name, level)[o], seeds)
                    passed = result.passed
                    medians = ", ".join(f"{k.upper()} {m:.2f}" for k, m in result.medians.items())
                    verdict_word = "passed" if passed else "failed: " + "; ".join(result.failures)
                    note = f"{note}; retest over {result.seeds} seeds {verdict_word} (median ratios {medians})"
                timing = (t_fwd, t_ref) if output != "dx" else (t_bwd, t_bref)
                rows.append(
                    Row(
                        shape, dtype, output, name, v.actual.mare, v.ratios["mare"], v.ratios["rmse"],
                        v.ratios["mere"], passed, note, *timing,
                    )
                )  # fmt: skip
    return rows
