"""l2norm's study for the verify report: Newton-Raphson refinement of an approximate rsqrt, measured (the
Ascend A2/A3 practice).

The TileLang CPU forward kernel can replace its exact rsqrt with a model of an approximate hardware rsqrt
(relative error below 2^-8 = 3.9e-3; Ascend A2/A3's vector rsqrt has about 3e-3) followed by k steps of
y <- y * (1.5 - 0.5 * s * y^2). For k = 0, 1, 2 and each dtype this measures rstd's relative error against
the float64 golden and judges y and rstd by the dual-benchmark standard at L0.
"""

from __future__ import annotations

import torch

from ...backends.registry import REGISTRY
from ...precision import compare
from ..spec import StudyResult

STEPS = (0, 1, 2)
SHAPE = (1024, 1024)
EPS = 1e-6
TITLE = "Approximate rsqrt plus k Newton-Raphson steps (TileLang CPU kernel), judged at L0"
HEADERS = (
    "dtype",
    "k",
    "rstd max rel err",
    "rstd mean rel err",
    "y MARE ratio",
    "rstd MARE ratio",
    "L0",
    "what failed",
)


def refinement_study(dtypes: list[torch.dtype], seed: int = 0) -> StudyResult:
    """One row per (dtype, k); the note says how it was measured, or why it was skipped."""
    avail = REGISTRY.availability("tilelang")
    if not avail.ok:
        return StudyResult(TITLE, HEADERS, (), f"skipped: the tilelang backend is unavailable ({avail.reason})")
    kernels = REGISTRY.kernels("l2norm", torch.device("cpu"), (torch.float32,), "tilelang")
    reference = REGISTRY.kernels("l2norm", torch.device("cpu"), (torch.float32,), "torch")
    rows, records = [], []
    for dtype in [d for d in dtypes if d != torch.float64]:
        x = torch.randn(SHAPE, generator=torch.Generator().manual_seed(seed)).to(dtype)
        yg, rg = reference.forward(x.double(), EPS, torch.float64)
        yb, rb = reference.forward(x, EPS, dtype)
        for k in STEPS:
            y, r = kernels.forward(x, EPS, dtype, rsqrt_steps=k)
            rel = (r.double() - rg).abs() / rg.abs()
            vy, vr = compare(y, yg, yb, "L0", dtype), compare(r, rg, rb, "L0", torch.float32)
            passed = vy.passed and vr.passed
            failures = "; ".join([f"y: {f}" for f in vy.failures] + [f"rstd: {f}" for f in vr.failures])
            name = str(dtype).removeprefix("torch.")
            records.append(
                dict(
                    dtype=name,
                    steps=k,
                    rstd_max_rel=float(rel.max()),
                    rstd_mean_rel=float(rel.mean()),
                    y_mare_ratio=vy.ratios["mare"],
                    rstd_mare_ratio=vr.ratios["mare"],
                    passes_L0=passed,
                    failures=failures,
                )
            )
            rows.append(
                (
                    name,
                    str(k),
                    f"{float(rel.max()):.2e}",
                    f"{float(rel.mean()):.2e}",
                    f"{vy.ratios['mare']:.3g}",
                    f"{vr.ratios['mare']:.3g}",
                    "pass" if passed else "fail",
                    failures,
                )
            )
    note = (
        f"{SHAPE[0]}x{SHAPE[1]} normal inputs, eps {EPS}; model: exact rsqrt truncated to 8 fraction bits. "
        "Field figures: about 3e-3 before, 1e-5 after one step, 2e-7 after two."
    )
    # informative: k = 0 is expected to fail; the kernels' default is the exact rsqrt
    return StudyResult(TITLE, HEADERS, tuple(rows), note, True, tuple(records))
