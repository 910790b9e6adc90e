"""The interface of rms_norm, generated from its spec by `tileport generate`.
Do not edit: change the spec and regenerate."""

# ruff: noqa
# fmt: off
import torch

from tileport.backends.registry import REGISTRY
from tileport.ops import _checks as _c
from tileport.ops.interface import runtime as _rt
from .spec import SPEC

OP = 'rms_norm'
_DEFAULT_weight = None
_DEFAULT_eps = 1e-06
_DEFAULT_offset = 0.0
_DEFAULT_casting = 'fp32'
_DEFAULT_output_dtype = None
_DEFAULT_backend = None
_CHOICES_casting = ('fp32', 'llama')
_ALIASES_casting = ()
_DEFAULT_out = None
_BWD_DEFAULT_weight = None
_BWD_DEFAULT_offset = 0.0
_BWD_DEFAULT_casting = 'fp32'
_BWD_DEFAULT_backend = None
_BWD_DEFAULT_eps = None


def _forward_impl(x, weight, eps, offset, casting, output_dtype, backend, out=None):
    impl = REGISTRY.kernels(OP, x.device, (x.dtype, output_dtype,) + (() if weight is None else (weight.dtype,)), backend)
    if x.numel() == 0:
        return _rt.empty_forward(SPEC, x, {'eps': eps, 'offset': offset, 'casting': casting, 'output_dtype': output_dtype}, out)
    if out is None:
        y, rstd = impl.forward(_rt.rows_2d(x), weight, eps, offset, casting, output_dtype)
        if x.dim() == 2:
            return (y, rstd)
        return (y.view(*x.shape), rstd.view(x.shape[:-1]))
    impl.forward(_rt.rows_2d(x), weight, eps, offset, casting, output_dtype, out=out if x.dim() == 2 else (out[0].view(-1, x.shape[-1]), out[1].view(-1),))  # checked: (M, D), (M,)
    return out


def _backward_impl(x, rstd, dy, weight, offset, casting, backend, eps):
    impl = REGISTRY.kernels(OP, x.device, (x.dtype, dy.dtype,) + (() if weight is None else (weight.dtype,)), backend)
    if x.numel() == 0:
        return _rt.backward_results(SPEC, x, {'x': x, 'rstd': rstd, 'dy': dy, 'weight': weight}, True)
    dx, dweight = impl.backward(_rt.rows_2d(x), rstd.reshape(-1), _rt.rows_2d(dy), weight, offset, casting, eps)
    if x.dim() != 2:
        dx = dx.view(*x.shape)
    return (dx, (x.new_empty(0) if dweight is None else dweight.to(weight.dtype)))


def _fwd_op(x, weight, eps, offset, casting, output_dtype, backend):
    return _forward_impl(x, weight, eps, offset, casting, (output_dtype if output_dtype is not None else x.dtype), backend)


def _fwd_fake(x, weight, eps, offset, casting, output_dtype, backend):
    return _rt.new_outputs(SPEC, x, {'output_dtype': output_dtype})


_fwd_custom = torch.library.custom_op("tileport::rms_norm_fwd", _fwd_op, mutates_args=(), schema='(Tensor x, Tensor? weight, float eps, float offset, str casting, ScalarType? output_dtype, str? backend) -> (Tensor, Tensor)')
_fwd_custom.register_fake(_fwd_fake)


def _bwd_op(x, rstd, dy, weight, offset, casting, backend, eps):
    return _backward_impl(x, rstd, dy, weight, offset, casting, backend, eps)


def _bwd_fake(x, rstd, dy, weight, offset, casting, backend, eps):
    return _rt.backward_results(SPEC, x, {'x': x, 'rstd': rstd, 'dy': dy, 'weight': weight}, False)


_bwd_custom = torch.library.custom_op("tileport::rms_norm_bwd", _bwd_op, mutates_args=(), schema='(Tensor x, Tensor rstd, Tensor dy, Tensor? weight, float offset, str casting, str? backend, float? eps) -> (Tensor, Tensor)')
_bwd_custom.register_fake(_bwd_fake)


def _fwd(x, weight, eps, offset, casting, output_dtype, backend):
    if torch.compiler.is_compiling():
        return _fwd_custom(x, weight, eps, offset, casting, output_dtype, backend)
    return _forward_impl(x, weight, eps, offset, casting, output_dtype, backend)


def _bwd(x, rstd, dy, weight, offset, casting, backend, eps):
    if torch.compiler.is_compiling():
        return _bwd_custom(x, rstd, dy, weight, offset, casting, backend, eps)
    return _backward_impl(x, rstd, dy, weight, offset, casting, backend, eps)


