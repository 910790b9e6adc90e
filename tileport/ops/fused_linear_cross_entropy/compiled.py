"""fused_linear_cross_entropy under torch.compile: its two passes (``passes.py``) as custom ops, under an autograd
Function dynamo traces, so a compiled training step has no graph break. What would break one stays inside the
ops: the Python loop over the chunks and the kernels it calls, the reduction's scales and the targets' range check
(both read the data), the loss's gradient read as a number. Unlike the eager Function, the backward op leaves the
saved gradients as they are (a custom op does not write its inputs): it scales them into new tensors."""

from __future__ import annotations

import torch

from ...dtypes import stat_dtype
from . import checks, chunks, passes

OP = "fused_linear_cross_entropy"
_SETTINGS = (
    "int ignore_index, str reduction, float label_smoothing, float lse_square_scale, float softcap, int chunk_size, "
    "ScalarType compute_dtype, ScalarType accum_dtype, str? backend, bool[] wants"
)
_INPUTS = "Tensor x, Tensor weight, Tensor target, Tensor? bias, Tensor? ce_weight"


def settings(call: checks.Call, wants: tuple[bool, bool, bool]) -> tuple:
    """The call's settings as the custom ops' arguments (numbers, strings, dtypes)."""
    return (
        call.ignore_index,
        call.reduction,
        call.label_smoothing,
        call.lse_square_scale,
        call.softcap,
        call.chunk_size or 0,
        call.compute_dtype,
        call.accum_dtype,
        call.backend,
        list(wants),
    )


def _call(ignore_index, reduction, label_smoothing, lse_square_scale, softcap, chunk_size, cd, accum, backend):
    return checks.Call(
        cd,
        ignore_index,
        reduction,
        label_smoothing,
        lse_square_scale,
        softcap,
        False,
        chunk_size or None,
        backend,
        accum,
    )


def _or_empty(t: torch.Tensor | None, like: torch.Tensor) -> torch.Tensor:
    """A custom op returns tensors: an absent gradient as an empty one."""
    return like.new_empty(0) if t is None else t


def _forward(x, weight, target, bias, ce_weight, *args):
    call, wants = _call(*args[:-1]), tuple(args[-1])
    checks.targets(target, weight.shape[0], call.ignore_index)  # left out while tracing: it reads the targets
    fwd = passes.forward(x, weight, target, bias, ce_weight, call, wants)
    grads = fwd.grads or (None, None, None)
    scales = torch.tensor(fwd.scales, dtype=torch.float64, device=x.device)
    return (fwd.loss, fwd.z_loss, fwd.lse, scales, *(_or_empty(g, x) for g in grads))


def _forward_fake(x, weight, target, bias, ce_weight, *args):
    call, wants = _call(*args[:-1]), tuple(args[-1])
    st = stat_dtype(call.compute_dtype)
    n, (v, h) = x.shape[0], weight.shape
    made = passes.makes_grads_in_forward(call, wants)
    reduced = (n,) if call.reduction == "none" else ()

    def grad(want: bool, shape, dtype):
        return x.new_empty(shape if made and want else (0,), dtype=dtype)

    return (
        x.new_empty(reduced, dtype=st),
        x.new_empty(reduced, dtype=st),
        x.new_empty((n,), dtype=st),
        x.new_empty((2,), dtype=torch.float64),
        grad(wants[0], (n, h), x.dtype),
        grad(wants[1], (v, h), call.accum_dtype),
        grad(wants[2] and bias is not None, (v,), call.accum_dtype),
    )


_forward_op = torch.library.custom_op(
    f"tileport::{OP}_fwd",
    _forward,
    mutates_args=(),
    schema=f"({_INPUTS}, {_SETTINGS}) -> (Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor)",
)
_forward_op.register_fake(_forward_fake)


def _backward(dloss, dz_loss, x, weight, target, bias, ce_weight, lse, scales, gi, gw, gb, *args):
    call, wants = _call(*args[:-1]), tuple(args[-1])
    # the z-loss's gradient adds nothing where its scale is 0, or where it is 0 (an unused z_loss output)
    dz = dz_loss if call.lse_square_scale and bool(dz_loss.any()) else None
    if passes.makes_grads_in_forward(call, wants) and dz is None:
        g = float(dloss)
        grad_input = gi * g if wants[0] else None
        acc_w, acc_b = (gw if wants[1] else None), (gb if wants[2] and bias is not None else None)
        grad_weight = None if acc_w is None else (acc_w * g).to(weight.dtype)
        grad_bias = None if acc_b is None else (acc_b * g).to(bias.dtype)
    else:
        a, b = scales.tolist()
        res = passes.recompute(x, weight, target, bias, ce_weight, call, wants, (a, b), lse, dloss, dz)
        grad_input = res.grad_input
        grad_weight = None if res.grad_weight is None else chunks.narrowed(res.grad_weight, weight.dtype)
        grad_bias = None if res.grad_bias is None else chunks.narrowed(res.grad_bias, bias.dtype)
    return tuple(_or_empty(t, x) for t in (grad_input, grad_weight, grad_bias))


def _backward_fake(dloss, dz_loss, x, weight, target, bias, ce_weight, lse, scales, gi, gw, gb, *args):
    wants = tuple(args[-1])
    return (
        x.new_empty(x.shape if wants[0] else (0,)),
        weight.new_empty(weight.shape if wants[1] else (0,)),
        x.new_empty((0,)) if bias is None or not wants[2] else bias.new_empty(bias.shape),
    )


_backward_op = torch.library.custom_op(
    f"tileport::{OP}_bwd",
    _backward,
    mutates_args=(),
    schema=(
        f"(Tensor dloss, Tensor dz_loss, {_INPUTS}, Tensor lse, Tensor scales, Tensor gi, Tensor gw, Tensor gb, "
        f"{_SETTINGS}) -> (Tensor, Tensor, Tensor)"
    ),
)
_backward_op.register_fake(_backward_fake)


class _Traced(torch.autograd.Function):
    """(x [N, H], weight [V, H], target [N], bias, ce_weight, settings) -> (loss, z_loss), both passes custom ops."""

    @staticmethod
    def forward(ctx, x, weight, target, bias, ce_weight, args):
        loss, z_loss, lse, scales, gi, gw, gb = _forward_op(x, weight, target, bias, ce_weight, *args)
        ctx.save_for_backward(x, weight, target, bias, ce_weight, lse, scales, gi, gw, gb)
        ctx.args = args
        return loss, z_loss

    @staticmethod
    def backward(ctx, dloss, dz_loss):
        saved = ctx.saved_tensors
        gi, gw, gb = _backward_op(dloss, dz_loss, *saved, *ctx.args)
        wants, has_bias = ctx.args[-1], saved[3] is not None
        return (
            (gi if wants[0] else None),
            (gw if wants[1] else None),
            None,
            (gb if wants[2] and has_bias else None),
            None,
            None,
        )


def apply(x, weight, target, bias, ce_weight, call: checks.Call, wants: tuple[bool, bool, bool]):
    """(loss, z_loss) of the rows, as the eager Function returns them, through the custom ops."""
    return _Traced.apply(x, weight, target, bias, ce_weight, settings(call, wants))
