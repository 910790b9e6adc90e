"""The interface of gated_rms_norm, generated from its spec by `tileport generate`.
Do not edit: change the spec and regenerate."""

# ruff: noqa
# fmt: off
import torch

from tileport.backends.registry import REGISTRY
from tileport.ops import _checks as _c
from tileport.ops.interface import runtime as _rt
from .spec import SPEC

OP = 'gated_rms_norm'
_DEFAULT_weight = None
_DEFAULT_eps = 1e-06
_DEFAULT_activation = 'silu'
_DEFAULT_norm_before_gate = True
_DEFAULT_output_dtype = None
_DEFAULT_backend = None
_CHOICES_activation = ('silu', 'sigmoid')
_ALIASES_activation = (('swish', 'silu'),)
_DEFAULT_out = None
_BWD_DEFAULT_weight = None
_BWD_DEFAULT_eps = 1e-06
_BWD_DEFAULT_activation = 'silu'
_BWD_DEFAULT_norm_before_gate = True
_BWD_DEFAULT_backend = None


def _forward_impl(x, gate, weight, eps, activation, norm_before_gate, output_dtype, backend, out=None):
    impl = REGISTRY.kernels(OP, x.device, (x.dtype, gate.dtype, output_dtype,) + (() if weight is None else (weight.dtype,)), backend)
    if x.numel() == 0:
        return _rt.empty_forward(SPEC, x, {'eps': eps, 'activation': activation, 'norm_before_gate': norm_before_gate, 'output_dtype': output_dtype}, out)
    if out is None:
        y, rstd = impl.forward(_rt.rows_2d(x), _rt.rows_2d(gate), weight, eps, activation, norm_before_gate, output_dtype)
        if x.dim() == 2:
            return (y, rstd)
        return (y.view(*x.shape), rstd.view(x.shape[:-1]))
    impl.forward(_rt.rows_2d(x), _rt.rows_2d(gate), weight, eps, activation, norm_before_gate, output_dtype, out=out if x.dim() == 2 else (out[0].view(-1, x.shape[-1]), out[1].view(-1),))  # checked: (M, D), (M,)
    return out


def _backward_impl(x, gate, rstd, dy, weight, eps, activation, norm_before_gate, backend):
    impl = REGISTRY.kernels(OP, x.device, (x.dtype, gate.dtype, dy.dtype,) + (() if weight is None else (weight.dtype,)), backend)
    if x.numel() == 0:
        return _rt.backward_results(SPEC, x, {'x': x, 'gate': gate, 'rstd': rstd, 'dy': dy, 'weight': weight}, True)
    dx, dgate, dweight = impl.backward(_rt.rows_2d(x), _rt.rows_2d(gate), rstd.reshape(-1), _rt.rows_2d(dy), weight, eps, activation, norm_before_gate)
    if x.dim() != 2:
        dx = dx.view(*x.shape)
    if x.dim() != 2:
        dgate = dgate.view(*x.shape)
    return (dx, dgate, (x.new_empty(0) if dweight is None else dweight.to(weight.dtype)))


def _fwd_op(x, gate, weight, eps, activation, norm_before_gate, output_dtype, backend):
    return _forward_impl(x, gate, weight, eps, activation, norm_before_gate, (output_dtype if output_dtype is not None else x.dtype), backend)


def _fwd_fake(x, gate, weight, eps, activation, norm_before_gate, output_dtype, backend):
    return _rt.new_outputs(SPEC, x, {'output_dtype': output_dtype})


_fwd_custom = torch.library.custom_op("tileport::gated_rms_norm_fwd", _fwd_op, mutates_args=(), schema='(Tensor x, Tensor gate, Tensor? weight, float eps, str activation, bool norm_before_gate, ScalarType? output_dtype, str? backend) -> (Tensor, Tensor)')
_fwd_custom.register_fake(_fwd_fake)


def _bwd_op(x, gate, rstd, dy, weight, eps, activation, norm_before_gate, backend):
    return _backward_impl(x, gate, rstd, dy, weight, eps, activation, norm_before_gate, backend)


def _bwd_fake(x, gate, rstd, dy, weight, eps, activation, norm_before_gate, backend):
    return _rt.backward_results(SPEC, x, {'x': x, 'gate': gate, 'rstd': rstd, 'dy': dy, 'weight': weight}, False)


_bwd_custom = torch.library.custom_op("tileport::gated_rms_norm_bwd", _bwd_op, mutates_args=(), schema='(Tensor x, Tensor gate, Tensor rstd, Tensor dy, Tensor? weight, float eps, str activation, bool norm_before_gate, str? backend) -> (Tensor, Tensor, Tensor)')
_bwd_custom.register_fake(_bwd_fake)


def _fwd(x, gate, weight, eps, activation, norm_before_gate, output_dtype, backend):
    if torch.compiler.is_compiling():
        return _fwd_custom(x, gate, weight, eps, activation, norm_before_gate, output_dtype, backend)
    return _forward_impl(x, gate, weight, eps, activation, norm_before_gate, output_dtype, backend)


def _bwd(x, gate, rstd, dy, weight, eps, activation, norm_before_gate, backend):
    if torch.compiler.is_compiling():
        return _bwd_custom(x, gate, rstd, dy, weight, eps, activation, norm_before_gate, backend)
    return _backward_impl(x, gate, rstd, dy, weight, eps, activation, norm_before_gate, backend)


