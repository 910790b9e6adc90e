"""layer_norm: the interface layer (checks, dispatch, custom ops, autograd, module).

Contract (``torch.nn.functional.layer_norm`` over the last dimension, stated once here):
- Forward over ``x[..., D]``: ``mean = mean(x, -1)``, ``var = mean((x - mean)^2, -1)`` (biased),
  ``rstd = 1 / sqrt(var + eps)``, ``y = (x - mean) * rstd * weight + bias``; ``weight`` / ``bias`` None mean
  no scale / no shift. The variance never comes from ``E[x^2] - mean^2``: rows with a large mean (values near
  1000 with unit spread) keep their spread. Math in fp32 (fp64 for fp64 inputs). ``y`` has ``output_dtype``
  (default x's dtype); ``mean`` and ``rstd`` have shape ``x.shape[:-1]``, fp32 (fp64 for fp64 inputs).
  ``eps`` finite and >= 0.
- Backward from the statistics it is given, with ``xhat = (x - mean) * rstd`` (fp32, recomputed) and
  ``g = dy * weight``; a given fp32 mean that is the row's mean rounded (what the forward saves) stands for
  that exact mean, which a backend may centre on (the TileLang CPU kernels do): ``dx = (g - mean(g) - xhat * mean(g * xhat)) * rstd`` in x's dtype;
  ``dweight = sum over rows of dy * xhat``, ``dbias = sum over rows of dy``, reduced in fp32
  deterministically (the same bits for any thread count) and returned in the weight's and the bias's dtype;
  None for a parameter not given. Saved for backward: ``x``, ``weight``, ``mean``, ``rstd``.
- Empty inputs: no rows gives empty outputs (dweight, dbias zeros); D = 0 gives mean and rstd nan (the mean of
  nothing, as torch's) and empty rows. Rows holding nan/inf affect only their row of y and dx (and the sums); a
  row holding inf has a nan mean, as torch's (its Welford update takes inf - inf).

Eager calls go straight to the backend; under ``torch.compile`` the custom ops ``tileport::layer_norm_fwd`` /
``tileport::layer_norm_bwd`` are called, whose fake implementations give shapes without running.
"""

from __future__ import annotations

import math
from typing import Optional

import torch

from ...backends.registry import REGISTRY
from ...dtypes import stat_dtype
from .. import _checks

OP = "layer_norm"
DEFAULT_EPS = 1e-5


def _dtypes(*tensors) -> tuple[torch.dtype, ...]:
    return tuple(t.dtype for t in tensors if t is not None)


def _forward_impl(x, weight, bias, eps, output_dtype, backend, out=None):
    impl = REGISTRY.kernels(OP, x.device, _dtypes(x, weight, bias) + (output_dtype,), backend)
    rows = x.shape[:-1]
    if out is None:
        if x.numel() == 0:  # no rows, or rows of nothing: the mean of nothing is nan
            nan = x.new_full(rows, math.nan, dtype=stat_dtype(x.dtype))
            return x.new_empty(x.shape, dtype=output_dtype), nan, nan.clone()
        y, mean, rstd = impl.forward(_checks.rows_2d(x), weight, bias, eps, output_dtype)
        return (y, mean, rstd) if x.dim() == 2 else (y.view(x.shape), mean.view(rows), rstd.view(rows))
    y, mean, rstd = out
    if x.numel() == 0:
        mean.fill_(math.nan)
        rstd.fill_(math.nan)
    else:
        impl.forward(_checks.rows_2d(x), weight, bias, eps, output_dtype, out=(y.view(-1, x.shape[-1]), mean.view(-1), rstd.view(-1)))
    return y, mean, rstd


def _backward_impl(x, mean, rstd, dy, weight, bias, backend):
    """(dx, dweight, dbias); an absent parameter's gradient is an empty tensor (custom ops return tensors)."""
    impl = REGISTRY.kernels(OP, x.device, _dtypes(x, dy, weight, bias), backend)
    if x.numel() == 0:
        dx = torch.empty_like(x, memory_format=torch.contiguous_format)
        return dx, *(x.new_empty(0) if p is None else torch.zeros_like(p) for p in (weight, bias))
    dx, dw, db = impl.backward(
        _checks.rows_2d(x), mean.reshape(-1), rstd.reshape(-1), _checks.rows_2d(dy), weight, bias is not None
    )
    dx = dx if x.dim() == 2 else dx.view(x.shape)
    grads = (g.to(p.dtype) if p is not None else x.new_empty(0) for p, g in ((weight, dw), (bias, db)))  # no aliasing
    return dx, *grads


