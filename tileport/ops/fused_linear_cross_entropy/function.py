"""``fused_linear_cross_entropy``: the public function and its autograd Function (Liger-Kernel's scheme: for
"sum" and "mean" the gradients are made in the forward, chunk by chunk, and the backward only scales them by the
loss's gradient; "none", a z-loss given a gradient of its own, or a second backward pass over a retained graph
make them again from the saved inputs, chunk by chunk, with the row kernel's backward)."""

from __future__ import annotations

import torch

from ...backends.registry import REGISTRY
from ...dtypes import stat_dtype
from . import checks, chunks


def _scales(target: torch.Tensor, ce_weight: torch.Tensor | None, call: checks.Call) -> tuple[float, float]:
    """The reduction's (a, b), found once over all targets before the chunks: the cross-entropy term's and the
    z-loss's factors. "mean": 1 / the non-ignored targets' summed class weights (torch's denominator) and 1 / their
    count; nan where that is 0 (torch's 0 / 0: nan loss; ignored rows still get zero gradients)."""
    if call.reduction != "mean":
        return 1.0, 1.0
    valid = target != call.ignore_index
    count = int(valid.sum())
    total = float(count) if ce_weight is None else float(ce_weight.to(torch.float64)[target[valid].long()].sum())
    return (1.0 / total if total else float("nan")), (1.0 / count if count else float("nan"))


def _reduce(loss: torch.Tensor, z_loss: torch.Tensor, call: checks.Call, scales, dtype: torch.dtype):
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


class _FusedLinearCrossEntropy(torch.autograd.Function):
    """(x [N, H], weight [V, H], target [N], bias, ce_weight, call) -> (loss, z_loss), in the stat dtype."""

    @staticmethod
    def forward(ctx, x, weight, target, bias, ce_weight, call: checks.Call, wants: tuple[bool, bool, bool]):
        rows = _rows(x, weight, target, bias, ce_weight, call)
        scales = _scales(target, rows.ce_weight, call)
        eager = call.reduction != "none" and any(wants)
        res = chunks.run(rows, wants, scales=scales if eager else None)
        ctx.call, ctx.wants, ctx.scales = call, wants, scales
        ctx.dtypes = (x.dtype, weight.dtype, None if bias is None else bias.dtype)
        ctx.grads = (res.grad_input, res.grad_weight, res.grad_bias) if eager else None
        ctx.save_for_backward(x, weight, target, bias, ce_weight, None if eager else res.lse)
        ctx.set_materialize_grads(False)
        return _reduce(res.loss, res.z_loss, call, scales, res.lse.dtype)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, dloss, dz_loss):
        x, weight, target, bias, ce_weight, lse = ctx.saved_tensors
        call, (a, b) = ctx.call, ctx.scales
        grads, ctx.grads = ctx.grads, None  # the forward's gradients serve one backward pass; then they are made again
        if not call.lse_square_scale:
            dz_loss = None  # the z-loss is 0 whatever the logits: its gradient adds nothing
        if grads is not None and dz_loss is None and dloss is not None:
            g = float(dloss)
            grad_input, acc_w, acc_b = grads
            if grad_input is not None and g != 1.0:
                grad_input.mul_(g)
        else:
            rows = _rows(x, weight, target, bias, ce_weight, call)
            if lse is not None:  # "none": per-row gradients through the kernel's backward
                st = lse.dtype
                dl = torch.zeros_like(lse) if dloss is None else dloss.to(st).contiguous()
                dz = None if not call.lse_square_scale else dl + (0 if dz_loss is None else dz_loss.to(st).contiguous())
                res = chunks.run(rows, ctx.wants, row_grads=(dl, dz, lse))
            else:
                g = 0.0 if dloss is None else float(dloss)
                gz = 0.0 if dz_loss is None else float(dz_loss)
                res = chunks.run(rows, ctx.wants, scales=(g * a, (g + gz) * b))
            grad_input, acc_w, acc_b, g = res.grad_input, res.grad_weight, res.grad_bias, 1.0
        _, dw, db = ctx.dtypes
        grad_weight = None if acc_w is None else chunks.narrowed(acc_w, dw, g)
        grad_bias = None if acc_b is None else chunks.narrowed(acc_b, db, g)
        return grad_input, grad_weight, None, grad_bias, None, None, None


