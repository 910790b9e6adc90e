"""add_rms_norm: the interface layer (checks, dispatch, custom ops, autograd, module) of a transformer block's
fused residual add + RMSNorm.

Contract (stated once here; flash-linear-attention's ``RMSNorm(prenorm=True)`` and vLLM's fused_add_rms_norm
semantics):
- ``residual_out = x + residual``, added in fp32 (fp64 for fp64) and rounded once to ``residual_dtype``
  (default x's dtype; ``torch.float32`` is flash-linear-attention's ``residual_in_fp32``). Then, over the last
  dimension of ``residual_out`` as stored: ``rstd = 1 / sqrt(mean(residual_out^2, -1) + eps)``,
  ``y = residual_out * rstd * (weight + offset)`` in fp32, rounded to ``output_dtype`` (default x's dtype);
  ``weight=None`` means no scale. ``rstd`` has shape ``x.shape[:-1]``, fp32 (fp64 for fp64 inputs).
  ``residual`` has x's shape and any floating dtype; ``eps`` finite and >= 0; ``offset`` finite.
- One kernel reads x and residual once and writes y, residual_out and rstd (the TileLang CPU, Triton and
  TileLang CUDA kernels; on Ascend an add kernel, then rms_norm's).
- Backward: with ``g = dy * (weight + offset)`` and ``n = residual_out * rstd``, the gradient of the sum is
  ``dsum = round((g - n * mean(g * n)) * rstd) + dresidual_out`` (rms_norm's dx over residual_out, rounded to
  residual_out's dtype, plus the gradient reaching residual_out directly, rounded again: torch's autograd
  order for the unfused add and norm); ``dx = dsum`` in x's dtype and ``dresidual = dsum`` in residual's dtype.
  Why not one rounding: the standard's float64 golden takes residual_out unrounded, so where the two
  gradients cancel, one rounding shows residual_out's rounding as large relative errors the benchmark's
  double rounding hides (fp16 L0: MARE ratio 12-90 on 8 of the first 490 cases, retests failed, though its
  MERE and RMSE were 0.8x the benchmark's). ``dweight = sum over rows of dy * n``, fp32, deterministic, in
  the weight's dtype. The TileLang CPU kernel computes rms_norm's part without cancellation in fp64 (given
  eps, as rms_norm's). Saved for backward: ``residual_out``, ``weight``, ``rstd``.
- Empty inputs give empty outputs (dweight zeros); D = 0 gives rstd nan. Rows holding nan/inf affect only
  their row of y, residual_out and the gradients (and dweight).

Eager calls go straight to the backend; under ``torch.compile`` the custom ops ``tileport::add_rms_norm_fwd``
/ ``tileport::add_rms_norm_bwd`` are called, whose fake implementations give shapes without running.
"""

from __future__ import annotations

import math
from typing import Optional

import torch

from ...backends.registry import REGISTRY
from ...dtypes import stat_dtype
from .. import _checks

OP = "add_rms_norm"
DEFAULT_EPS = 1e-6


def _forward_impl(x, residual, weight, eps, offset, residual_dtype, output_dtype, backend):
    dtypes = tuple(t.dtype for t in (x, residual, weight) if t is not None) + (residual_dtype, output_dtype)
    impl = REGISTRY.kernels(OP, x.device, dtypes, backend)
    if x.numel() == 0:
        y, s = x.new_empty(x.shape, dtype=output_dtype), x.new_empty(x.shape, dtype=residual_dtype)
        return y, s, x.new_full(x.shape[:-1], math.nan, dtype=stat_dtype(x.dtype))
    y, s, rstd = impl.forward(_checks.rows_2d(x), _checks.rows_2d(residual), weight, eps, offset, residual_dtype, output_dtype)
    return (y, s, rstd) if x.dim() == 2 else (y.view(x.shape), s.view(x.shape), rstd.view(x.shape[:-1]))