class _Function(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, eps, offset, casting, output_dtype, backend):
        y, rstd = _fwd(x, weight, eps, offset, casting, output_dtype, backend)
        ctx.save_for_backward(x, rstd, weight)
        ctx.options = (offset, casting, backend, eps,)
        ctx.mark_non_differentiable(rstd)
        return (y, rstd)

    @staticmethod
    def backward(ctx, dy, drstd):
        x, rstd, weight = ctx.saved_tensors
        offset, casting, backend, eps = ctx.options
        dx, dweight = _bwd(x, rstd, dy, weight, offset, casting, backend, eps)
        need = ctx.needs_input_grad
        return (dx if need[0] else None), (dweight if need[1] and weight is not None else None), None, None, None, None, None


def rms_norm(x, weight=_DEFAULT_weight, eps=_DEFAULT_eps, *, offset=_DEFAULT_offset, casting=_DEFAULT_casting, output_dtype=_DEFAULT_output_dtype, backend=_DEFAULT_backend):
    _c.floating_tensor(x, 'x')
    _c.vector_tensor(weight, 'weight', x)
    eps = _c.eps_value(eps, 'eps')
    offset = _c.finite_real(offset, 'offset')
    casting = _c.choice(casting, 'casting', _CHOICES_casting, _ALIASES_casting)
    output_dtype = _c.output_dtype(output_dtype, x.dtype, 'output_dtype')
    if not ((x.requires_grad or (weight is not None and weight.requires_grad)) and torch.is_grad_enabled()):
        return _fwd(x, weight, eps, offset, casting, output_dtype, backend)[0]  # no graph to record: skip Function.apply
    return _Function.apply(x, weight, eps, offset, casting, output_dtype, backend)[0]


def rms_norm_fwd(x, weight=_DEFAULT_weight, eps=_DEFAULT_eps, *, offset=_DEFAULT_offset, casting=_DEFAULT_casting, output_dtype=_DEFAULT_output_dtype, backend=_DEFAULT_backend, out=_DEFAULT_out):
    _c.floating_tensor(x, 'x')
    _c.vector_tensor(weight, 'weight', x)
    eps = _c.eps_value(eps, 'eps')
    offset = _c.finite_real(offset, 'offset')
    casting = _c.choice(casting, 'casting', _CHOICES_casting, _ALIASES_casting)
    output_dtype = _c.output_dtype(output_dtype, x.dtype, 'output_dtype')
    if out is not None:
        out = _rt.check_out(SPEC, 'rms_norm_fwd', out, x, {'output_dtype': output_dtype})
        return _forward_impl(x, weight, eps, offset, casting, output_dtype, backend, out)
    return _fwd(x, weight, eps, offset, casting, output_dtype, backend)


def rms_norm_bwd(x, rstd, dy, weight=_BWD_DEFAULT_weight, *, offset=_BWD_DEFAULT_offset, casting=_BWD_DEFAULT_casting, backend=_BWD_DEFAULT_backend, eps=_BWD_DEFAULT_eps):
    _c.floating_tensor(x, 'x')
    _c.per_row_tensor(rstd, 'rstd', x, 'x')
    _c.like_rows(dy, 'dy', x, 'x')
    _c.vector_tensor(weight, 'weight', x)
    offset = _c.finite_real(offset, 'offset')
    casting = _c.choice(casting, 'casting', _CHOICES_casting, _ALIASES_casting)
    eps = None if eps is None else _c.eps_value(eps, 'eps')
    dx, dweight = _bwd(x, rstd, dy, weight, offset, casting, backend, eps)
    return (dx, (dweight if weight is not None else None))


class _Module(torch.nn.Module):
    def __init__(self, hidden_size, eps=_DEFAULT_eps, offset=_DEFAULT_offset, casting=_DEFAULT_casting, output_dtype=_DEFAULT_output_dtype, elementwise_affine=True, backend=None, device=None, dtype=None):
        super().__init__()
        self.hidden_size = _c.integer(hidden_size, 'hidden_size')
        eps = _c.eps_value(eps, 'eps')
        self.eps = eps
        offset = _c.finite_real(offset, 'offset')
        self.offset = offset
        casting = _c.choice(casting, 'casting', _CHOICES_casting, _ALIASES_casting)
        self.casting = casting
        output_dtype = _c.output_dtype(output_dtype, None, 'output_dtype')
        self.output_dtype = output_dtype
        self.backend = backend
        if elementwise_affine:
            self.weight = torch.nn.Parameter(torch.full((hidden_size,), 1.0, device=device, dtype=dtype))
        else:
            self.register_parameter('weight', None)

    def forward(self, x):
        return rms_norm(x, weight=self.weight, eps=self.eps, offset=self.offset, casting=self.casting, output_dtype=self.output_dtype, backend=self.backend)

    def extra_repr(self):
        return ', '.join([str(self.hidden_size), f'eps={self.eps}', f'offset={self.offset}', f'casting={self.casting!r}', f'output_dtype={self.output_dtype}'])


_forward_tuple = rms_norm_fwd
