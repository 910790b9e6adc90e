"""Newton-Raphson refinement of an approximate rsqrt, measured (the Ascend A2/A3 practice).

The TileLang CPU forward kernel can replace its exact rsqrt with a model of an approximate hardware rsqrt
(relative error below 2^-8 = 3.9e-3; Ascend A2/A3's vector rsqrt has about 3e-3) followed by k steps of
y <- y * (1.5 - 0.5 * s * y^2). For k = 0, 1, 2 and each dtype this measures rstd's relative error against
the float64 golden and judges y and rstd by the dual-benchmark standard at L0.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..backends.registry import REGISTRY
from ..precision import compare
from .accuracy import dtype_name

STEPS = (0, 1, 2)
SHAPE = (1024, 1024)
EPS = 1e-6


@dataclass(frozen=True)
class RefinementRow:
    dtype: str
    steps: int
    rstd_max_rel: float
    rstd_mean_rel: float
    y_mare_ratio: float
    rstd_mare_ratio: float
    passes_L0: bool
    failures: str


def refinement_study(dtypes: list[torch.dtype], seed: int = 0) -> tuple[list[RefinementRow], str]:
    """Rows per (dtype, k), and a note (why the study was skipped, when it was)."""
    avail = REGISTRY.availability("tilelang")
    if not avail.ok:
        return [], f"skipped: the tilelang backend is unavailable ({avail.reason})"
    kernels = REGISTRY.kernels("l2norm", torch.device("cpu"), (torch.float32,), "tilelang")
    reference = REGISTRY.kernels("l2norm", torch.device("cpu"), (torch.float32,), "torch")
    rows = []
    for dtype in dtypes:
        x = torch.randn(SHAPE, generator=torch.Generator().manual_seed(seed)).to(dtype)
        yg, rg = reference.forward(x.double(), EPS, torch.float64)
        yb, rb = reference.forward(x, EPS, dtype)
        for k in STEPS:
            y, r = kernels.forward(x, EPS, dtype, rsqrt_steps=k)
            rel = (r.double() - rg).abs() / rg.abs()
            vy = compare(y, yg, yb, "L0", dtype)
            vr = compare(r, rg, rb, "L0", torch.float32)
            rows.append(
                RefinementRow(
                    dtype_name(dtype), k, float(rel.max()), float(rel.mean()), vy.ratios["mare"], vr.ratios["mare"],
                    vy.passed and vr.passed, "; ".join([f"y: {f}" for f in vy.failures] + [f"rstd: {f}" for f in vr.failures]),
                )
            )  # fmt: skip
    return rows, f"{SHAPE[0]}x{SHAPE[1]} normal inputs, eps {EPS}; model: exact rsqrt truncated to 8 fraction bits"
