"""The interface of add_rms_norm, generated from its spec by `tileport generate`.
Do not edit: change the spec and regenerate."""

# ruff: noqa
# fmt: off
import torch

from tileport.backends.registry import REGISTRY
from tileport.ops import _checks as _c
from tileport.ops.interface import runtime as _rt
from .spec import SPEC

OP = 'add_rms_norm'
_TO_GRADS = SPEC.backward.to_grads
_DEFAULT_weight = None
_DEFAULT_eps = 1e-06
_DEFAULT_offset = 0.0
_DEFAULT_residual_dtype = None
_DEFAULT_output_dtype = None
_DEFAULT_backend = None
_BWD_DEFAULT_weight = None
_BWD_DEFAULT_dresidual_out = None
_BWD_DEFAULT_offset = 0.0
_BWD_DEFAULT_eps = 1e-06
_BWD_DEFAULT_backend = None


def _forward_impl(x, residual, weight, eps, offset, residual_dtype, output_dtype, backend, out=None):
    impl = REGISTRY.kernels(OP, x.device, (x.dtype, residual.dtype, residual_dtype, output_dtype,) + (() if weight is None else (weight.dtype,)), backend)
    if x.numel() == 0:
        return _rt.empty_forward(SPEC, x, {'eps': eps, 'offset': offset, 'residual_dtype': residual_dtype, 'output_dtype': output_dtype}, out)
    if out is None:
        y, residual_out, rstd = impl.forward(_rt.rows_2d(x), _rt.rows_2d(residual), weight, eps, offset, residual_dtype, output_dtype)
        if x.dim() == 2:
            return (y, residual_out, rstd)
        return (y.view(*x.shape), residual_out.view(*x.shape), rstd.view(x.shape[:-1]))
    impl.forward(_rt.rows_2d(x), _rt.rows_2d(residual), weight, eps, offset, residual_dtype, output_dtype, out=out if x.dim() == 2 else (out[0].view(-1, x.shape[-1]), out[1].view(-1, x.shape[-1]), out[2].view(-1),))  # checked: (M, D), (M,)
    return out


def _backward_impl(residual_out, rstd, dy, dresidual_out, weight, offset, eps, backend):
    impl = REGISTRY.kernels(OP, residual_out.device, (residual_out.dtype, dy.dtype,) + (() if dresidual_out is None else (dresidual_out.dtype,)) + (() if weight is None else (weight.dtype,)), backend)
    if residual_out.numel() == 0:
        return _rt.backward_results(SPEC, residual_out, {'residual_out': residual_out, 'rstd': rstd, 'dy': dy, 'dresidual_out': dresidual_out, 'weight': weight}, True)
    dsum, dweight = impl.backward(_rt.rows_2d(residual_out), rstd.reshape(-1), _rt.rows_2d(dy), (None if dresidual_out is None else _rt.rows_2d(dresidual_out)), weight, offset, eps)
    if residual_out.dim() != 2:
        dsum = dsum.view(*residual_out.shape)
    return (dsum, (residual_out.new_empty(0) if dweight is None else dweight.to(weight.dtype)))


def _fwd_op(x, residual, weight, eps, offset, residual_dtype, output_dtype, backend):
    return _forward_impl(x, residual, weight, eps, offset, (residual_dtype if residual_dtype is not None else x.dtype), (output_dtype if output_dtype is not None else x.dtype), backend)


def _fwd_fake(x, residual, weight, eps, offset, residual_dtype, output_dtype, backend):
    return _rt.new_outputs(SPEC, x, {'residual_dtype': residual_dtype, 'output_dtype': output_dtype})


_fwd_custom = torch.library.custom_op("tileport::add_rms_norm_fwd", _fwd_op, mutates_args=(), schema='(Tensor x, Tensor residual, Tensor? weight, float eps, float offset, ScalarType? residual_dtype, ScalarType? output_dtype, str? backend) -> (Tensor, Tensor, Tensor)')
_fwd_custom.register_fake(_fwd_fake)


def _bwd_op(residual_out, rstd, dy, dresidual_out, weight, offset, eps, backend):
    return _backward_impl(residual_out, rstd, dy, dresidual_out, weight, offset, eps, backend)


def _bwd_fake(residual_out, rstd, dy, dresidual_out, weight, offset, eps, backend):
    return _rt.backward_results(SPEC, residual_out, {'residual_out': residual_out, 'rstd': rstd, 'dy': dy, 'dresidual_out': dresidual_out, 'weight': weight}, False)


_bwd_custom = torch.library.custom_op("tileport::add_rms_norm_bwd", _bwd_op, mutates_args=(), schema='(Tensor residual_out, Tensor rstd, Tensor dy, Tensor? dresidual_out, Tensor? weight, float offset, float eps, str? backend) -> (Tensor, Tensor)')
_bwd_custom.register_fake(_bwd_fake)


def _fwd(x, residual, weight, eps, offset, residual_dtype, output_dtype, backend):
    if torch.compiler.is_compiling():
        return _fwd_custom(x, residual, weight, eps, offset, residual_dtype, output_dtype, backend)
    return _forward_impl(x, residual, weight, eps, offset, residual_dtype, output_dtype, backend)


def _bwd(residual_out, rstd, dy, dresidual_out, weight, offset, eps, backend):
    if torch.compiler.is_compiling():
        return _bwd_custom(residual_out, rstd, dy, dresidual_out, weight, offset, eps, backend)
    return _backward_impl(residual_out, rstd, dy, dresidual_out, weight, offset, eps, backend)


