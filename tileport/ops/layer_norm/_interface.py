"""The interface of layer_norm, generated from its spec by `tileport generate`.
Do not edit: change the spec and regenerate."""

# ruff: noqa
# fmt: off
import torch

from tileport.backends.registry import REGISTRY
from tileport.ops import _checks as _c
from tileport.ops.interface import runtime as _rt
from .spec import SPEC

OP = 'layer_norm'
_DEFAULT_weight = None
_DEFAULT_bias = None
_DEFAULT_eps = 1e-05
_DEFAULT_output_dtype = None
_DEFAULT_backend = None
_DEFAULT_out = None
_BWD_DEFAULT_weight = None
_BWD_DEFAULT_bias = None
_BWD_DEFAULT_backend = None
_BWD_DEFAULT_eps = None


def _forward_impl(x, weight, bias, eps, output_dtype, backend, out=None):
    impl = REGISTRY.kernels(OP, x.device, (x.dtype, output_dtype,) + (() if weight is None else (weight.dtype,)) + (() if bias is None else (bias.dtype,)), backend)
    if x.numel() == 0:
        return _rt.empty_forward(SPEC, x, {'eps': eps, 'output_dtype': output_dtype}, out)
    if out is None:
        y, mean, rstd = impl.forward(_rt.rows_2d(x), weight, bias, eps, output_dtype)
        if x.dim() == 2:
            return (y, mean, rstd)
        return (y.view(*x.shape), mean.view(x.shape[:-1]), rstd.view(x.shape[:-1]))
    impl.forward(_rt.rows_2d(x), weight, bias, eps, output_dtype, out=out if x.dim() == 2 else (out[0].view(-1, x.shape[-1]), out[1].view(-1), out[2].view(-1),))  # checked: (M, D), (M,)
    return out


def _backward_impl(x, mean, rstd, dy, weight, bias, backend, eps):
    impl = REGISTRY.kernels(OP, x.device, (x.dtype, dy.dtype,) + (() if weight is None else (weight.dtype,)) + (() if bias is None else (bias.dtype,)), backend)
    if x.numel() == 0:
        return _rt.backward_results(SPEC, x, {'x': x, 'mean': mean, 'rstd': rstd, 'dy': dy, 'weight': weight, 'bias': bias}, True)
    dx, dweight, dbias = impl.backward(_rt.rows_2d(x), mean.reshape(-1), rstd.reshape(-1), _rt.rows_2d(dy), weight, bias, eps)
    if x.dim() != 2:
        dx = dx.view(*x.shape)
    return (dx, (x.new_empty(0) if dweight is None else dweight.to(weight.dtype)), (x.new_empty(0) if dbias is None else dbias.to(bias.dtype)))


def _fwd_op(x, weight, bias, eps, output_dtype, backend):
    return _forward_impl(x, weight, bias, eps, (output_dtype if output_dtype is not None else x.dtype), backend)


def _fwd_fake(x, weight, bias, eps, output_dtype, backend):
    return _rt.new_outputs(SPEC, x, {'output_dtype': output_dtype})


_fwd_custom = torch.library.custom_op("tileport::layer_norm_fwd", _fwd_op, mutates_args=(), schema='(Tensor x, Tensor? weight, Tensor? bias, float eps, ScalarType? output_dtype, str? backend) -> (Tensor, Tensor, Tensor)')
_fwd_custom.register_fake(_fwd_fake)


def _bwd_op(x, mean, rstd, dy, weight, bias, backend, eps):
    return _backward_impl(x, mean, rstd, dy, weight, bias, backend, eps)


def _bwd_fake(x, mean, rstd, dy, weight, bias, backend, eps):
    return _rt.backward_results(SPEC, x, {'x': x, 'mean': mean, 'rstd': rstd, 'dy': dy, 'weight': weight, 'bias': bias}, False)


_bwd_custom = torch.library.custom_op("tileport::layer_norm_bwd", _bwd_op, mutates_args=(), schema='(Tensor x, Tensor mean, Tensor rstd, Tensor dy, Tensor? weight, Tensor? bias, str? backend, float? eps) -> (Tensor, Tensor, Tensor)')
_bwd_custom.register_fake(_bwd_fake)


def _fwd(x, weight, bias, eps, output_dtype, backend):
    if torch.compiler.is_compiling():
        return _fwd_custom(x, weight, bias, eps, output_dtype, backend)
    return _forward_impl(x, weight, bias, eps, output_dtype, backend)


def _bwd(x, mean, rstd, dy, weight, bias, backend, eps):
    if torch.compiler.is_compiling():
        return _bwd_custom(x, mean, rstd, dy, weight, bias, backend, eps)
    return _backward_impl(x, mean, rstd, dy, weight, bias, backend, eps)


