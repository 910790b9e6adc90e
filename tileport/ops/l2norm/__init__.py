"""l2norm: the interface layer (checks, dispatch, custom ops, autograd, module).

Contract (flash-linear-attention's l2norm, stated once here):
- Forward over the last dimension of ``x[..., D]``: ``rstd = 1 / sqrt(sum(x^2, -1) + eps)``, ``y = x * rstd``.
  Math in fp32 (fp64 for fp64 inputs). ``y`` has ``output_dtype`` (default x's dtype); ``rstd`` has shape
  ``x.shape[:-1]`` and dtype fp32 (fp64 for fp64 inputs). eps (default 1e-6) is added to the sum of squares.
- Backward: ``dx = dy * rstd - sum(dy * y, -1) * y * rstd`` in fp32, returned in x's dtype. Saved for backward:
  ``x`` and ``rstd``; ``y`` is recomputed in fp32 inside the backward kernel (a y saved in fp16/bf16 fails the
  dual-benchmark max-relative-error ratio where dx is near zero). Given the forward's ``eps`` (autograd gives it),
  a backend with the precision for it computes the same dx without the cancellation of ``1 - y^2`` where
  ``sum(x^2) >> eps``: ``dx = rstd * (dy - x * sum(x * dy) / (sum(x^2) + eps))`` (TileLang CPU, in fp64);
  the fp32 backends (torch, Triton, TileLang CUDA/Ascend) keep the fp32 form, whose dx component along x is
  then rounding noise.
- Empty inputs give empty outputs; D = 0 gives rstd = 1 / sqrt(eps). Rows holding nan/inf affect only that row.

Eager calls go straight to the backend (a ``torch.library`` custom-op call costs about as much as the
whole small-shape composite); under ``torch.compile`` the same functions are reached through the custom ops
``tileport::l2norm_fwd`` / ``tileport::l2norm_bwd``, whose fake implementations give shapes without running.
"""

from __future__ import annotations

import math
from typing import Optional

import torch

from ...backends.registry import REGISTRY
from .. import _checks

OP = "l2norm"
DEFAULT_EPS = 1e-6


def _rstd_dtype(x_dtype: torch.dtype) -> torch.dtype:
    return torch.float64 if x_dtype == torch.float64 else torch.float32


def _empty_forward(x: torch.Tensor, eps: float, output_dtype: torch.dtype, out=None):
    """Empty inputs, answered here for every backend: M = 0 gives empty outputs; D = 0 (an empty row, sum 0)
    gives rstd = 1 / sqrt(eps) (inf for eps = 0). Backends only ever see non-empty rows."""
    if out is None:
        out = (x.new_empty(x.shape, dtype=output_dtype), x.new_empty(x.shape[:-1], dtype=_rstd_dtype(x.dtype)))
    out[1].fill_(eps**-0.5 if eps > 0 else math.inf)
    return out


def _forward_impl(x: torch.Tensor, eps: float, output_dtype: torch.dtype, backend: Optional[str], out=None):
    impl = REGISTRY.kernels(OP, x.device, (x.dtype, output_dtype), backend)
    if x.numel() == 0:
        return _empty_forward(x, eps, output_dtype, out)
    if out is not None:
        y, rstd = out
        impl.forward(_checks.rows_2d(x), eps, output_dtype, out=(y.view(-1, x.shape[-1]), rstd.view(-1)))
        return y, rstd
    y, rstd = impl.forward(_checks.rows_2d(x), eps, output_dtype)
    if x.dim() == 2:
        return y, rstd
    return y.view(x.shape), rstd.view(x.shape[:-1])


def _backward_impl(x: torch.Tensor, rstd: torch.Tensor, dy: torch.Tensor, backend: Optional[str], eps: Optional[float]):
    impl = REGISTRY.kernels(OP, x.device, (x.dtype, dy.dtype), backend)
    if x.numel() == 0:
        return torch.empty_like(x, memory_format=torch.contiguous_format)
    dx = impl.backward(_checks.rows_2d(x), rstd.reshape(-1), _checks.rows_2d(dy), eps)
    return dx if x.dim() == 2 else dx.view(x.shape)


@torch.library.custom_op("tileport::l2norm_fwd", mutates_args=())
def _l2norm_fwd_op(
    x: torch.Tensor, eps: float, output_dtype: Optional[torch.dtype], backend: Optional[str]
) -> tuple[torch.Tensor, torch.Tensor]:
    return _forward_impl(x, eps, output_dtype or x.dtype, backend)


@_l2norm_fwd_op.register_fake
def _(x, eps, output_dtype, backend):
    y = x.new_empty(x.shape, dtype=output_dtype or x.dtype)
    return y, x.new_empty(x.shape[:-1], dtype=_rstd_dtype(x.dtype))


@torch.library.custom_op("tileport::l2norm_bwd", mutates_args=())
def _l2norm_bwd_op(
    x: torch.Tensor, rstd: torch.Tensor, dy: torch.Tensor, backend: Optional[str], eps: Optional[float]
) -> torch.Tensor:
    return _backward_impl(x, rstd, dy, backend, eps)


