"""``tileport.cross_entropy`` and ``tileport.CrossEntropyLoss``: ``torch.nn.functional.cross_entropy``'s semantics
(and Liger-Kernel's z-loss and softcap) over the declared row kernel. Inputs [C], [N, C] and [N, C, d1, ...] are
taken as rows [rows, C] (the class dimension 1 moved last: a view where it has stride 1, else one copy); the
reductions are torch's; in training the kernel's forward also gives the gradient, already scaled by the
reduction, and the backward multiplies it by the loss' gradient."""

from __future__ import annotations

import torch

from ...dtypes import stat_dtype
from .. import _checks as _c
from . import fused, torch_rows
from .spec import IGNORE_INDEX, SPEC

_API = SPEC.api
_check_rows = _API.namespace["_check_forward"]  # the declaration's checks of (input, target, weight) rows
_fwd = _API.namespace["_fwd"]  # its forward after the checks: dispatch, the custom op under torch.compile


def cross_entropy(
    input,
    target,
    weight=None,
    ignore_index=IGNORE_INDEX,
    reduction="mean",
    label_smoothing=0.0,
    *,
    lse_square_scale=0.0,
    softcap=None,
    return_z_loss=False,
    inplace_backward=False,
    backend=None,
):
    """The cross-entropy loss of logits ``input`` against ``target``, as ``torch.nn.functional.cross_entropy``.

    ``input`` [C], [N, C] or [N, C, d1, ...] (classes in dimension 1), fp16 / bf16 / fp32 / fp64; ``target``
    class indices (int64 or int32) of input's shape without dimension 1, each in [0, C) or ``ignore_index``
    (IndexError naming the value and C otherwise), or class probabilities of input's shape (no ignore_index;
    their loss is computed from the kernel's lse by torch in chunks of rows). ``weight``: None or [C] in input's
    dtype or fp32 (Liger-Kernel takes an fp32 weight beside bf16 logits, and its users pass one; torch refuses
    it): an fp32 weight's values enter the fp32 math as they are, never rounded to input's dtype (except in the
    TileLang device kernels, whose weight tiles are in input's dtype). ``reduction``: "none" (per element,
    target's shape), "sum" or "mean" (over the non-ignored targets' weights, torch's; over the rows for
    probabilities; nan where every target is ignored, as torch).
    ``label_smoothing`` in [0, 1], torch's. ``lse_square_scale``: the z-loss ``s * logsumexp^2`` per row, included
    in the loss ("mean" divides it by the count of non-ignored targets); ``return_z_loss=True`` returns
    ``(loss, z_loss)``. ``softcap``: Gemma 2's ``softcap * tanh(logits / softcap)`` first (None or > 0).

    The loss (and z_loss) is in input's dtype; the row statistics in fp32 (fp64 for fp64). The gradient is
    computed in the forward, in input's dtype; with ``inplace_backward=True`` it is written over the input's
    memory (Liger-Kernel's and flash-linear-attention's trick to save the logits' size): the input's values are
    gone after the call (where the class dimension has no stride 1 the rows are a copy and the input is kept), and
    the backward can run once (no ``retain_graph``) and cannot differentiate the returned z_loss."""
    loss, z_loss = _loss(
        input,
        target,
        weight,
        ignore_index,
        reduction,
        label_smoothing,
        lse_square_scale,
        softcap,
        _c.flag(inplace_backward, "inplace_backward"),
        backend,
    )
    return (loss, z_loss) if _c.flag(return_z_loss, "return_z_loss") else loss


class CrossEntropyLoss(torch.nn.Module):
    """``torch.nn.CrossEntropyLoss`` with Liger-Kernel's z-loss and softcap (:func:`cross_entropy`); ``weight`` a
    buffer (it moves with the module). ``forward(input, target)``."""

    def __init__(
        self,
        weight=None,
        ignore_index=IGNORE_INDEX,
        reduction="mean",
        label_smoothing=0.0,
        *,
        lse_square_scale=0.0,
        softcap=None,
        return_z_loss=False,
        backend=None,
    ):
        super().__init__()
        _attrs(ignore_index, reduction, label_smoothing, lse_square_scale, softcap)  # refused at construction
        self.register_buffer("weight", weight)
        self.ignore_index, self.reduction, self.label_smoothing = ignore_index, reduction, label_smoothing
        self.lse_square_scale, self.softcap, self.return_z_loss = lse_square_scale, softcap, return_z_loss
        self.backend = backend

    def forward(self, input, target):
        return cross_entropy(
            input,
            target,
            self.weight,
            self.ignore_index,
            self.reduction,
            self.label_smoothing,
            lse_square_scale=self.lse_square_scale,
            softcap=self.softcap,
            return_z_loss=self.return_z_loss,
            backend=self.backend,
        )

    def extra_repr(self):
        return (
            f"ignore_index={self.ignore_index}, reduction={self.reduction!r}, label_smoothing="
            f"{self.label_smoothing}, lse_square_scale={self.lse_square_scale}, softcap={self.softcap}, "
            f"return_z_loss={self.return_z_loss}"
        )


