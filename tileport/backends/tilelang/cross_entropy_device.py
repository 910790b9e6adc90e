"""cross_entropy's TileLang device kernels (CUDA, Ascend arch35): the launchers every target shares, written once.

A target gives its builders (``build_forward(bucket, x_dtype, t_dtype, weighted, smoothing, capped, fused)``,
``build_backward(...)``), its width bucket and its runner; ``entries`` makes the module's ``lowered`` (for
``tileport lower``), ``forward`` and ``backward`` (the contract in ``tileport/ops/cross_entropy``) over them.
Without a weight the launcher passes a row of X as W (never read: the kernels take 1).
"""

from __future__ import annotations

import torch

from .. import outputs
from .targets import TL_DTYPE

INDEX = {torch.int32: "int32", torch.int64: "int64"}


def options(weight, label_smoothing: float, softcap: float) -> dict:
    """The compile-time options of a call: which terms its kernels take."""
    return {"weighted": weight is not None, "smoothing": label_smoothing > 0, "capped": bool(softcap)}


def _checked(input, target, weight):
    if input.dtype not in TL_DTYPE:
        raise TypeError(
            f"cross_entropy: backend 'tilelang' on a device takes fp16, bf16 or fp32 logits, got {input.dtype}"
        )
    if target.dtype not in INDEX:
        raise TypeError(f"cross_entropy: targets must be int32 or int64, got {target.dtype}")
    x = input.contiguous()  # the kernels index rows with stride C
    # W's tiles are in X's dtype (and sized so in Ascend's UB budget): an fp32 weight beside 16-bit logits, which
    # tileport.cross_entropy takes, is rounded to it here (the CPU, Triton and torch kernels read it as it is)
    return x, target.contiguous(), x[0] if weight is None else weight.to(x.dtype).contiguous()


def entries(build_forward, build_backward, bucket, runner, device: str):
    """A target's (lowered, forward, backward)."""

    def kernel(fused: bool | None, x, t, weight, label_smoothing, softcap):
        opts = options(weight, label_smoothing, softcap).values()
        if fused is None:
            return runner.kernel("cross_entropy_bwd", build_backward, bucket(x.shape[1]), x.dtype, t.dtype, *opts)
        name = "cross_entropy_fwd_grad" if fused else "cross_entropy_fwd"
        return runner.kernel(name, build_forward, bucket(x.shape[1]), x.dtype, t.dtype, *opts, fused)

    def lowered(
        dtype: torch.dtype,
        dim: int,
        target_dtype: torch.dtype = torch.int64,
        weighted: bool = False,
        smoothing: bool = False,
        capped: bool = False,
    ) -> dict:
        """{kernel name: prim_func} serving rows of ``dim`` classes (the fused forward, the plain forward and the
        backward), for ``tileport lower``."""
        b = bucket(dim)
        return {
            "cross_entropy_fwd_grad": build_forward(b, dtype, target_dtype, weighted, smoothing, capped, True),
            "cross_entropy_fwd": build_forward(b, dtype, target_dtype, weighted, smoothing, capped, False),
            "cross_entropy_bwd": build_backward(b, dtype, target_dtype, weighted, smoothing, capped),
        }

    def forward(
        input,
        target,
        weight,
        ignore_index,
        label_smoothing,
        lse_square_scale,
        softcap,
        grad=None,
        scales=(1.0, 1.0),
        wide=False,
    ):
        """(loss, z_loss, lse) fp32 [N] (loss and z_loss widened to fp64 where ``wide``: the kernels' rows are
        fp32); with ``grad`` the fused gradient written into it (in place when it is
        input; through a contiguous copy where grad is a strided view)."""
        x, t, w = _checked(input, target, weight)
        n = x.shape[0]
        loss, z_loss, lse = (outputs.empty((n,), torch.float32, x.device) for _ in range(3))
        fused = grad is not None
        if grad is None or grad is input:
            g = x  # in place: x is input itself, or input's contiguous copy (copied back below)
        else:
            g = grad if grad.is_contiguous() else torch.empty_like(x)
        kernel(fused, x, t, weight, label_smoothing, softcap)(
            x,
            t,
            w,
            g,
            loss,
            z_loss,
            lse,
            int(ignore_index),
            float(label_smoothing),
            float(lse_square_scale),
            float(softcap or 1.0),
            float(scales[0]),
            float(scales[1]),
        )
        if fused and g is not grad:
            grad.copy_(g)
        return (loss.double(), z_loss.double(), lse) if wide else (loss, z_loss, lse)

    def backward(dloss, dz_loss, input, target, weight, lse, ignore_index, label_smoothing, lse_square_scale, softcap):
        """dinput from input and the forward's lse."""
        x, t, w = _checked(input, target, weight)
        dx = outputs.empty(tuple(x.shape), x.dtype, x.device)
        dl = dloss.to(torch.float32).contiguous()
        dz = torch.zeros_like(dl) if dz_loss is None else dz_loss.to(torch.float32).contiguous()
        kernel(None, x, t, weight, label_smoothing, softcap)(
            x,
            t,
            w,
            dl,
            dz,
            lse.contiguous(),
            dx,
            int(ignore_index),
            float(label_smoothing),
            float(lse_square_scale),
            float(softcap or 1.0),
        )
        return dx

    forward.__doc__ += f" On {device}."
    backward.__doc__ = f"dinput on {device}, from input and the forward's lse."
    return lowered, forward, backward