def _rows(x, weight, target, bias, ce_weight, call: checks.Call) -> chunks.Rows:
    """The pass's inputs: the head, bias and class weights in the compute dtype, the row kernel for it."""
    cd = call.compute_dtype
    kernel = REGISTRY.kernels("cross_entropy", x.device, (cd,), call.backend)

    def cast(t):
        return None if t is None else t.to(cd).contiguous()

    return chunks.Rows(x, weight.to(cd), cast(bias), target, cast(ce_weight), call, kernel)


def _empty(x, weight, bias, call: checks.Call):
    """No rows: torch's answers (mean: nan, sum: 0, none: empty), differentiable, zero gradients."""
    cd = call.compute_dtype
    st = stat_dtype(cd)
    logits = torch.nn.functional.linear(x.to(cd), weight.to(cd), None if bias is None else bias.to(cd))  # [0, V]
    rows = logits.sum(-1).to(st)
    zero = rows.sum()
    if call.reduction == "none":
        return rows, rows * 0
    return (zero / 0 if call.reduction == "mean" else zero), zero * 0


def fused_linear_cross_entropy(
    input,
    lm_weight,
    target,
    bias=None,
    ce_weight=None,
    ignore_index=-100,
    reduction="mean",
    label_smoothing=0.0,
    *,
    lse_square_scale=0.0,
    softcap=None,
    return_z_loss=False,
    chunk_size=None,
    accum_dtype=torch.float32,
    backend=None,
):
    """The cross-entropy of ``input @ lm_weight.T + bias`` against ``target``, without the [N, V] logits.

    ``input [..., H]``, ``lm_weight [V, H]``, ``target [...]`` (input.shape[:-1], int64 or int32 class indices),
    ``bias`` and ``ce_weight`` (per-class weights) None or ``[V]``; ``F.cross_entropy``'s ``ignore_index``,
    ``reduction`` ("none", "sum", "mean"), ``label_smoothing``; Liger-Kernel's ``lse_square_scale`` (the z-loss,
    included in the loss; "mean" divides it by the non-ignored targets' count) and ``softcap`` (None or 0.0: none).
    The loss in fp32 (fp64 for fp64 inputs); ``return_z_loss=True`` returns ``(loss, z_loss)``. Rows go in chunks of
    ``chunk_size`` (default: Liger's heuristic); the matmuls follow ``torch.autocast``. The head's and the bias's
    gradients are summed over the chunks in ``accum_dtype`` (Liger-Kernel's name): torch.float32 by default
    (flash-linear-attention's), or None for lm_weight's own dtype (Liger's default: no fp32 buffer the size of the
    head, each chunk's product rounded into the sum). Differentiable in input, lm_weight and bias. IndexError for a
    target outside [0, V) that is not ignore_index."""
    call = checks.call(
        input,
        lm_weight,
        target,
        bias,
        ce_weight,
        ignore_index,
        reduction,
        label_smoothing,
        lse_square_scale,
        softcap,
        return_z_loss,
        chunk_size,
        backend,
        accum_dtype,
    )
    x, t = input.reshape(target.numel(), input.shape[-1]), target.reshape(-1)  # (N, H), H = 0 too
    if x.shape[0] == 0:
        loss, z_loss = _empty(x, lm_weight, bias, call)
    else:
        train = torch.is_grad_enabled()
        wants = (
            train and input.requires_grad,
            train and lm_weight.requires_grad,
            train and bias is not None and bias.requires_grad,
        )
        loss, z_loss = _FusedLinearCrossEntropy.apply(x, lm_weight, t, bias, ce_weight, call, wants)
    if call.reduction == "none":
        loss, z_loss = loss.view(target.shape), z_loss.view(target.shape)
    return (loss, z_loss) if call.return_z_loss else loss