@torch.library.custom_op("tileport::layer_norm_fwd", mutates_args=())
def _fwd_op(
    x: torch.Tensor, weight: Optional[torch.Tensor], bias: Optional[torch.Tensor], eps: float,
    output_dtype: Optional[torch.dtype], backend: Optional[str],
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:  # fmt: skip
    return _forward_impl(x, weight, bias, eps, output_dtype or x.dtype, backend)


@_fwd_op.register_fake
def _(x, weight, bias, eps, output_dtype, backend):
    stat = x.new_empty(x.shape[:-1], dtype=stat_dtype(x.dtype))
    return x.new_empty(x.shape, dtype=output_dtype or x.dtype), stat, torch.empty_like(stat)


@torch.library.custom_op("tileport::layer_norm_bwd", mutates_args=())
def _bwd_op(
    x: torch.Tensor, mean: torch.Tensor, rstd: torch.Tensor, dy: torch.Tensor, weight: Optional[torch.Tensor],
    bias: Optional[torch.Tensor], backend: Optional[str],
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:  # fmt: skip
    return _backward_impl(x, mean, rstd, dy, weight, bias, backend)


@_bwd_op.register_fake
def _(x, mean, rstd, dy, weight, bias, backend):
    grads = (x.new_empty(0) if p is None else torch.empty_like(p) for p in (weight, bias))
    return torch.empty_like(x, memory_format=torch.contiguous_format), *grads


def _fwd(x, weight, bias, eps, output_dtype, backend):
    if torch.compiler.is_compiling():
        return _fwd_op(x, weight, bias, eps, output_dtype, backend)
    return _forward_impl(x, weight, bias, eps, output_dtype, backend)


def _bwd(x, mean, rstd, dy, weight, bias, backend):
    if torch.compiler.is_compiling():
        return _bwd_op(x, mean, rstd, dy, weight, bias, backend)
    return _backward_impl(x, mean, rstd, dy, weight, bias, backend)


class _LayerNormFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias, eps, output_dtype, backend):
        y, mean, rstd = _fwd(x, weight, bias, eps, output_dtype, backend)
        ctx.save_for_backward(x, weight, bias, mean, rstd)
        ctx.backend = backend
        ctx.mark_non_differentiable(mean, rstd)
        return y, mean, rstd

    @staticmethod
    def backward(ctx, dy, _dmean, _drstd):
        x, weight, bias, mean, rstd = ctx.saved_tensors
        dx, dw, db = _bwd(x, mean, rstd, dy, weight, bias, ctx.backend)
        need = ctx.needs_input_grad
        return dx, (dw if weight is not None and need[1] else None), (db if bias is not None and need[2] else None), None, None, None


def _check_forward(x, weight, bias, eps, output_dtype):
    _checks.floating_tensor(x, "x")
    _checks.vector_tensor(weight, "weight", x)
    _checks.vector_tensor(bias, "bias", x)
    return _checks.eps_value(eps), _checks.output_dtype(output_dtype, x.dtype)


def layer_norm_fwd(
    x: torch.Tensor,
    weight: torch.Tensor | None = None,
    bias: torch.Tensor | None = None,
    eps: float = DEFAULT_EPS,
    *,
    output_dtype: torch.dtype | None = None,
    backend: str | None = None,
    out: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(y, mean, rstd)`` of layer_norm over the last dimension, without autograd (see the module docstring).

    ``out=(y, mean, rstd)``: contiguous tensors to write into (eager mode only), returned as given.
    """
    eps, out_dtype = _check_forward(x, weight, bias, eps, output_dtype)
    if out is not None:
        if torch.compiler.is_compiling():
            raise NotImplementedError("layer_norm_fwd(out=...) is eager-only; under torch.compile let it allocate")
        if not (isinstance(out, (tuple, list)) and len(out) == 3):
            raise TypeError(f"out must be a (y, mean, rstd) triple of tensors, got {type(out).__name__}")
        stat = stat_dtype(x.dtype)
        _checks.output_tensor(out[0], "out[0] (y)", tuple(x.shape), out_dtype, x.device)
        _checks.output_tensor(out[1], "out[1] (mean)", tuple(x.shape[:-1]), stat, x.device)
        _checks.output_tensor(out[2], "out[2] (rstd)", tuple(x.shape[:-1]), stat, x.device)
        return _forward_impl(x, weight, bias, eps, out_dtype, backend, tuple(out))
    return _fwd(x, weight, bias, eps, out_dtype, backend)


def layer_norm_bwd(
    x: torch.Tensor,
    mean: torch.Tensor,
    rstd: torch.Tensor,
    dy: torch.Tensor,
    weight: torch.Tensor | None = None,
    *,
    bias: torch.Tensor | None = None,
    backend: str | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
    """``(dx, dweight, dbias)`` from the forward's input, the ``mean`` and ``rstd`` it gave, and ``dy``.
    dweight is None without a weight; dbias is None unless the forward's ``bias`` is passed (only its
    presence and dtype are used, as the output mask of torch's ``native_layer_norm_backward``)."""
    _checks.floating_tensor(x, "x")
    _checks.per_row_tensor(mean, "mean", x)
    _checks.per_row_tensor(rstd, "rstd", x)
    _checks.like_rows(dy, "dy", x)
    _checks.vector_tensor(weight, "weight", x)
    _checks.vector_tensor(bias, "bias", x)
    dx, dw, db = _bwd(x, mean, rstd, dy, weight, bias, backend)
    return dx, (dw if weight is not None else None), (db if bias is not None else None)


def layer_norm(
    x: torch.Tensor,
    weight: torch.Tensor | None = None,
    bias: torch.Tensor | None = None,
    eps: float = DEFAULT_EPS,
    *,
    output_dtype: torch.dtype | None = None,
    backend: str | None = None,
) -> torch.Tensor:
    """Differentiable ``y = (x - mean) * rsqrt(var + eps) * weight + bias`` over the last dimension."""
    eps, out_dtype = _check_forward(x, weight, bias, eps, output_dtype)
    params = (x, weight, bias)
    if not (torch.is_grad_enabled() and any(p is not None and p.requires_grad for p in params)):
        return _fwd(x, weight, bias, eps, out_dtype, backend)[0]  # no graph to record: skip Function.apply
    return _LayerNormFunction.apply(x, weight, bias, eps, out_dtype, backend)[0]


class LayerNorm(torch.nn.Module):
    """A drop-in for ``torch.nn.LayerNorm`` over the trailing ``normalized_shape`` dimensions (an int or a
    tuple): weight ones and bias zeros to start, ``bias=False`` for none, ``elementwise_affine=False`` for
    neither."""

    def __init__(
        self,
        normalized_shape: int | tuple[int, ...] | torch.Size,
        eps: float = DEFAULT_EPS,
        elementwise_affine: bool = True,
        bias: bool = True,
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
        self.elementwise_affine = elementwise_affine
        self.backend = backend
        kw = {"device": device, "dtype": dtype}
        for name, present in (("weight", elementwise_affine), ("bias", elementwise_affine and bias)):
            self.register_parameter(name, torch.nn.Parameter(torch.empty(shape, **kw)) if present else None)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        if self.weight is not None:
            torch.nn.init.ones_(self.weight)
        if self.bias is not None:
            torch.nn.init.zeros_(self.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        k = len(self.normalized_shape)
        if not isinstance(x, torch.Tensor) or x.dim() < k or tuple(x.shape[-k:]) != self.normalized_shape:
            got = tuple(x.shape) if isinstance(x, torch.Tensor) else type(x).__name__
            raise ValueError(f"LayerNorm over {self.normalized_shape} expects input of shape [*, {', '.join(map(str, self.normalized_shape))}], got {got}")
        w, b = self.weight, self.bias
        if k == 1:
            return layer_norm(x, w, b, self.eps, backend=self.backend)
        flat = x.reshape(*x.shape[:-k], -1)
        w, b = (None if p is None else p.reshape(-1) for p in (w, b))
        return layer_norm(flat, w, b, self.eps, backend=self.backend).view(x.shape)

    def extra_repr(self) -> str:
        return f"{self.normalized_shape}, eps={self.eps}, elementwise_affine={self.elementwise_affine}"
