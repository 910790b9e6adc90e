"""fused_linear_cross_entropy's two passes over the chunks, stated once for the eager autograd Function and for the
custom ops torch.compile sees (``compiled.py``): the forward (loss, z-loss and, for "sum" and "mean", the gradients
already scaled by the reduction: Liger-Kernel's scheme) and the backward's recomputation from the saved inputs."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ...backends.registry import REGISTRY
from . import checks, chunks


@dataclass
class Forward:
    """The forward pass: ``loss`` and ``z_loss`` reduced (stat dtype), each row's ``lse``, the reduction's
    ``scales`` (a, b) and, where made in the forward, the gradients (x's, and the head's and bias's accumulators)."""

    loss: torch.Tensor
    z_loss: torch.Tensor
    lse: torch.Tensor
    scales: tuple[float, float]
    grads: tuple | None


def scales_of(target: torch.Tensor, ce_weight: torch.Tensor | None, call: checks.Call) -> tuple[float, float]:
    """The reduction's (a, b), found once over all targets before the chunks: the cross-entropy term's and the
    z-loss's factors. "mean": 1 / the non-ignored targets' summed class weights (torch's denominator) and 1 / their
    count; nan where that is 0 (torch's 0 / 0: nan loss; ignored rows still get zero gradients)."""
    if call.reduction != "mean":
        return 1.0, 1.0
    valid = target != call.ignore_index
    count = int(valid.sum())
    total = float(count) if ce_weight is None else float(ce_weight.to(torch.float64)[target[valid].long()].sum())
    return (1.0 / total if total else float("nan")), (1.0 / count if count else float("nan"))


def reduce(loss: torch.Tensor, z_loss: torch.Tensor, call: checks.Call, scales, dtype: torch.dtype):
    """The returned (loss, z_loss) in ``dtype`` from the per-row terms (fp64): the loss includes the z-loss
    (Liger's convention), which is exactly 0 where its scale is (whatever the rows' lse: no 0 * inf). Added,
    summed and scaled in fp64 and rounded once: rows of one value (saturated softcap logits) would otherwise
    carry one rounding error each into the sum."""
    if not call.lse_square_scale:
        z_loss = torch.zeros_like(z_loss)
    if call.reduction == "none":
        return (loss + z_loss).to(dtype), z_loss.to(dtype)
    a, b = scales if call.reduction == "mean" else (1.0, 1.0)
    ce, z = loss.sum(dtype=torch.float64), z_loss.sum(dtype=torch.float64)
    return (ce * a + z * b).to(dtype), (z * b).to(dtype)


def rows_of(x, weight, target, bias, ce_weight, call: checks.Call) -> chunks.Rows:
    """The pass's inputs: the head, bias and class weights in the compute dtype, the row kernel for it."""
    cd = call.compute_dtype
    kernel = REGISTRY.kernels("cross_entropy", x.device, (cd,), call.backend)

    def cast(t):
        return None if t is None else t.to(cd).contiguous()

    return chunks.Rows(x, weight.to(cd), cast(bias), target, cast(ce_weight), call, kernel)


def makes_grads_in_forward(call: checks.Call, wants: tuple[bool, bool, bool]) -> bool:
    """ "sum" and "mean" with a gradient asked for: made in the forward, scaled by the loss's gradient after."""
    return call.reduction != "none" and any(wants)


def forward(x, weight, target, bias, ce_weight, call: checks.Call, wants: tuple[bool, bool, bool]) -> Forward:
    rows = rows_of(x, weight, target, bias, ce_weight, call)
    scales = scales_of(target, rows.ce_weight, call)
    eager = makes_grads_in_forward(call, wants)
    res = chunks.run(rows, wants, scales=scales if eager else None)
    loss, z_loss = reduce(res.loss, res.z_loss, call, scales, res.lse.dtype)
    grads = (res.grad_input, res.grad_weight, res.grad_bias) if eager else None
    return Forward(loss, z_loss, res.lse, scales, grads)


def recompute(x, weight, target, bias, ce_weight, call, wants, scales, lse, dloss, dz_loss) -> chunks.Result:
    """The gradients made again from the saved inputs: per row through the kernel's backward for "none" (``lse``
    given), else a forward pass with the reduction's scales times the loss's (and the z-loss's) gradient.
    ``dz_loss`` None where the z-loss's gradient adds nothing."""
    rows = rows_of(x, weight, target, bias, ce_weight, call)
    if call.reduction == "none":
        st = lse.dtype
        dl = torch.zeros_like(lse) if dloss is None else dloss.to(st).contiguous()
        dz = None if not call.lse_square_scale else dl + (0 if dz_loss is None else dz_loss.to(st).contiguous())
        return chunks.run(rows, wants, row_grads=(dl, dz, lse))
    a, b = scales
    g = 0.0 if dloss is None else float(dloss)
    gz = 0.0 if dz_loss is None else float(dz_loss)
    return chunks.run(rows, wants, scales=(g * a, (g + gz) * b))
