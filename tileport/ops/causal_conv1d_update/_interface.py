"""The interface of causal_conv1d_update, generated from its spec by `tileport generate`.
Do not edit: change the spec and regenerate."""

# ruff: noqa
# fmt: off
import torch

from tileport.backends.registry import REGISTRY
from tileport.ops import _checks as _c
from tileport.ops.interface import runtime as _rt
from .spec import SPEC

OP = 'causal_conv1d_update'
_FLOAT = (torch.float16, torch.bfloat16, torch.float32, torch.float64,)
_INT64 = (torch.int64,)
_INT32 = (torch.int32,)
_INDEX = (torch.int64, torch.int32,)
_BOOL = (torch.bool,)
_DEFAULT_activation = 'none'
_CHOICES_activation = ('none', 'silu')
_ALIASES_activation = (('swish', 'silu'), (None, 'none'))


_FORWARD = _rt.form_declaration(SPEC, 'forward')
_WHERE = SPEC.declaration.where


def _check_forward(x, conv_state, weight, bias, activation):
    """The forward's tensors against the declaration: each dimension bound once, checked everywhere."""
    if not (isinstance(x, torch.Tensor) and x.dtype in _FLOAT and x.dim() == 3):
        _rt.explain(_FORWARD, {'x': x, 'conv_state': conv_state, 'weight': weight, 'bias': bias}, {'activation': activation})
    B, D, T = x.shape
    if not (isinstance(conv_state, torch.Tensor) and conv_state.dtype == x.dtype and conv_state.dim() == 3 and conv_state.shape[0] == B and conv_state.shape[1] == D and conv_state.device == x.device):
        _rt.explain(_FORWARD, {'x': x, 'conv_state': conv_state, 'weight': weight, 'bias': bias}, {'activation': activation})
    S = conv_state.shape[2]
    if not (isinstance(weight, torch.Tensor) and weight.dtype == x.dtype and weight.dim() == 2 and weight.shape[0] == D and weight.device == x.device):
        _rt.explain(_FORWARD, {'x': x, 'conv_state': conv_state, 'weight': weight, 'bias': bias}, {'activation': activation})
    W = weight.shape[1]
    if bias is not None:
        if not (isinstance(bias, torch.Tensor) and bias.dtype == x.dtype and bias.dim() == 1 and bias.shape[0] == D and bias.device == x.device):
            _rt.explain(_FORWARD, {'x': x, 'conv_state': conv_state, 'weight': weight, 'bias': bias}, {'activation': activation})
    if not (W >= 1):
        _rt.explain(_FORWARD, {'x': x, 'conv_state': conv_state, 'weight': weight, 'bias': bias}, {'activation': activation})
    if not (S >= W - 1):
        _rt.explain(_FORWARD, {'x': x, 'conv_state': conv_state, 'weight': weight, 'bias': bias}, {'activation': activation})


def _forward_shapes(x, conv_state, weight, bias):
    """The shapes of out, new_state from the dimensions the tensors bind."""
    B = x.shape[0]
    D = x.shape[1]
    T = x.shape[2]
    S = conv_state.shape[2]
    return ((B, D, T), (B, D, S))


def _forward_impl(x, conv_state, weight, bias, activation, backend):
    impl = REGISTRY.kernels(OP, x.device, (x.dtype,), backend)
    if x.numel() == 0:  # every output empty: no kernel is called
        shapes = _forward_shapes(x, conv_state, weight, bias)
        if _rt.all_empty(shapes):
            return _rt.allocate(shapes, (x.dtype, x.dtype), x.device)
    return impl.forward(x, conv_state, weight, bias, activation)


def _fwd_op(x, conv_state, weight, bias, activation, backend):
    return _rt.as_tensors(_forward_impl(x, conv_state, weight, bias, activation, backend), x)


def _fwd_fake(x, conv_state, weight, bias, activation, backend):
    return _rt.fake(_forward_shapes(x, conv_state, weight, bias), (x.dtype, x.dtype), x)


_fwd_custom = torch.library.custom_op("tileport::causal_conv1d_update_fwd", _fwd_op, mutates_args=(), schema='(Tensor x, Tensor conv_state, Tensor weight, Tensor? bias, str activation, str? backend) -> (Tensor, Tensor)')
_fwd_custom.register_fake(_fwd_fake)


def _fwd(x, conv_state, weight, bias, activation, backend):
    if torch.compiler.is_compiling():
        return _fwd_custom(x, conv_state, weight, bias, activation, backend)
    return _forward_impl(x, conv_state, weight, bias, activation, backend)


class _Function(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, conv_state, weight, bias, activation, backend):
        return _fwd(x, conv_state, weight, bias, activation, backend)

    @staticmethod
    def backward(ctx, dout, dnew_state):
        raise NotImplementedError('causal_conv1d_update has no backward: it is a forward-only operator')


def causal_conv1d_update(x, conv_state, weight, bias=None, *, activation=_DEFAULT_activation, backend=None):
    """Differentiable causal_conv1d_update: xs = [conv_state, x]; out[t] = act(bias + sum_w weight[:, w] * xs[S + t - (W-1) + w]); state = xs[T:] (the contract: the operator's package)."""
    activation = _c.choice(activation, 'activation', _CHOICES_activation, _ALIASES_activation)
    _check_forward(x, conv_state, weight, bias, activation)
    return _fwd(x, conv_state, weight, bias, activation, backend)


def causal_conv1d_update_fwd(x, conv_state, weight, bias=None, *, activation=_DEFAULT_activation, backend=None):
    """The outputs of causal_conv1d_update (out, new_state), without autograd."""
    activation = _c.choice(activation, 'activation', _CHOICES_activation, _ALIASES_activation)
    _check_forward(x, conv_state, weight, bias, activation)
    return _fwd(x, conv_state, weight, bias, activation, backend)


_forward_tuple = causal_conv1d_update_fwd


class _Module(torch.nn.Module):
    def __init__(self, activation=_DEFAULT_activation, backend=None):
        super().__init__()
        activation = _c.choice(activation, 'activation', _CHOICES_activation, _ALIASES_activation)
        self.activation = activation
        self.backend = backend

    def forward(self, x, conv_state, weight, bias=None):
        return causal_conv1d_update(x=x, conv_state=conv_state, weight=weight, bias=bias, activation=self.activation, backend=self.backend)

    def extra_repr(self):
        return ', '.join([f'activation={self.activation!r}'])
