"""The training path of class-index targets: the kernel's forward computes the loss and, in the same pass, the
gradient already scaled by the reduction (Liger-Kernel's scheme), into a new tensor or over the logits
(``inplace``); the backward only multiplies it by the loss' gradient. Custom ops under torch.compile (the
reduction's scales, which read the targets, are taken inside them), the kernel called directly in eager mode."""

from __future__ import annotations

import torch

from ...backends.registry import REGISTRY
from ...dtypes import stat_dtype
from ..interface import runtime
from .spec import SPEC

OP = SPEC.name
REDUCTIONS = ("none", "sum", "mean")


def valid_weights(target: torch.Tensor, weight, ignore_index: int, dtype: torch.dtype) -> torch.Tensor:
    """Each row's target weight ``w_t`` (1 without weight), 0 where the target is ignored, in ``dtype``."""
    valid = target != ignore_index
    if weight is None:
        return valid.to(dtype)
    return torch.where(valid, weight.to(dtype)[torch.where(valid, target, 0).long()], 0)


def denominators(target, weight, ignore_index: int, reduction: str, dtype) -> torch.Tensor:
    """``[ce, z]``: what "mean" divides the cross-entropy term by (the valid targets' weights, torch's) and the
    z-loss by (the count of valid targets); ones for "sum" and "none"."""
    if reduction != "mean":
        return torch.ones(2, dtype=dtype, device=target.device)
    ce = valid_weights(target, weight, ignore_index, dtype).sum()
    return torch.stack((ce, (target != ignore_index).sum().to(dtype)))


def _checked_denominators(x, target, weight, ignore_index: int, reduction: str, dtype: torch.dtype) -> torch.Tensor:
    """The denominators as a custom op's body: the targets in [0, C) or ignore_index first (IndexError naming the
    first other; skipped while torch.compile traces the call, as it reads the data). The fused ops take its result,
    so it runs before them: they need no check of their own."""
    attrs = {"ignore_index": ignore_index, "label_smoothing": 0.0, "lse_square_scale": 0.0, "softcap": 0.0}
    # the weight is not read by the check (an fp32 one beside 16-bit logits is not the declaration's dtype)
    runtime.check_values(SPEC.api.namespace["_FORWARD"], {"input": x, "target": target, "weight": None}, attrs)
    return denominators(target, weight, ignore_index, reduction, dtype)


def _denominators_fake(x, target, weight, ignore_index, reduction, dtype):
    return target.new_empty(2, dtype=dtype)


_denominators_op = torch.library.custom_op(
    f"tileport::{OP}_denominators",
    _checked_denominators,
    mutates_args=(),
    schema="(Tensor x, Tensor target, Tensor? weight, int ignore_index, str reduction, ScalarType dtype) -> Tensor",
)
_denominators_op.register_fake(_denominators_fake)


def denominators_of(x, target, weight, ignore_index: int, reduction: str, dtype) -> torch.Tensor:
    """``denominators`` of the rows ``x``'s targets; under torch.compile a custom op that checks the targets'
    range first (the mean's gather of the class weights would otherwise meet an out-of-range target first)."""
    if torch.compiler.is_compiling():
        return _denominators_op(x, target, weight, ignore_index, reduction, dtype)
    return denominators(target, weight, ignore_index, reduction, dtype)


def scales(den: torch.Tensor) -> tuple[float, float]:
    """The kernel's gradient scales ``(a, b) = 1 / denominators`` as floats; 0 for a zero denominator (every
    target ignored: every gradient row is 0 anyway, as torch's)."""
    return tuple(0.0 if d == 0 else 1.0 / d for d in den.double().tolist())


def _rows(x, target, weight, ignore_index, label_smoothing, lse_square_scale, softcap, den, backend, grad):
    if x.numel() == 0:  # no rows: nothing to compute (C >= 1 is checked before)
        stat = stat_dtype(x.dtype)
        return tuple(torch.empty(x.shape[0], dtype=stat, device=x.device) for _ in range(3))
    impl = REGISTRY.kernels(OP, x.device, (x.dtype,), backend)
    return impl.forward(
        x, target, weight, ignore_index, label_smoothing, lse_square_scale, softcap, grad=grad, scales=scales(den)
    )


def _fused(x, target, weight, ignore_index, label_smoothing, lse_square_scale, softcap, den, backend):
    """(loss, z_loss, lse, grad): the rows' results and the scaled gradient in a new ``[N, C]`` tensor."""
    grad = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    out = _rows(x, target, weight, ignore_index, label_smoothing, lse_square_scale, softcap, den, backend, grad)
    return (*out, grad)


def _fused_fake(x, target, weight, ignore_index, label_smoothing, lse_square_scale, softcap, den, backend):
    stat = stat_dtype(x.dtype)
    return (*(x.new_empty(x.shape[0], dtype=stat) for _ in range(3)), x.new_empty(x.shape))


def _inplace(x, target, weight, ignore_index, label_smoothing, lse_square_scale, softcap, den, backend):
    """(loss, z_loss, lse), the scaled gradient written over ``x``."""
    return _rows(x, target, weight, ignore_index, label_smoothing, lse_square_scale, softcap, den, backend, x)


def _inplace_fake(x, target, weight, ignore_index, label_smoothing, lse_square_scale, softcap, den, backend):
    return tuple(x.new_empty(x.shape[0], dtype=stat_dtype(x.dtype)) for _ in range(3))


_ARGS = (
    "Tensor target, Tensor? weight, int ignore_index, float label_smoothing, float lse_square_scale, "
    "float softcap, Tensor den, str? backend"
)
_fused_op = torch.library.custom_op(
    f"tileport::{OP}_fused",
    _fused,
    mutates_args=(),
    schema=f"(Tensor x, {_ARGS}) -> (Tensor, Tensor, Tensor, Tensor)",
)
_fused_op.register_fake(_fused_fake)
_inplace_op = torch.library.custom_op(
    f"tileport::{OP}_fused_inplace",
    _inplace,
    mutates_args=("x",),
    schema=f"(Tensor(a!) x, {_ARGS}) -> (Tensor, Tensor, Tensor)",
)
_inplace_op.register_fake(_inplace_fake)


def forward_with_grad(
    x, target, weight, ignore_index, label_smoothing, lse_square_scale, softcap, den, backend, inplace: bool
):
    """(loss, z_loss, lse, grad) of rows ``x [N, C]``: ``grad`` is ``x`` itself where ``inplace``."""
    args = (target, weight, ignore_index, label_smoothing, lse_square_scale, softcap, den, backend)
    compiling = torch.compiler.is_compiling()
    if inplace:
        return (*(_inplace_op(x, *args) if compiling else _inplace(x, *args)), x)
    return _fused_op(x, *args) if compiling else _fused(x, *args)