@_l2norm_bwd_op.register_fake
def _(x, rstd, dy, backend, eps):
    return torch.empty_like(x, memory_format=torch.contiguous_format)


def _fwd(x, eps, output_dtype, backend):
    if torch.compiler.is_compiling():
        return _l2norm_fwd_op(x, eps, output_dtype, backend)
    return _forward_impl(x, eps, output_dtype, backend)


def _bwd(x, rstd, dy, backend, eps):
    if torch.compiler.is_compiling():
        return _l2norm_bwd_op(x, rstd, dy, backend, eps)
    return _backward_impl(x, rstd, dy, backend, eps)


class _L2NormFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, eps, output_dtype, backend):
        y, rstd = _fwd(x, eps, output_dtype, backend)
        ctx.save_for_backward(x, rstd)
        ctx.backend, ctx.eps = backend, eps
        ctx.mark_non_differentiable(rstd)
        return y, rstd

    @staticmethod
    def backward(ctx, dy, _drstd):
        x, rstd = ctx.saved_tensors
        return _bwd(x, rstd, dy, ctx.backend, ctx.eps), None, None, None


def _check_forward(x, eps, output_dtype):
    _checks.floating_tensor(x, "x")
    return _checks.eps_value(eps), _checks.output_dtype(output_dtype, x.dtype)


def _check_out(out, x: torch.Tensor, output_dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    if not (isinstance(out, (tuple, list)) and len(out) == 2):
        raise TypeError(f"out must be a (y, rstd) pair of tensors, got {type(out).__name__}")
    y, rstd = out
    _checks.output_tensor(y, "out[0] (y)", tuple(x.shape), output_dtype, x.device)
    _checks.output_tensor(rstd, "out[1] (rstd)", tuple(x.shape[:-1]), _rstd_dtype(x.dtype), x.device)
    return y, rstd


def l2norm_fwd(
    x: torch.Tensor,
    eps: float = DEFAULT_EPS,
    output_dtype: torch.dtype | None = None,
    backend: str | None = None,
    out: tuple[torch.Tensor, torch.Tensor] | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(y, rstd)`` of l2norm over the last dimension, without autograd (see the module docstring).

    ``out=(y, rstd)``: contiguous tensors to write into (no allocation; eager mode only), returned as given.
    """
    eps, out_dtype = _check_forward(x, eps, output_dtype)
    if out is not None:
        if torch.compiler.is_compiling():
            raise NotImplementedError("l2norm_fwd(out=...) is eager-only; under torch.compile let it allocate")
        return _forward_impl(x, eps, out_dtype, backend, _check_out(out, x, out_dtype))
    return _fwd(x, eps, out_dtype, backend)


def l2norm_bwd(
    x: torch.Tensor, rstd: torch.Tensor, dy: torch.Tensor, backend: str | None = None, *, eps: float | None = None
) -> torch.Tensor:
    """``dx`` from the forward's input ``x``, its ``rstd`` and the output gradient ``dy``, in x's dtype.

    ``eps``: the forward's; with it, backends that can avoid the cancellation near ``sum(x^2) >> eps`` do.
    """
    _checks.floating_tensor(x, "x")
    if not isinstance(rstd, torch.Tensor) or not rstd.dtype.is_floating_point:
        raise TypeError(f"rstd must be a floating torch.Tensor, got {getattr(rstd, 'dtype', type(rstd).__name__)}")
    _checks.floating_tensor(dy, "dy")
    if tuple(dy.shape) != tuple(x.shape):
        raise ValueError(f"dy must have x's shape {tuple(x.shape)}, got {tuple(dy.shape)}")
    if tuple(rstd.shape) != tuple(x.shape[:-1]):
        raise ValueError(f"rstd must have shape x.shape[:-1] = {tuple(x.shape[:-1])}, got {tuple(rstd.shape)}")
    _checks.same_device({"x": x, "rstd": rstd, "dy": dy})
    return _bwd(x, rstd, dy, backend, None if eps is None else _checks.eps_value(eps))


def l2norm(
    x: torch.Tensor, eps: float = DEFAULT_EPS, output_dtype: torch.dtype | None = None, backend: str | None = None
) -> torch.Tensor:
    """Differentiable ``y = x / sqrt(sum(x^2, -1) + eps)`` over the last dimension."""
    eps, out = _check_forward(x, eps, output_dtype)
    if not (x.requires_grad and torch.is_grad_enabled()):  # no graph to record: skip Function.apply (~5 us)
        return _fwd(x, eps, out, backend)[0]
    y, _ = _L2NormFunction.apply(x, eps, out, backend)
    return y


class L2Norm(torch.nn.Module):
    """``torch.nn.Module`` form of :func:`l2norm` (no parameters)."""

    def __init__(self, eps: float = DEFAULT_EPS, output_dtype: torch.dtype | None = None, backend: str | None = None):
        super().__init__()
        self.eps = _checks.eps_value(eps)
        self.output_dtype = _checks.output_dtype(output_dtype, default=None)
        self.backend = backend

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return l2norm(x, self.eps, self.output_dtype, self.backend)

    def extra_repr(self) -> str:
        return f"eps={self.eps}, output_dtype={self.output_dtype}"