class _Function(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias, eps, output_dtype, backend):
        y, mean, rstd = _fwd(x, weight, bias, eps, output_dtype, backend)
        ctx.save_for_backward(x, mean, rstd, weight, bias)
        ctx.options = (backend, eps,)
        ctx.mark_non_differentiable(mean, rstd)
        return (y, mean, rstd)

    @staticmethod
    def backward(ctx, dy, dmean, drstd):
        x, mean, rstd, weight, bias = ctx.saved_tensors
        backend, eps = ctx.options
        dx, dweight, dbias = _bwd(x, mean, rstd, dy, weight, bias, backend, eps)
        need = ctx.needs_input_grad
        return (dx if need[0] else None), (dweight if need[1] and weight is not None else None), (dbias if need[2] and bias is not None else None), None, None, None


def layer_norm(x, weight=_DEFAULT_weight, bias=_DEFAULT_bias, eps=_DEFAULT_eps, *, output_dtype=_DEFAULT_output_dtype, backend=_DEFAULT_backend):
    _c.floating_tensor(x, 'x')
    _c.vector_tensor(weight, 'weight', x)
    _c.vector_tensor(bias, 'bias', x)
    eps = _c.eps_value(eps, 'eps')
    output_dtype = _c.output_dtype(output_dtype, x.dtype, 'output_dtype')
    if not ((x.requires_grad or (weight is not None and weight.requires_grad) or (bias is not None and bias.requires_grad)) and torch.is_grad_enabled()):
        return _fwd(x, weight, bias, eps, output_dtype, backend)[0]  # no graph to record: skip Function.apply
    return _Function.apply(x, weight, bias, eps, output_dtype, backend)[0]


def layer_norm_fwd(x, weight=_DEFAULT_weight, bias=_DEFAULT_bias, eps=_DEFAULT_eps, *, output_dtype=_DEFAULT_output_dtype, backend=_DEFAULT_backend, out=_DEFAULT_out):
    _c.floating_tensor(x, 'x')
    _c.vector_tensor(weight, 'weight', x)
    _c.vector_tensor(bias, 'bias', x)
    eps = _c.eps_value(eps, 'eps')
    output_dtype = _c.output_dtype(output_dtype, x.dtype, 'output_dtype')
    if out is not None:
        out = _rt.check_out(SPEC, 'layer_norm_fwd', out, x, {'output_dtype': output_dtype})
        return _forward_impl(x, weight, bias, eps, output_dtype, backend, out)
    return _fwd(x, weight, bias, eps, output_dtype, backend)


def layer_norm_bwd(x, mean, rstd, dy, weight=_BWD_DEFAULT_weight, *, bias=_BWD_DEFAULT_bias, backend=_BWD_DEFAULT_backend, eps=_BWD_DEFAULT_eps):
    _c.floating_tensor(x, 'x')
    _c.per_row_tensor(mean, 'mean', x, 'x')
    _c.per_row_tensor(rstd, 'rstd', x, 'x')
    _c.like_rows(dy, 'dy', x, 'x')
    _c.vector_tensor(weight, 'weight', x)
    _c.vector_tensor(bias, 'bias', x)
    eps = None if eps is None else _c.eps_value(eps, 'eps')
    dx, dweight, dbias = _bwd(x, mean, rstd, dy, weight, bias, backend, eps)
    return (dx, (dweight if weight is not None else None), (dbias if bias is not None else None))


class _Module(torch.nn.Module):
    def __init__(self, hidden_size, eps=_DEFAULT_eps, output_dtype=_DEFAULT_output_dtype, elementwise_affine=True, backend=None, device=None, dtype=None):
        super().__init__()
        self.hidden_size = _c.integer(hidden_size, 'hidden_size')
        eps = _c.eps_value(eps, 'eps')
        self.eps = eps
        output_dtype = _c.output_dtype(output_dtype, None, 'output_dtype')
        self.output_dtype = output_dtype
        self.backend = backend
        if elementwise_affine:
            self.weight = torch.nn.Parameter(torch.full((hidden_size,), 1.0, device=device, dtype=dtype))
        else:
            self.register_parameter('weight', None)
        if elementwise_affine:
            self.bias = torch.nn.Parameter(torch.full((hidden_size,), 1.0, device=device, dtype=dtype))
        else:
            self.register_parameter('bias', None)

    def forward(self, x):
        return layer_norm(x, weight=self.weight, bias=self.bias, eps=self.eps, output_dtype=self.output_dtype, backend=self.backend)

    def extra_repr(self):
        return ', '.join([str(self.hidden_size), f'eps={self.eps}', f'output_dtype={self.output_dtype}'])


_forward_tuple = layer_norm_fwd
