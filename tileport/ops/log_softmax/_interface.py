"""The interface of log_softmax, generated from its spec by `tileport generate`.
Do not edit: change the spec and regenerate."""

# ruff: noqa
# fmt: off
import torch

from tileport.backends.registry import REGISTRY
from tileport.ops import _checks as _c
from tileport.ops.interface import runtime as _rt
from .spec import SPEC

OP = 'log_softmax'
_DEFAULT_dim = -1
_DEFAULT_backend = None
_BWD_DEFAULT_dim = -1
_BWD_DEFAULT_backend = None


def _forward_impl(x, dim, backend, out=None):
    impl = REGISTRY.kernels(OP, x.device, (x.dtype,), backend)
    if x.numel() == 0:
        return _rt.empty_forward(SPEC, x, {'dim': dim}, out, dim)
    xm = _rt.moved(x, dim)
    y = impl.forward(_rt.rows_2d(xm))
    return _rt.back((y if xm.dim() == 2 else y.view(*xm.shape)), dim)


def _backward_impl(y, dy, dim, backend):
    impl = REGISTRY.kernels(OP, y.device, (y.dtype, dy.dtype,), backend)
    if y.numel() == 0:
        return _rt.backward_results(SPEC, y, {'y': y, 'dy': dy}, True, dim)
    ym = _rt.moved(y, dim)
    dym = _rt.moved(dy, dim)
    dx = impl.backward(_rt.rows_2d(ym), _rt.rows_2d(dym))
    return _rt.back((dx if ym.dim() == 2 else dx.view(*ym.shape)), dim)


def _fwd_op(x, dim, backend):
    return _forward_impl(x, dim, backend)


def _fwd_fake(x, dim, backend):
    return _rt.new_outputs(SPEC, x, {}, dim)


_fwd_custom = torch.library.custom_op("tileport::log_softmax_fwd", _fwd_op, mutates_args=(), schema='(Tensor x, int dim, str? backend) -> Tensor')
_fwd_custom.register_fake(_fwd_fake)


def _bwd_op(y, dy, dim, backend):
    return _backward_impl(y, dy, dim, backend)


def _bwd_fake(y, dy, dim, backend):
    return _rt.backward_results(SPEC, y, {'y': y, 'dy': dy}, False, dim)


_bwd_custom = torch.library.custom_op("tileport::log_softmax_bwd", _bwd_op, mutates_args=(), schema='(Tensor y, Tensor dy, int dim, str? backend) -> Tensor')
_bwd_custom.register_fake(_bwd_fake)


def _fwd(x, dim, backend):
    if torch.compiler.is_compiling():
        return _fwd_custom(x, dim, backend)
    return _forward_impl(x, dim, backend)


def _bwd(y, dy, dim, backend):
    if torch.compiler.is_compiling():
        return _bwd_custom(y, dy, dim, backend)
    return _backward_impl(y, dy, dim, backend)


class _Function(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, dim, backend):
        y = _fwd(x, dim, backend)
        ctx.save_for_backward(y)
        ctx.options = (dim, backend,)
        return y

    @staticmethod
    def backward(ctx, dy):
        y, = ctx.saved_tensors
        dim, backend = ctx.options
        dx = _bwd(y, dy, dim, backend)
        need = ctx.needs_input_grad
        return (dx if need[0] else None), None, None


def log_softmax(x, dim=_DEFAULT_dim, *, backend=_DEFAULT_backend):
    _c.floating_tensor(x, 'x')
    dim = _c.dim_index(dim, x.dim())
    if not ((x.requires_grad) and torch.is_grad_enabled()):
        return _fwd(x, dim, backend)  # no graph to record: skip Function.apply
    return _Function.apply(x, dim, backend)


def log_softmax_fwd(x, dim=_DEFAULT_dim, *, backend=_DEFAULT_backend):
    _c.floating_tensor(x, 'x')
    dim = _c.dim_index(dim, x.dim())
    return _fwd(x, dim, backend)


def _forward_tuple(x, dim=_DEFAULT_dim, *, backend=_DEFAULT_backend):
    return (log_softmax_fwd(x, dim, backend=backend),)


def log_softmax_bwd(y, dy, dim=_BWD_DEFAULT_dim, *, backend=_BWD_DEFAULT_backend):
    _c.floating_tensor(y, 'y')
    _c.like_rows(dy, 'dy', y, 'y')
    dim = _c.dim_index(dim, y.dim())
    dx = _bwd(y, dy, dim, backend)
    return dx


class _Module(torch.nn.Module):
    def __init__(self, dim=_DEFAULT_dim, backend=None):
        super().__init__()
        dim = _c.integer(dim, 'dim')
        self.dim = dim
        self.backend = backend

    def forward(self, x):
        return log_softmax(x, dim=self.dim, backend=self.backend)

    def extra_repr(self):
        return ', '.join([f'dim={self.dim}'])