def _backward_impl(residual_out, rstd, dy, dresidual_out, weight, offset, eps, backend):
    """(dsum in residual_out's dtype, dweight); dweight is an empty tensor without a weight (a custom op
    returns tensors only)."""
    s = residual_out
    dtypes = tuple(t.dtype for t in (s, dy, dresidual_out, weight) if t is not None)
    impl = REGISTRY.kernels(OP, s.device, dtypes, backend)
    if s.numel() == 0:
        dsum = torch.empty_like(s, memory_format=torch.contiguous_format)
        return dsum, (s.new_empty(0) if weight is None else torch.zeros_like(weight))
    dres = None if dresidual_out is None else _checks.rows_2d(dresidual_out)
    dsum, dw = impl.backward(_checks.rows_2d(s), rstd.reshape(-1), _checks.rows_2d(dy), dres, weight, offset, eps)
    dsum = dsum if s.dim() == 2 else dsum.view(s.shape)
    return dsum, (s.new_empty(0) if dw is None else dw.to(weight.dtype))


@torch.library.custom_op("tileport::add_rms_norm_fwd", mutates_args=())
def _fwd_op(
    x: torch.Tensor, residual: torch.Tensor, weight: Optional[torch.Tensor], eps: float, offset: float,
    residual_dtype: torch.dtype, output_dtype: torch.dtype, backend: Optional[str],
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:  # fmt: skip
    return _forward_impl(x, residual, weight, eps, offset, residual_dtype, output_dtype, backend)


@_fwd_op.register_fake
def _(x, residual, weight, eps, offset, residual_dtype, output_dtype, backend):
    return (x.new_empty(x.shape, dtype=output_dtype), x.new_empty(x.shape, dtype=residual_dtype),
            x.new_empty(x.shape[:-1], dtype=stat_dtype(x.dtype)))  # fmt: skip


@torch.library.custom_op("tileport::add_rms_norm_bwd", mutates_args=())
def _bwd_op(
    residual_out: torch.Tensor, rstd: torch.Tensor, dy: torch.Tensor, dresidual_out: Optional[torch.Tensor],
    weight: Optional[torch.Tensor], offset: float, eps: float, backend: Optional[str],
) -> tuple[torch.Tensor, torch.Tensor]:  # fmt: skip
    return _backward_impl(residual_out, rstd, dy, dresidual_out, weight, offset, eps, backend)


@_bwd_op.register_fake
def _(residual_out, rstd, dy, dresidual_out, weight, offset, eps, backend):
    dw = residual_out.new_empty(0) if weight is None else torch.empty_like(weight)
    return torch.empty_like(residual_out, memory_format=torch.contiguous_format), dw


def _fwd(*args):
    return _fwd_op(*args) if torch.compiler.is_compiling() else _forward_impl(*args)


def _bwd(*args):
    return _bwd_op(*args) if torch.compiler.is_compiling() else _backward_impl(*args)


class _AddRMSNormFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, residual, weight, eps, offset, residual_dtype, output_dtype, backend):
        y, s, rstd = _fwd(x, residual, weight, eps, offset, residual_dtype, output_dtype, backend)
        ctx.save_for_backward(s, weight, rstd)
        ctx.options = (offset, eps, backend, x.dtype, residual.dtype)
        ctx.mark_non_differentiable(rstd)
        return y, s, rstd

    @staticmethod
    def backward(ctx, dy, dres, _drstd):
        s, weight, rstd = ctx.saved_tensors
        offset, eps, backend, x_dtype, r_dtype = ctx.options
        dsum, dw = _bwd(s, rstd, dy, dres, weight, offset, eps, backend)
        dw = dw if weight is not None and ctx.needs_input_grad[2] else None
        return dsum.to(x_dtype), dsum.to(r_dtype), dw, None, None, None, None, None


def _check_forward(x, residual, weight, eps, offset, residual_dtype, output_dtype):
    _checks.floating_tensor(x, "x")
    _checks.like_rows(residual, "residual", x)
    _checks.vector_tensor(weight, "weight", x)
    eps = _checks.eps_value(eps)
    offset = _checks.finite_real(offset, "offset")
    if residual_dtype is not None and not (isinstance(residual_dtype, torch.dtype) and residual_dtype.is_floating_point):
        raise TypeError(f"residual_dtype must be None or a floating torch.dtype, got {residual_dtype!r}")
    return eps, offset, residual_dtype or x.dtype, _checks.output_dtype(output_dtype, x.dtype)