def _attrs(ignore_index, reduction, label_smoothing, lse_square_scale, softcap):
    """The scalar arguments checked: (ignore_index, label_smoothing, lse_square_scale, softcap as the kernel's
    float, 0.0 for None)."""
    if reduction not in fused.REDUCTIONS:
        raise ValueError(f"{reduction!r} is not a valid value for reduction (one of: none, sum, mean)")
    cap = 0.0
    if softcap is not None:
        cap = _c.finite_real(softcap, "softcap")
        if cap <= 0:
            raise ValueError(f"softcap must be None or > 0, got {softcap!r}")
    return (
        _c.integer(ignore_index, "ignore_index"),
        _c.probability(label_smoothing, "label_smoothing"),
        _c.eps_value(lse_square_scale, "lse_square_scale"),
        cap,
    )


def _rows(t: torch.Tensor) -> torch.Tensor:
    """A [C], [N, C] or [N, C, d...] tensor as rows [rows, C] with stride 1 along C (a copy only where needed)."""
    c = t.shape[0] if t.dim() == 1 else t.shape[1]
    x = t.reshape(1, c) if t.dim() == 1 else t if t.dim() == 2 else t.movedim(1, -1).reshape(-1, c)
    return x if x.stride(-1) == 1 or c <= 1 else x.contiguous()


def _per_element(input: torch.Tensor) -> tuple[int, ...]:
    """The shape of the per-element loss: input's without the class dimension."""
    return () if input.dim() == 1 else (input.shape[0], *input.shape[2:])


def _loss(input, target, weight, ignore_index, reduction, label_smoothing, lse_square_scale, softcap, inplace, backend):
    ignore_index, eps, scale, cap = _attrs(ignore_index, reduction, label_smoothing, lse_square_scale, softcap)
    x, t, probs = _inputs(input, target)
    weight, checked = _weight(weight, x)
    train = input.requires_grad and torch.is_grad_enabled()
    if not probs:  # probabilities: the lse's call checks input and weight
        _check_rows(x, t, checked, ignore_index, eps, scale, cap)
    args = (x, t, weight, ignore_index, eps, scale, cap, reduction, probs, backend)
    if train:
        loss, z_loss = _Loss.apply(*args, inplace)
    else:
        loss, z_loss = _reduce(*_rows_results(*args, grad=None)[:2], _den(*args), reduction)
        loss, z_loss = loss.to(x.dtype), z_loss.to(x.dtype)
    if reduction == "none":
        shape = _per_element(input)
        return loss.view(shape), z_loss.view(shape)
    return loss, z_loss


def _weight(weight, x: torch.Tensor):
    """(the weight the kernels take, the one the declaration's checks see): a weight in x's dtype is both; an
    fp32 one beside other logits is taken as it is (its values unrounded in the fp32 math: Liger-Kernel's users
    pass one with bf16 logits) and checked through its copy in x's dtype (the declaration's rule); another dtype
    is refused by name."""
    if not isinstance(weight, torch.Tensor) or weight.dtype == x.dtype:
        return weight, weight  # None, or what the declaration's checks refuse by name
    if weight.dtype != torch.float32:
        wide = "" if x.dtype == torch.float32 else " or torch.float32"
        raise TypeError(f"weight must have the dtype of input ({x.dtype}){wide}, got {weight.dtype}")
    return weight, weight.to(x.dtype)


def _inputs(input, target) -> tuple[torch.Tensor, torch.Tensor, bool]:
    """(rows of input, the targets as rows, whether they are probabilities); TypeError or ValueError naming what
    is wrong."""
    if not isinstance(input, torch.Tensor) or not input.is_floating_point():
        got = input.dtype if isinstance(input, torch.Tensor) else type(input).__name__
        raise TypeError(f"input must be a floating torch.Tensor (logits), got {got}")
    if input.dim() == 0:
        raise ValueError("input must have at least 1 dimension (the classes: [C], [N, C] or [N, C, d1, ...]), got 0")
    if not isinstance(target, torch.Tensor):
        raise TypeError(f"target must be a torch.Tensor, got {type(target).__name__}")
    if target.is_floating_point():
        if target.shape != input.shape:
            raise ValueError(
                f"target of class probabilities must have input's shape {tuple(input.shape)}, got {tuple(target.shape)}"
            )
        return _rows(input), (target.reshape(1, -1) if target.dim() == 1 else _rows(target)), True
    expected = _per_element(input)
    if tuple(target.shape) != expected:
        raise ValueError(
            f"target of class indices must have shape {expected} (input's {tuple(input.shape)} without "
            f"its class dimension 1), got {tuple(target.shape)}"
        )
    return _rows(input), target.reshape(-1), False


