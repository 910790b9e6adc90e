"""rms_norm: the interface layer (checks, dispatch, custom ops, autograd, module).

Contract (stated once here; torch.nn.RMSNorm, Liger-Kernel and flash-linear-attention semantics):
- Forward over the last dimension of ``x[..., D]``: ``rstd = 1 / sqrt(mean(x^2, -1) + eps)``,
  ``y = x * rstd * (weight + offset)``; ``weight=None`` means no scale (offset ignored). Math in fp32 (fp64
  for fp64 inputs). ``y`` has ``output_dtype`` (default x's dtype); ``rstd`` has shape ``x.shape[:-1]``, fp32
  (fp64 for fp64 inputs). ``eps`` finite and >= 0; ``offset`` finite (Gemma's ``1 + w`` is ``offset=1``).
- ``casting="fp32"``: everything in fp32, rounded once. ``casting="llama"``: ``x * rstd`` is rounded to x's
  dtype and multiplied by ``weight + offset`` rounded to x's dtype, the product rounded to the output dtype:
  HF LlamaRMSNorm's order, bit for bit with its outputs when the weight, x and the output share a dtype (HF's
  usual case; with an fp32 weight HF promotes the product to fp32 instead).
- Backward, with ``n = x * rstd`` (fp32, recomputed) and ``g = dy * (weight + offset)``:
  ``dx = (g - n * mean(g * n, -1)) * rstd`` in x's dtype; ``dweight = sum over rows of dy * n`` (``n`` rounded
  to x's dtype under "llama"), reduced in fp32 deterministically (the same bits for any thread count) and
  returned in the weight's dtype; None without a weight. Saved for backward: ``x``, ``weight``, ``rstd``.
  Given the forward's ``eps`` (autograd gives it), a backend with the precision for it computes the same dx
  without the cancellation of ``g - n * mean(g * n)``: ``dx = rstd * (D * eps * g + sum(x^2) * g - x *
  sum(g * x)) / (sum(x^2) + D * eps)`` (TileLang CPU, in fp64); the fp32 backends keep the form above. There
  a given fp32 rstd that is the row's rstd rounded (what the forward saves) stands for that exact value,
  which such a backend may use in dx and dweight (the TileLang CPU kernels do); any other is used as given.
- Empty inputs: no rows gives empty outputs (dweight zeros); D = 0 gives rstd nan (the mean of nothing, as
  torch's mean) and empty rows. Rows holding nan/inf affect only their row of y and dx (and dweight).

Eager calls go straight to the backend; under ``torch.compile`` the custom ops ``tileport::rms_norm_fwd`` /
``tileport::rms_norm_bwd`` are called, whose fake implementations give shapes without running.
"""

from __future__ import annotations

import math
from typing import Optional

import torch

from ...backends.registry import REGISTRY
from ...dtypes import stat_dtype
from .. import _checks

OP = "rms_norm"
DEFAULT_EPS = 1e-6
CASTINGS = ("fp32", "llama")


def _dtypes(*tensors) -> tuple[torch.dtype, ...]:
    return tuple(t.dtype for t in tensors if t is not None)


def _forward_impl(x, weight, eps, offset, casting, output_dtype, backend, out=None):
    impl = REGISTRY.kernels(OP, x.device, _dtypes(x, weight) + (output_dtype,), backend)
    if out is None:
        if x.numel() == 0:
            y = x.new_empty(x.shape, dtype=output_dtype)
            return y, x.new_full(x.shape[:-1], math.nan, dtype=stat_dtype(x.dtype))
        y, rstd = impl.forward(_checks.rows_2d(x), weight, eps, offset, casting, output_dtype)
        return (y, rstd) if x.dim() == 2 else (y.view(x.shape), rstd.view(x.shape[:-1]))
    y, rstd = out
    if x.numel() == 0:
        rstd.fill_(math.nan)
    else:
        impl.forward(_checks.rows_2d(x), weight, eps, offset, casting, output_dtype, out=(y.view(-1, x.shape[-1]), rstd.view(-1)))
    return y, rstd


def _backward_impl(x, rstd, dy, weight, offset, casting, backend, eps=None):
    """(dx, dweight); dweight is an empty tensor without a weight (a custom op returns tensors only)."""
    impl = REGISTRY.kernels(OP, x.device, _dtypes(x, dy, weight), backend)
    if x.numel() == 0:
        dx = torch.empty_like(x, memory_format=torch.contiguous_format)
        return dx, (x.new_empty(0) if weight is None else torch.zeros_like(weight))
    dx, dw = impl.backward(_checks.rows_2d(x), rstd.reshape(-1), _checks.rows_2d(dy), weight, offset, casting, eps)
    dx = dx if x.dim() == 2 else dx.view(x.shape)
    return dx, (x.new_empty(0) if dw is None else dw.to(weight.dtype))


