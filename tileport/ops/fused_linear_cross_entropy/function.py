"""``fused_linear_cross_entropy``: the public function and its autograd Function (Liger-Kernel's scheme: for
"sum" and "mean" the gradients are made in the forward, chunk by chunk, and the backward only scales them by the
loss's gradient; "none", a z-loss given a gradient of its own, or a second backward pass over a retained graph
make them again from the saved inputs, chunk by chunk, with the row kernel's backward)."""

from __future__ import annotations

import torch

from ...dtypes import stat_dtype
from . import checks, chunks, compiled, passes


class _FusedLinearCrossEntropy(torch.autograd.Function):
    """(x [N, H], weight [V, H], target [N], bias, ce_weight, call) -> (loss, z_loss), in the stat dtype."""

    @staticmethod
    def forward(ctx, x, weight, target, bias, ce_weight, call: checks.Call, wants: tuple[bool, bool, bool]):
        fwd = passes.forward(x, weight, target, bias, ce_weight, call, wants)
        ctx.call, ctx.wants, ctx.scales, ctx.grads = call, wants, fwd.scales, fwd.grads
        ctx.dtypes = (x.dtype, weight.dtype, None if bias is None else bias.dtype)
        ctx.save_for_backward(x, weight, target, bias, ce_weight, None if fwd.grads is not None else fwd.lse)
        ctx.set_materialize_grads(False)
        return fwd.loss, fwd.z_loss

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, dloss, dz_loss):
        x, weight, target, bias, ce_weight, lse = ctx.saved_tensors
        call = ctx.call
        grads, ctx.grads = ctx.grads, None  # the forward's gradients serve one backward pass; then they are made again
        if not call.lse_square_scale:
            dz_loss = None  # the z-loss is 0 whatever the logits: its gradient adds nothing
        if grads is not None and dz_loss is None and dloss is not None:
            g = float(dloss)
            grad_input, acc_w, acc_b = grads
            if grad_input is not None and g != 1.0:
                grad_input.mul_(g)
        else:
            res = passes.recompute(x, weight, target, bias, ce_weight, call, ctx.wants, ctx.scales, lse, dloss, dz_loss)
            grad_input, acc_w, acc_b, g = res.grad_input, res.grad_weight, res.grad_bias, 1.0
        _, dw, db = ctx.dtypes
        grad_weight = None if acc_w is None else chunks.narrowed(acc_w, dw, g)
        grad_bias = None if acc_b is None else chunks.narrowed(acc_b, db, g)
        return grad_input, grad_weight, None, grad_bias, None, None, None


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
        if torch.compiler.is_compiling():  # the passes as custom ops: no graph break
            loss, z_loss = compiled.apply(x, lm_weight, t, bias, ce_weight, call, wants)
        else:
            loss, z_loss = _FusedLinearCrossEntropy.apply(x, lm_weight, t, bias, ce_weight, call, wants)
    if call.reduction == "none":
        loss, z_loss = loss.view(target.shape), z_loss.view(target.shape)
    return (loss, z_loss) if call.return_z_loss else loss