class _Function(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, residual, weight, eps, offset, residual_dtype, output_dtype, backend):
        y, residual_out, rstd = _fwd(x, residual, weight, eps, offset, residual_dtype, output_dtype, backend)
        ctx.save_for_backward(residual_out, rstd, weight)
        ctx.options = (offset, eps, backend,)
        ctx.dtypes = (None if x is None else x.dtype, None if residual is None else residual.dtype, None if weight is None else weight.dtype,)
        ctx.mark_non_differentiable(rstd)
        return (y, residual_out, rstd)

    @staticmethod
    def backward(ctx, dy, dresidual_out, drstd):
        residual_out, rstd, weight = ctx.saved_tensors
        offset, eps, backend = ctx.options
        dsum, dweight = _bwd(residual_out, rstd, dy, dresidual_out, weight, offset, eps, backend)
        need = ctx.needs_input_grad
        g = _TO_GRADS({'dsum': dsum, 'dweight': dweight}, dict(zip(('x', 'residual', 'weight'), ctx.dtypes)))
        return (g.get('dx') if need[0] else None), (g.get('dresidual') if need[1] else None), (g.get('dweight') if need[2] and weight is not None else None), None, None, None, None, None


def add_rms_norm(x, residual, weight=_DEFAULT_weight, eps=_DEFAULT_eps, *, offset=_DEFAULT_offset, residual_dtype=_DEFAULT_residual_dtype, output_dtype=_DEFAULT_output_dtype, backend=_DEFAULT_backend):
    _c.floating_tensor(x, 'x')
    _c.like_rows(residual, 'residual', x, 'x')
    _c.vector_tensor(weight, 'weight', x)
    eps = _c.eps_value(eps, 'eps')
    offset = _c.finite_real(offset, 'offset')
    residual_dtype = _c.output_dtype(residual_dtype, x.dtype, 'residual_dtype')
    output_dtype = _c.output_dtype(output_dtype, x.dtype, 'output_dtype')
    if not ((x.requires_grad or residual.requires_grad or (weight is not None and weight.requires_grad)) and torch.is_grad_enabled()):
        return _fwd(x, residual, weight, eps, offset, residual_dtype, output_dtype, backend)[:2]  # no graph to record: skip Function.apply
    return _Function.apply(x, residual, weight, eps, offset, residual_dtype, output_dtype, backend)[:2]


def add_rms_norm_fwd(x, residual, weight=_DEFAULT_weight, eps=_DEFAULT_eps, *, offset=_DEFAULT_offset, residual_dtype=_DEFAULT_residual_dtype, output_dtype=_DEFAULT_output_dtype, backend=_DEFAULT_backend):
    _c.floating_tensor(x, 'x')
    _c.like_rows(residual, 'residual', x, 'x')
    _c.vector_tensor(weight, 'weight', x)
    eps = _c.eps_value(eps, 'eps')
    offset = _c.finite_real(offset, 'offset')
    residual_dtype = _c.output_dtype(residual_dtype, x.dtype, 'residual_dtype')
    output_dtype = _c.output_dtype(output_dtype, x.dtype, 'output_dtype')
    return _fwd(x, residual, weight, eps, offset, residual_dtype, output_dtype, backend)


def add_rms_norm_bwd(residual_out, rstd, dy, weight=_BWD_DEFAULT_weight, *, dresidual_out=_BWD_DEFAULT_dresidual_out, offset=_BWD_DEFAULT_offset, eps=_BWD_DEFAULT_eps, backend=_BWD_DEFAULT_backend):
    _c.floating_tensor(residual_out, 'residual_out')
    _c.per_row_tensor(rstd, 'rstd', residual_out, 'residual_out')
    _c.like_rows(dy, 'dy', residual_out, 'residual_out')
    if dresidual_out is not None:
        _c.like_rows(dresidual_out, 'dresidual_out', residual_out, 'residual_out')
    _c.vector_tensor(weight, 'weight', residual_out)
    offset = _c.finite_real(offset, 'offset')
    eps = _c.eps_value(eps, 'eps')
    dsum, dweight = _bwd(residual_out, rstd, dy, dresidual_out, weight, offset, eps, backend)
    return (dsum, (dweight if weight is not None else None))


class _Module(torch.nn.Module):
    def __init__(self, hidden_size, eps=_DEFAULT_eps, offset=_DEFAULT_offset, residual_dtype=_DEFAULT_residual_dtype, output_dtype=_DEFAULT_output_dtype, elementwise_affine=True, backend=None, device=None, dtype=None):
        super().__init__()
        self.hidden_size = _c.integer(hidden_size, 'hidden_size')
        eps = _c.eps_value(eps, 'eps')
        self.eps = eps
        offset = _c.finite_real(offset, 'offset')
        self.offset = offset
        residual_dtype = _c.output_dtype(residual_dtype, None, 'residual_dtype')
        self.residual_dtype = residual_dtype
        output_dtype = _c.output_dtype(output_dtype, None, 'output_dtype')
        self.output_dtype = output_dtype
        self.backend = backend
        if elementwise_affine:
            self.weight = torch.nn.Parameter(torch.full((hidden_size,), 1.0, device=device, dtype=dtype))
        else:
            self.register_parameter('weight', None)

    def forward(self, x, residual):
        return add_rms_norm(x, residual, weight=self.weight, eps=self.eps, offset=self.offset, residual_dtype=self.residual_dtype, output_dtype=self.output_dtype, backend=self.backend)

    def extra_repr(self):
        return ', '.join([str(self.hidden_size), f'eps={self.eps}', f'offset={self.offset}', f'residual_dtype={self.residual_dtype}', f'output_dtype={self.output_dtype}'])


_forward_tuple = add_rms_norm_fwd