class _Function(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, gate, weight, eps, activation, norm_before_gate, output_dtype, backend):
        y, rstd = _fwd(x, gate, weight, eps, activation, norm_before_gate, output_dtype, backend)
        ctx.save_for_backward(x, gate, rstd, weight)
        ctx.options = (eps, activation, norm_before_gate, backend,)
        ctx.mark_non_differentiable(rstd)
        return (y, rstd)

    @staticmethod
    def backward(ctx, dy, drstd):
        x, gate, rstd, weight = ctx.saved_tensors
        eps, activation, norm_before_gate, backend = ctx.options
        dx, dgate, dweight = _bwd(x, gate, rstd, dy, weight, eps, activation, norm_before_gate, backend)
        need = ctx.needs_input_grad
        return (dx if need[0] else None), (dgate if need[1] else None), (dweight if need[2] and weight is not None else None), None, None, None, None, None


def gated_rms_norm(x, gate, weight=_DEFAULT_weight, eps=_DEFAULT_eps, *, activation=_DEFAULT_activation, norm_before_gate=_DEFAULT_norm_before_gate, output_dtype=_DEFAULT_output_dtype, backend=_DEFAULT_backend):
    _c.floating_tensor(x, 'x')
    _c.like_rows(gate, 'gate', x, 'x')
    _c.vector_tensor(weight, 'weight', x)
    eps = _c.eps_value(eps, 'eps')
    activation = _c.choice(activation, 'activation', _CHOICES_activation, _ALIASES_activation)
    norm_before_gate = _c.flag(norm_before_gate, 'norm_before_gate')
    output_dtype = _c.output_dtype(output_dtype, x.dtype, 'output_dtype')
    if not ((x.requires_grad or gate.requires_grad or (weight is not None and weight.requires_grad)) and torch.is_grad_enabled()):
        return _fwd(x, gate, weight, eps, activation, norm_before_gate, output_dtype, backend)[0]  # no graph to record: skip Function.apply
    return _Function.apply(x, gate, weight, eps, activation, norm_before_gate, output_dtype, backend)[0]


def gated_rms_norm_fwd(x, gate, weight=_DEFAULT_weight, eps=_DEFAULT_eps, *, activation=_DEFAULT_activation, norm_before_gate=_DEFAULT_norm_before_gate, output_dtype=_DEFAULT_output_dtype, backend=_DEFAULT_backend, out=_DEFAULT_out):
    _c.floating_tensor(x, 'x')
    _c.like_rows(gate, 'gate', x, 'x')
    _c.vector_tensor(weight, 'weight', x)
    eps = _c.eps_value(eps, 'eps')
    activation = _c.choice(activation, 'activation', _CHOICES_activation, _ALIASES_activation)
    norm_before_gate = _c.flag(norm_before_gate, 'norm_before_gate')
    output_dtype = _c.output_dtype(output_dtype, x.dtype, 'output_dtype')
    if out is not None:
        out = _rt.check_out(SPEC, 'gated_rms_norm_fwd', out, x, {'output_dtype': output_dtype})
        return _forward_impl(x, gate, weight, eps, activation, norm_before_gate, output_dtype, backend, out)
    return _fwd(x, gate, weight, eps, activation, norm_before_gate, output_dtype, backend)


def gated_rms_norm_bwd(x, gate, rstd, dy, weight=_BWD_DEFAULT_weight, *, eps=_BWD_DEFAULT_eps, activation=_BWD_DEFAULT_activation, norm_before_gate=_BWD_DEFAULT_norm_before_gate, backend=_BWD_DEFAULT_backend):
    _c.floating_tensor(x, 'x')
    _c.like_rows(gate, 'gate', x, 'x')
    _c.per_row_tensor(rstd, 'rstd', x, 'x')
    _c.like_rows(dy, 'dy', x, 'x')
    _c.vector_tensor(weight, 'weight', x)
    eps = _c.eps_value(eps, 'eps')
    activation = _c.choice(activation, 'activation', _CHOICES_activation, _ALIASES_activation)
    norm_before_gate = _c.flag(norm_before_gate, 'norm_before_gate')
    dx, dgate, dweight = _bwd(x, gate, rstd, dy, weight, eps, activation, norm_before_gate, backend)
    return (dx, dgate, (dweight if weight is not None else None))


class _Module(torch.nn.Module):
    def __init__(self, hidden_size, eps=_DEFAULT_eps, activation=_DEFAULT_activation, norm_before_gate=_DEFAULT_norm_before_gate, output_dtype=_DEFAULT_output_dtype, elementwise_affine=True, backend=None, device=None, dtype=None):
        super().__init__()
        self.hidden_size = _c.integer(hidden_size, 'hidden_size')
        eps = _c.eps_value(eps, 'eps')
        self.eps = eps
        activation = _c.choice(activation, 'activation', _CHOICES_activation, _ALIASES_activation)
        self.activation = activation
        norm_before_gate = _c.flag(norm_before_gate, 'norm_before_gate')
        self.norm_before_gate = norm_before_gate
        output_dtype = _c.output_dtype(output_dtype, None, 'output_dtype')
        self.output_dtype = output_dtype
        self.backend = backend
        if elementwise_affine:
            self.weight = torch.nn.Parameter(torch.full((hidden_size,), 1.0, device=device, dtype=dtype))
        else:
            self.register_parameter('weight', None)

    def forward(self, x, gate):
        return gated_rms_norm(x, gate, weight=self.weight, eps=self.eps, activation=self.activation, norm_before_gate=self.norm_before_gate, output_dtype=self.output_dtype, backend=self.backend)

    def extra_repr(self):
        return ', '.join([str(self.hidden_size), f'eps={self.eps}', f'activation={self.activation!r}', f'norm_before_gate={self.norm_before_gate}', f'output_dtype={self.output_dtype}'])


_forward_tuple = gated_rms_norm_fwd
