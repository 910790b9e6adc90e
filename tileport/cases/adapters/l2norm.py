"""l2norm through the public API: y and rstd from ``tileport.l2norm_fwd``, dx from ``tileport.l2norm_bwd``."""

from __future__ import annotations

import torch

import tileport

ROWWISE = True  # rows are independent: cases can be stacked along a new leading dimension


def run(inputs: dict, backend: str | None, backward: bool) -> dict[str, torch.Tensor]:
    x, eps = inputs["x"], float(inputs.get("eps", 1e-6))
    y, rstd = tileport.l2norm_fwd(x, eps, backend=backend)
    out = {"y": y, "rstd": rstd}
    if backward:
        out["dx"] = tileport.l2norm_bwd(x, rstd, inputs["dy"], backend=backend)
    return out


def precision_dtype(output: str, dtype: torch.dtype) -> torch.dtype:
    # rstd is fp32 for every low-precision input, so fp32's small-value rule applies to it
    return torch.float32 if output == "rstd" and dtype != torch.float64 else dtype