@torch.library.custom_op("tileport::rms_norm_fwd", mutates_args=())
def _fwd_op(
    x: torch.Tensor, weight: Optional[torch.Tensor], eps: float, offset: float, casting: str,
    output_dtype: Optional[torch.dtype], backend: Optional[str],
) -> tuple[torch.Tensor, torch.Tensor]:  # fmt: skip
    return _forward_impl(x, weight, eps, offset, casting, output_dtype or x.dtype, backend)


@_fwd_op.register_fake
def _(x, weight, eps, offset, casting, output_dtype, backend):
    return x.new_empty(x.shape, dtype=output_dtype or x.dtype), x.new_empty(x.shape[:-1], dtype=stat_dtype(x.dtype))


@torch.library.custom_op("tileport::rms_norm_bwd", mutates_args=())
def _bwd_op(
    x: torch.Tensor, rstd: torch.Tensor, dy: torch.Tensor, weight: Optional[torch.Tensor], offset: float, casting: str,
    backend: Optional[str], eps: Optional[float],
) -> tuple[torch.Tensor, torch.Tensor]:  # fmt: skip
    return _backward_impl(x, rstd, dy, weight, offset, casting, backend, eps)


@_bwd_op.register_fake
def _(x, rstd, dy, weight, offset, casting, backend, eps):
    dw = x.new_empty(0) if weight is None else torch.empty_like(weight)
    return torch.empty_like(x, memory_format=torch.contiguous_format), dw


def _fwd(x, weight, eps, offset, casting, output_dtype, backend):
    if torch.compiler.is_compiling():
        return _fwd_op(x, weight, eps, offset, casting, output_dtype, backend)
    return _forward_impl(x, weight, eps, offset, casting, output_dtype, backend)


def _bwd(x, rstd, dy, weight, offset, casting, backend, eps=None):
    if torch.compiler.is_compiling():
        return _bwd_op(x, rstd, dy, weight, offset, casting, backend, eps)
    return _backward_impl(x, rstd, dy, weight, offset, casting, backend, eps)


class _RMSNormFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, eps, offset, casting, output_dtype, backend):
        y, rstd = _fwd(x, weight, eps, offset, casting, output_dtype, backend)
        ctx.save_for_backward(x, weight, rstd)
        ctx.options = (offset, casting, backend, eps)
        ctx.mark_non_differentiable(rstd)
        return y, rstd

    @staticmethod
    def backward(ctx, dy, _drstd):
        x, weight, rstd = ctx.saved_tensors
        offset, casting, backend, eps = ctx.options
        dx, dw = _bwd(x, rstd, dy, weight, offset, casting, backend, eps)
        return dx, (dw if weight is not None and ctx.needs_input_grad[1] else None), None, None, None, None, None


def _check_forward(x, weight, eps, offset, casting, output_dtype):
    _checks.floating_tensor(x, "x")
    _checks.vector_tensor(weight, "weight", x)
    eps = _checks.eps_value(eps)
    offset = _checks.finite_real(offset, "offset")
    casting = _checks.choice(casting, "casting", CASTINGS)
    return eps, offset, casting, _checks.output_dtype(output_dtype, x.dtype)