def add_rms_norm_fwd(
    x: torch.Tensor,
    residual: torch.Tensor,
    weight: torch.Tensor | None = None,
    eps: float = DEFAULT_EPS,
    *,
    offset: float = 0.0,
    residual_dtype: torch.dtype | None = None,
    output_dtype: torch.dtype | None = None,
    backend: str | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(y, residual_out, rstd)`` of the fused add + rms_norm, without autograd (see the module docstring)."""
    args = _check_forward(x, residual, weight, eps, offset, residual_dtype, output_dtype)
    return _fwd(x, residual, weight, *args, backend)


def add_rms_norm_bwd(
    residual_out: torch.Tensor,
    rstd: torch.Tensor,
    dy: torch.Tensor,
    weight: torch.Tensor | None = None,
    *,
    dresidual_out: torch.Tensor | None = None,
    offset: float = 0.0,
    eps: float = DEFAULT_EPS,
    backend: str | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``(dsum, dweight)`` from the forward's ``residual_out`` and ``rstd``, ``dy`` and the gradient reaching
    residual_out directly (None: zero). ``dsum`` (residual_out's dtype) is the gradient of x and of residual:
    ``dx = dsum.to(x.dtype)``, ``dresidual = dsum.to(residual.dtype)``. dweight is None without a weight.
    ``eps``: the forward's (the TileLang CPU kernel uses it to avoid dx's cancellation)."""
    _checks.floating_tensor(residual_out, "residual_out")
    _checks.per_row_tensor(rstd, "rstd", residual_out, "residual_out")
    _checks.like_rows(dy, "dy", residual_out, "residual_out")
    if dresidual_out is not None:
        _checks.like_rows(dresidual_out, "dresidual_out", residual_out, "residual_out")
    _checks.vector_tensor(weight, "weight", residual_out)
    offset = _checks.finite_real(offset, "offset")
    dsum, dw = _bwd(residual_out, rstd, dy, dresidual_out, weight, offset, _checks.eps_value(eps), backend)
    return dsum, (dw if weight is not None else None)


def add_rms_norm(
    x: torch.Tensor,
    residual: torch.Tensor,
    weight: torch.Tensor | None = None,
    eps: float = DEFAULT_EPS,
    *,
    offset: float = 0.0,
    residual_dtype: torch.dtype | None = None,
    output_dtype: torch.dtype | None = None,
    backend: str | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Differentiable ``(y, residual_out)``: ``residual_out = x + residual``, ``y = rms_norm(residual_out)``."""
    args = _check_forward(x, residual, weight, eps, offset, residual_dtype, output_dtype)
    tracked = (x, residual, weight)
    if not (torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in tracked)):
        return _fwd(x, residual, weight, *args, backend)[:2]  # no graph to record: skip Function.apply
    return _AddRMSNormFunction.apply(x, residual, weight, *args, backend)[:2]


class AddRMSNorm(torch.nn.Module):
    """A transformer block's pre-norm with its residual: ``forward(x, residual) -> (y, residual_out)``, as
    flash-linear-attention's ``RMSNorm(prenorm=True)``. ``residual_in_fp32`` keeps the residual stream in fp32.
    The weight starts at ``1 - offset`` (ones; zeros for Gemma's ``offset=1``)."""

    def __init__(
        self,
        hidden_size: int,
        eps: float = DEFAULT_EPS,
        elementwise_affine: bool = True,
        offset: float = 0.0,
        residual_in_fp32: bool = False,
        backend: str | None = None,
        device=None,
        dtype=None,
    ):
        super().__init__()
        if isinstance(hidden_size, bool) or not isinstance(hidden_size, int) or hidden_size < 0:
            raise ValueError(f"hidden_size must be an int >= 0, got {hidden_size!r}")
        self.hidden_size = hidden_size
        self.eps = _checks.eps_value(eps)
        self.offset = _checks.finite_real(offset, "offset")
        self.residual_in_fp32 = bool(residual_in_fp32)
        self.backend = backend
        if elementwise_affine:
            self.weight = torch.nn.Parameter(torch.full((hidden_size,), 1.0 - self.offset, device=device, dtype=dtype))
        else:
            self.register_parameter("weight", None)

    def forward(self, x: torch.Tensor, residual: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        rdt = torch.float32 if self.residual_in_fp32 else None
        return add_rms_norm(x, residual, self.weight, self.eps, offset=self.offset, residual_dtype=rdt, backend=self.backend)

    def extra_repr(self) -> str:
        return (f"{self.hidden_size}, eps={self.eps}, elementwise_affine={self.weight is not None}, "
                f"offset={self.offset}, residual_in_fp32={self.residual_in_fp32}")  # fmt: skip
