"""The interface of l2norm, generated from its spec by `tileport generate`.
Do not edit: change the spec and regenerate."""

# ruff: noqa
# fmt: off
import torch

from tileport.backends.registry import REGISTRY
from tileport.ops import _checks as _c
from tileport.ops.interface import runtime as _rt
from .spec import SPEC

OP = 'l2norm'
_DEFAULT_eps = 1e-06
_DEFAULT_output_dtype = None
_DEFAULT_backend = None
_DEFAULT_out = None
_BWD_DEFAULT_backend = None
_BWD_DEFAULT_eps = None


def _forward_impl(x, eps, output_dtype, backend, out=None):
    impl = REGISTRY.kernels(OP, x.device, (x.dtype, output_dtype,), backend)
    if x.numel() == 0:
        return _rt.empty_forward(SPEC, x, {'eps': eps, 'output_dtype': output_dtype}, out)
    if out is None:
        y, rstd = impl.forward(_rt.rows_2d(x), eps, output_dtype)
        if x.dim() == 2:
            return (y, rstd)
        return (y.view(*x.shape), rstd.view(x.shape[:-1]))
    impl.forward(_rt.rows_2d(x), eps, output_dtype, out=out if x.dim() == 2 else (out[0].view(-1, x.shape[-1]), out[1].view(-1),))  # checked: (M, D), (M,)
    return out


def _backward_impl(x, rstd, dy, backend, eps):
    impl = REGISTRY.kernels(OP, x.device, (x.dtype, dy.dtype,), backend)
    if x.numel() == 0:
        return _rt.backward_results(SPEC, x, {'x': x, 'rstd': rstd, 'dy': dy}, True)
    dx = impl.backward(_rt.rows_2d(x), rstd.reshape(-1), _rt.rows_2d(dy), eps)
    if x.dim() != 2:
        dx = dx.view(*x.shape)
    return dx


def _fwd_op(x, eps, output_dtype, backend):
    return _forward_impl(x, eps, (output_dtype if output_dtype is not None else x.dtype), backend)


def _fwd_fake(x, eps, output_dtype, backend):
    return _rt.new_outputs(SPEC, x, {'output_dtype': output_dtype})


_fwd_custom = torch.library.custom_op("tileport::l2norm_fwd", _fwd_op, mutates_args=(), schema='(Tensor x, float eps, ScalarType? output_dtype, str? backend) -> (Tensor, Tensor)')
_fwd_custom.register_fake(_fwd_fake)


def _bwd_op(x, rstd, dy, backend, eps):
    return _backward_impl(x, rstd, dy, backend, eps)


def _bwd_fake(x, rstd, dy, backend, eps):
    return _rt.backward_results(SPEC, x, {'x': x, 'rstd': rstd, 'dy': dy}, False)


_bwd_custom = torch.library.custom_op("tileport::l2norm_bwd", _bwd_op, mutates_args=(), schema='(Tensor x, Tensor rstd, Tensor dy, str? backend, float? eps) -> Tensor')
_bwd_custom.register_fake(_bwd_fake)


def _fwd(x, eps, output_dtype, backend):
    if torch.compiler.is_compiling():
        return _fwd_custom(x, eps, output_dtype, backend)
    return _forward_impl(x, eps, output_dtype, backend)


def _bwd(x, rstd, dy, backend, eps):
    if torch.compiler.is_compiling():
        return _bwd_custom(x, rstd, dy, backend, eps)
    return _backward_impl(x, rstd, dy, backend, eps)


class _Function(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, eps, output_dtype, backend):
        y, rstd = _fwd(x, eps, output_dtype, backend)
        ctx.save_for_backward(x, rstd)
        ctx.options = (backend, eps,)
        ctx.mark_non_differentiable(rstd)
        return (y, rstd)

    @staticmethod
    def backward(ctx, dy, drstd):
        x, rstd = ctx.saved_tensors
        backend, eps = ctx.options
        dx = _bwd(x, rstd, dy, backend, eps)
        need = ctx.needs_input_grad
        return (dx if need[0] else None), None, None, None


def l2norm(x, eps=_DEFAULT_eps, output_dtype=_DEFAULT_output_dtype, backend=_DEFAULT_backend):
    _c.floating_tensor(x, 'x')
    eps = _c.eps_value(eps, 'eps')
    output_dtype = _c.output_dtype(output_dtype, x.dtype, 'output_dtype')
    if not ((x.requires_grad) and torch.is_grad_enabled()):
        return _fwd(x, eps, output_dtype, backend)[0]  # no graph to record: skip Function.apply
    return _Function.apply(x, eps, output_dtype, backend)[0]


def l2norm_fwd(x, eps=_DEFAULT_eps, output_dtype=_DEFAULT_output_dtype, backend=_DEFAULT_backend, out=_DEFAULT_out):
    _c.floating_tensor(x, 'x')
    eps = _c.eps_value(eps, 'eps')
    output_dtype = _c.output_dtype(output_dtype, x.dtype, 'output_dtype')
    if out is not None:
        out = _rt.check_out(SPEC, 'l2norm_fwd', out, x, {'output_dtype': output_dtype})
        return _forward_impl(x, eps, output_dtype, backend, out)
    return _fwd(x, eps, output_dtype, backend)


def l2norm_bwd(x, rstd, dy, backend=_BWD_DEFAULT_backend, *, eps=_BWD_DEFAULT_eps):
    _c.floating_tensor(x, 'x')
    _c.per_row_tensor(rstd, 'rstd', x, 'x')
    _c.like_rows(dy, 'dy', x, 'x')
    eps = None if eps is None else _c.eps_value(eps, 'eps')
    dx = _bwd(x, rstd, dy, backend, eps)
    return dx


class _Module(torch.nn.Module):
    def __init__(self, eps=_DEFAULT_eps, output_dtype=_DEFAULT_output_dtype, backend=None):
        super().__init__()
        eps = _c.eps_value(eps, 'eps')
        self.eps = eps
        output_dtype = _c.output_dtype(output_dtype, None, 'output_dtype')
        self.output_dtype = output_dtype
        self.backend = backend

    def forward(self, x):
        return l2norm(x, eps=self.eps, output_dtype=self.output_dtype, backend=self.backend)

    def extra_repr(self):
        return ', '.join([f'eps={self.eps}', f'output_dtype={self.output_dtype}'])


_forward_tuple = l2norm_fwd