def rms_norm_fwd(
    x: torch.Tensor,
    weight: torch.Tensor | None = None,
    eps: float = DEFAULT_EPS,
    *,
    offset: float = 0.0,
    casting: str = "fp32",
    output_dtype: torch.dtype | None = None,
    backend: str | None = None,
    out: tuple[torch.Tensor, torch.Tensor] | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(y, rstd)`` of rms_norm over the last dimension, without autograd (see the module docstring).

    ``out=(y, rstd)``: contiguous tensors to write into (eager mode only), returned as given.
    """
    eps, offset, casting, out_dtype = _check_forward(x, weight, eps, offset, casting, output_dtype)
    if out is not None:
        if torch.compiler.is_compiling():
            raise NotImplementedError("rms_norm_fwd(out=...) is eager-only; under torch.compile let it allocate")
        if not (isinstance(out, (tuple, list)) and len(out) == 2):
            raise TypeError(f"out must be a (y, rstd) pair of tensors, got {type(out).__name__}")
        _checks.output_tensor(out[0], "out[0] (y)", tuple(x.shape), out_dtype, x.device)
        _checks.output_tensor(out[1], "out[1] (rstd)", tuple(x.shape[:-1]), stat_dtype(x.dtype), x.device)
        return _forward_impl(x, weight, eps, offset, casting, out_dtype, backend, tuple(out))
    return _fwd(x, weight, eps, offset, casting, out_dtype, backend)


def rms_norm_bwd(
    x: torch.Tensor,
    rstd: torch.Tensor,
    dy: torch.Tensor,
    weight: torch.Tensor | None = None,
    *,
    offset: float = 0.0,
    casting: str = "fp32",
    backend: str | None = None,
    eps: float | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``(dx, dweight)`` from the forward's input, its ``rstd`` and ``dy``; dweight is None without a weight.
    ``eps``: the forward's; with it, backends that can avoid dx's cancellation do (see the contract)."""
    _checks.floating_tensor(x, "x")
    _checks.per_row_tensor(rstd, "rstd", x)
    _checks.like_rows(dy, "dy", x)
    _checks.vector_tensor(weight, "weight", x)
    offset = _checks.finite_real(offset, "offset")
    casting = _checks.choice(casting, "casting", CASTINGS)
    dx, dw = _bwd(x, rstd, dy, weight, offset, casting, backend, None if eps is None else _checks.eps_value(eps))
    return dx, (dw if weight is not None else None)


def rms_norm(
    x: torch.Tensor,
    weight: torch.Tensor | None = None,
    eps: float = DEFAULT_EPS,
    *,
    offset: float = 0.0,
    casting: str = "fp32",
    output_dtype: torch.dtype | None = None,
    backend: str | None = None,
) -> torch.Tensor:
    """Differentiable ``y = x * rsqrt(mean(x^2, -1) + eps) * (weight + offset)`` over the last dimension."""
    eps, offset, casting, out_dtype = _check_forward(x, weight, eps, offset, casting, output_dtype)
    grad = torch.is_grad_enabled() and (x.requires_grad or (weight is not None and weight.requires_grad))
    if not grad:  # no graph to record: skip Function.apply
        return _fwd(x, weight, eps, offset, casting, out_dtype, backend)[0]
    return _RMSNormFunction.apply(x, weight, eps, offset, casting, out_dtype, backend)[0]


class RMSNorm(torch.nn.Module):
    """A drop-in for ``torch.nn.RMSNorm`` over the trailing ``normalized_shape`` dimensions (an int or a
    tuple), with Gemma's ``offset`` and HF's ``casting``. The weight starts at ``1 - offset``: ones as
    torch's, zeros for Gemma's ``offset=1``, so the initial scale ``weight + offset`` is 1."""

    def __init__(
        self,
        normalized_shape: int | tuple[int, ...] | torch.Size,
        eps: float = DEFAULT_EPS,
        elementwise_affine: bool = True,
        offset: float = 0.0,
        casting: str = "fp32",
        backend: str | None = None,
        device=None,
        dtype=None,
    ):
        super().__init__()
        shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
        if not shape or not all(isinstance(d, int) and d >= 0 for d in shape):
            raise ValueError(f"normalized_shape must be an int or a tuple of ints >= 0, got {normalized_shape!r}")
        self.normalized_shape = shape
        self.eps = _checks.eps_value(eps)
        self.offset = _checks.finite_real(offset, "offset")
        self.casting = _checks.choice(casting, "casting", CASTINGS)
        self.elementwise_affine = elementwise_affine
        self.backend = backend
        if elementwise_affine:
            self.weight = torch.nn.Parameter(torch.empty(shape, device=device, dtype=dtype))
        else:
            self.register_parameter("weight", None)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        if self.weight is not None:
            torch.nn.init.constant_(self.weight, 1.0 - self.offset)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        k = len(self.normalized_shape)
        if not isinstance(x, torch.Tensor) or x.dim() < k or tuple(x.shape[-k:]) != self.normalized_shape:
            got = tuple(x.shape) if isinstance(x, torch.Tensor) else type(x).__name__
            raise ValueError(f"RMSNorm over {self.normalized_shape} expects input of shape [*, {', '.join(map(str, self.normalized_shape))}], got {got}")
        if k == 1:
            return rms_norm(x, self.weight, self.eps, offset=self.offset, casting=self.casting, backend=self.backend)
        flat = x.reshape(*x.shape[:-k], -1)
        w = None if self.weight is None else self.weight.reshape(-1)
        y = rms_norm(flat, w, self.eps, offset=self.offset, casting=self.casting, backend=self.backend)
        return y.view(x.shape)

    def extra_repr(self) -> str:
        return (f"{self.normalized_shape}, eps={self.eps}, elementwise_affine={self.elementwise_affine}, "
                f"offset={self.offset}, casting={self.casting!r}")  # fmt: skip