def _den(x, t, weight, ignore_index, eps, scale, cap, reduction, probs, backend) -> torch.Tensor:
    """[ce, z] denominators of the reduction (rows for probabilities' "mean")."""
    cdt = stat_dtype(x.dtype)
    if probs:
        n = x.shape[0] if reduction == "mean" else 1
        return torch.full((2,), float(n), dtype=cdt, device=x.device)
    return fused.denominators_of(x, t, weight, ignore_index, reduction, cdt)


def _rows_results(x, t, weight, ignore_index, eps, scale, cap, reduction, probs, backend, grad, den=None):
    """(loss rows, z_loss rows, lse, grad or None) by the kernel (class indices) or the kernel's lse and torch
    (probabilities); ``grad``: None (no gradient), ``"new"`` or ``"inplace"`` (over x)."""
    if probs:
        ignored = torch.full((x.shape[0],), ignore_index, device=x.device)
        checked = _weight(weight, x)[1]  # the lse does not read the weight: the declaration's checks of it
        lse = _API.forward(x, ignored, checked, ignore_index=ignore_index, softcap=cap, backend=backend)[2]
        into = None if grad is None or grad == "inplace" else torch.empty(x.shape, dtype=x.dtype, device=x.device)
        into = x if grad == "inplace" else into
        ab = (1.0, 1.0) if den is None else fused.scales(den)
        loss, z_loss = torch_rows.prob_rows(x, t, weight, eps, scale, cap, lse, ab, into)
        return loss, z_loss, lse, into
    if grad is None:  # checked by the caller
        return (*_fwd(x, t, weight, ignore_index, eps, scale, cap, backend), None)
    return fused.forward_with_grad(x, t, weight, ignore_index, eps, scale, cap, den, backend, grad == "inplace")


def _reduce(loss, z_loss, den, reduction: str):
    """(loss including the z-loss, z_loss) reduced, in the statistics dtype."""
    if reduction == "none":
        return loss + z_loss, z_loss
    z = z_loss.sum() / den[1] if reduction == "mean" else z_loss.sum()
    ce = loss.sum() / den[0] if reduction == "mean" else loss.sum()
    return ce + z, z


class _Loss(torch.autograd.Function):
    """The loss and the gradient the forward computed (scaled by the reduction); the backward multiplies it by the
    loss' gradient (per row for "none") and adds the returned z_loss' own, where it has one."""

    @staticmethod
    def forward(ctx, x, t, weight, ignore_index, eps, scale, cap, reduction, probs, backend, inplace):
        args = (x, t, weight, ignore_index, eps, scale, cap, reduction, probs, backend)
        den = _den(*args)
        loss_r, z_r, lse, grad = _rows_results(*args, grad="inplace" if inplace else "new", den=den)
        loss, z_loss = _reduce(loss_r, z_r, den, reduction)
        ctx.set_materialize_grads(False)
        ctx.save_for_backward(grad, None if inplace else x, t, lse, den)
        ctx.options = (ignore_index, scale, cap, reduction, probs, inplace)
        ctx.spent = False
        return loss.to(x.dtype), z_loss.to(x.dtype)

    @staticmethod
    def backward(ctx, dloss, dz_loss):
        ignore_index, scale, cap, reduction, probs, inplace = ctx.options
        if inplace and ctx.spent:
            raise RuntimeError(
                "cross_entropy(inplace_backward=True): the backward can run once (the gradient the "
                "forward wrote over the input is scaled in place); retain_graph is not supported"
            )
        grad, x, t, lse, den = ctx.saved_tensors
        dx = None
        if dloss is not None:
            g = dloss.reshape(-1, 1) if reduction == "none" else dloss
            dx = grad.mul_(g) if inplace else grad * g
            ctx.spent = True
        if dz_loss is not None and scale:
            if x is None:
                raise RuntimeError(
                    "cross_entropy(inplace_backward=True) cannot differentiate the returned z_loss: "
                    "the logits it needs were overwritten by the gradient"
                )
            rows = _z_rows(dz_loss, t, den, ignore_index, reduction, probs, x.shape[0], lse.dtype)
            extra = torch_rows.z_loss_grad(x, lse, cap, scale, rows)
            dx = extra if dx is None else dx + extra
        return dx, *([None] * 10)


def _z_rows(dz_loss, t, den, ignore_index, reduction, probs, n, dtype):
    """Each row's factor of its z-loss gradient: the returned z_loss' gradient (per row, or shared and divided by
    the mean's count), 0 on ignored rows."""
    g = dz_loss.reshape(-1).to(dtype) if reduction == "none" else dz_loss.to(dtype).expand(n)
    if reduction == "mean":
        g = g * torch.where(den[1] > 0, 1 / den[1], 0)
    return g if probs else torch.where(t != ignore_index, g, 0)
