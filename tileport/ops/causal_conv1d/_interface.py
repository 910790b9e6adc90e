"""The interface of causal_conv1d, generated from its spec by `tileport generate`.
Do not edit: change the spec and regenerate."""

# ruff: noqa
# fmt: off
import torch

from tileport.backends.registry import REGISTRY
from tileport.ops import _checks as _c
from tileport.ops.interface import runtime as _rt
from .spec import SPEC

OP = 'causal_conv1d'
_FLOAT = (torch.float16, torch.bfloat16, torch.float32, torch.float64,)
_INT64 = (torch.int64,)
_INT32 = (torch.int32,)
_INDEX = (torch.int64, torch.int32,)
_BOOL = (torch.bool,)
_DEFAULT_activation = 'none'
_CHOICES_activation = ('none', 'silu')
_ALIASES_activation = (('swish', 'silu'), (None, 'none'))


_FORWARD = _rt.form_declaration(SPEC, 'forward')
_BACKWARD = _rt.form_declaration(SPEC, 'backward')
_WHERE = SPEC.declaration.where


def _check_forward(x, weight, bias, initial_states, seq_idx, activation):
    """The forward's tensors against the declaration: each dimension bound once, checked everywhere."""
    if not (isinstance(x, torch.Tensor) and x.dtype in _FLOAT and x.dim() == 3):
        _rt.explain(_FORWARD, {'x': x, 'weight': weight, 'bias': bias, 'initial_states': initial_states, 'seq_idx': seq_idx}, {'activation': activation})
    B, D, T = x.shape
    if not (isinstance(weight, torch.Tensor) and weight.dtype == x.dtype and weight.dim() == 2 and weight.shape[0] == D and weight.device == x.device):
        _rt.explain(_FORWARD, {'x': x, 'weight': weight, 'bias': bias, 'initial_states': initial_states, 'seq_idx': seq_idx}, {'activation': activation})
    W = weight.shape[1]
    if bias is not None:
        if not (isinstance(bias, torch.Tensor) and bias.dtype == x.dtype and bias.dim() == 1 and bias.shape[0] == D and bias.device == x.device):
            _rt.explain(_FORWARD, {'x': x, 'weight': weight, 'bias': bias, 'initial_states': initial_states, 'seq_idx': seq_idx}, {'activation': activation})
    S = None
    if initial_states is not None:
        if not (isinstance(initial_states, torch.Tensor) and initial_states.dtype == x.dtype and initial_states.dim() == 3 and initial_states.shape[0] == B and initial_states.shape[1] == D and initial_states.device == x.device):
            _rt.explain(_FORWARD, {'x': x, 'weight': weight, 'bias': bias, 'initial_states': initial_states, 'seq_idx': seq_idx}, {'activation': activation})
        S = initial_states.shape[2]
    if seq_idx is not None:
        if not (isinstance(seq_idx, torch.Tensor) and seq_idx.dtype in _INDEX and seq_idx.dim() == 2 and seq_idx.shape[0] == B and seq_idx.shape[1] == T and seq_idx.device == x.device):
            _rt.explain(_FORWARD, {'x': x, 'weight': weight, 'bias': bias, 'initial_states': initial_states, 'seq_idx': seq_idx}, {'activation': activation})
    if not (W >= 1):
        _rt.explain(_FORWARD, {'x': x, 'weight': weight, 'bias': bias, 'initial_states': initial_states, 'seq_idx': seq_idx}, {'activation': activation})
    if S is not None and not (S + 1 == W):
        _rt.explain(_FORWARD, {'x': x, 'weight': weight, 'bias': bias, 'initial_states': initial_states, 'seq_idx': seq_idx}, {'activation': activation})


def _check_backward(x, weight, bias, initial_states, seq_idx, dout, dfinal_states, activation):
    """The backward's tensors against the declaration: each dimension bound once, checked everywhere."""
    if not (isinstance(x, torch.Tensor) and x.dtype in _FLOAT and x.dim() == 3):
        _rt.explain(_BACKWARD, {'x': x, 'weight': weight, 'bias': bias, 'initial_states': initial_states, 'seq_idx': seq_idx, 'dout': dout, 'dfinal_states': dfinal_states}, {'activation': activation})
    B, D, T = x.shape
    if not (isinstance(weight, torch.Tensor) and weight.dtype == x.dtype and weight.dim() == 2 and weight.shape[0] == D and weight.device == x.device):
        _rt.explain(_BACKWARD, {'x': x, 'weight': weight, 'bias': bias, 'initial_states': initial_states, 'seq_idx': seq_idx, 'dout': dout, 'dfinal_states': dfinal_states}, {'activation': activation})
    W = weight.shape[1]
    if bias is not None:
        if not (isinstance(bias, torch.Tensor) and bias.dtype == x.dtype and bias.dim() == 1 and bias.shape[0] == D and bias.device == x.device):
            _rt.explain(_BACKWARD, {'x': x, 'weight': weight, 'bias': bias, 'initial_states': initial_states, 'seq_idx': seq_idx, 'dout': dout, 'dfinal_states': dfinal_states}, {'activation': activation})
    S = None
    if initial_states is not None:
        if not (isinstance(initial_states, torch.Tensor) and initial_states.dtype == x.dtype and initial_states.dim() == 3 and initial_states.shape[0] == B and initial_states.shape[1] == D and initial_states.device == x.device):
            _rt.explain(_BACKWARD, {'x': x, 'weight': weight, 'bias': bias, 'initial_states': initial_states, 'seq_idx': seq_idx, 'dout': dout, 'dfinal_states': dfinal_states}, {'activation': activation})
        S = initial_states.shape[2]
    if seq_idx is not None:
        if not (isinstance(seq_idx, torch.Tensor) and seq_idx.dtype in _INDEX and seq_idx.dim() == 2 and seq_idx.shape[0] == B and seq_idx.shape[1] == T and seq_idx.device == x.device):
            _rt.explain(_BACKWARD, {'x': x, 'weight': weight, 'bias': bias, 'initial_states': initial_states, 'seq_idx': seq_idx, 'dout': dout, 'dfinal_states': dfinal_states}, {'activation': activation})
    if not (isinstance(dout, torch.Tensor) and dout.dtype == x.dtype and dout.dim() == 3 and dout.shape[0] == B and dout.shape[1] == D and dout.shape[2] == T and dout.device == x.device):
        _rt.explain(_BACKWARD, {'x': x, 'weight': weight, 'bias': bias, 'initial_states': initial_states, 'seq_idx': seq_idx, 'dout': dout, 'dfinal_states': dfinal_states}, {'activation': activation})
    if dfinal_states is not None:
        if not (isinstance(dfinal_states, torch.Tensor) and dfinal_states.dtype == x.dtype and dfinal_states.dim() == 3 and dfinal_states.shape[0] == B and dfinal_states.shape[1] == D and (S is None or dfinal_states.shape[2] == S) and dfinal_states.device == x.device):
            _rt.explain(_BACKWARD, {'x': x, 'weight': weight, 'bias': bias, 'initial_states': initial_states, 'seq_idx': seq_idx, 'dout': dout, 'dfinal_states': dfinal_states}, {'activation': activation})
        if S is None:
            S = dfinal_states.shape[2]
    if not (W >= 1):
        _rt.explain(_BACKWARD, {'x': x, 'weight': weight, 'bias': bias, 'initial_states': initial_states, 'seq_idx': seq_idx, 'dout': dout, 'dfinal_states': dfinal_states}, {'activation': activation})
    if S is not None and not (S + 1 == W):
        _rt.explain(_BACKWARD, {'x': x, 'weight': weight, 'bias': bias, 'initial_states': initial_states, 'seq_idx': seq_idx, 'dout': dout, 'dfinal_states': dfinal_states}, {'activation': activation})


def _forward_shapes(x, weight, bias, initial_states, seq_idx):
    """The shapes of out, final_states from the dimensions the tensors bind."""
    B = x.shape[0]
    D = x.shape[1]
    T = x.shape[2]
    S = None
    if initial_states is not None:
        S = initial_states.shape[2]
    return ((B, D, T), ((B, D, S) if initial_states is not None else None))


def _backward_shapes(x, weight, bias, initial_states, seq_idx, dout, dfinal_states):
    """The shapes of dx, dweight, dbias, dinitial_states from the dimensions the tensors bind."""
    B = x.shape[0]
    D = x.shape[1]
    T = x.shape[2]
    W = weight.shape[1]
    S = None
    if initial_states is not None:
        S = initial_states.shape[2]
    return ((B, D, T), (D, W), (D,), ((B, D, S) if initial_states is not None and dfinal_states is not None else None))


def _forward_impl(x, weight, bias, initial_states, seq_idx, activation, backend):
    impl = REGISTRY.kernels(OP, x.device, (x.dtype,), backend)
    if x.numel() == 0:  # every output empty: no kernel is called
        shapes = _forward_shapes(x, weight, bias, initial_states, seq_idx)
        if _rt.all_empty(shapes):
            return _rt.allocate(shapes, (x.dtype, x.dtype), x.device)
    return impl.forward(x, weight, bias, initial_states, seq_idx, activation)


def _backward_impl(x, weight, bias, initial_states, seq_idx, dout, dfinal_states, activation, backend):
    impl = REGISTRY.kernels(OP, x.device, (x.dtype,), backend)
    if x.numel() == 0:  # every output empty: no kernel is called
        shapes = _backward_shapes(x, weight, bias, initial_states, seq_idx, dout, dfinal_states)
        if _rt.all_empty(shapes):
            return _rt.allocate(shapes, (x.dtype, x.dtype, x.dtype, x.dtype), x.device)
    return impl.backward(x, weight, bias, initial_states, seq_idx, dout, dfinal_states, activation)


def _fwd_op(x, weight, bias, initial_states, seq_idx, activation, backend):
    return _rt.as_tensors(_forward_impl(x, weight, bias, initial_states, seq_idx, activation, backend), x)


def _fwd_fake(x, weight, bias, initial_states, seq_idx, activation, backend):
    return _rt.fake(_forward_shapes(x, weight, bias, initial_states, seq_idx), (x.dtype, x.dtype), x)


_fwd_custom = torch.library.custom_op("tileport::causal_conv1d_fwd", _fwd_op, mutates_args=(), schema='(Tensor x, Tensor weight, Tensor? bias, Tensor? initial_states, Tensor? seq_idx, str activation, str? backend) -> (Tensor, Tensor)')
_fwd_custom.register_fake(_fwd_fake)


def _fwd(x, weight, bias, initial_states, seq_idx, activation, backend):
    if torch.compiler.is_compiling():
        out, final_states = _fwd_custom(x, weight, bias, initial_states, seq_idx, activation, backend)
        return (out, (final_states if initial_states is not None else None))
    return _forward_impl(x, weight, bias, initial_states, seq_idx, activation, backend)


def _bwd_op(x, weight, bias, initial_states, seq_idx, dout, dfinal_states, activation, backend):
    return _rt.as_tensors(_backward_impl(x, weight, bias, initial_states, seq_idx, dout, dfinal_states, activation, backend), x)


def _bwd_fake(x, weight, bias, initial_states, seq_idx, dout, dfinal_states, activation, backend):
    return _rt.fake(_backward_shapes(x, weight, bias, initial_states, seq_idx, dout, dfinal_states), (x.dtype, x.dtype, x.dtype, x.dtype), x)


_bwd_custom = torch.library.custom_op("tileport::causal_conv1d_bwd", _bwd_op, mutates_args=(), schema='(Tensor x, Tensor weight, Tensor? bias, Tensor? initial_states, Tensor? seq_idx, Tensor dout, Tensor? dfinal_states, str activation, str? backend) -> (Tensor, Tensor, Tensor, Tensor)')
_bwd_custom.register_fake(_bwd_fake)


def _bwd(x, weight, bias, initial_states, seq_idx, dout, dfinal_states, activation, backend):
    if torch.compiler.is_compiling():
        dx, dweight, dbias, dinitial_states = _bwd_custom(x, weight, bias, initial_states, seq_idx, dout, dfinal_states, activation, backend)
        return (dx, dweight, dbias, (dinitial_states if initial_states is not None and dfinal_states is not None else None))
    return _backward_impl(x, weight, bias, initial_states, seq_idx, dout, dfinal_states, activation, backend)


class _Function(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias, initial_states, seq_idx, activation, backend):
        out, final_states = _fwd(x, weight, bias, initial_states, seq_idx, activation, backend)
        ctx.save_for_backward(x, weight, bias, initial_states, seq_idx)
        ctx.options = (activation, backend,)
        return (out, final_states)

    @staticmethod
    def backward(ctx, dout, dfinal_states):
        x, weight, bias, initial_states, seq_idx = ctx.saved_tensors
        activation, backend = ctx.options
        dx, dweight, dbias, dinitial_states = _bwd(x, weight, bias, initial_states, seq_idx, dout, dfinal_states, activation, backend)
        need = ctx.needs_input_grad
        return (dx if need[0] else None), (dweight if need[1] else None), (dbias if need[2] else None), (dinitial_states if need[3] else None), None, None, None


def causal_conv1d(x, weight, bias=None, initial_states=None, seq_idx=None, *, activation=_DEFAULT_activation, backend=None):
    """Differentiable causal_conv1d: act(bias[d] + sum_w weight[d, w] * x[b, d, t - (W-1) + w]), zeros (or initial_states) before the start (the contract: the operator's package)."""
    activation = _c.choice(activation, 'activation', _CHOICES_activation, _ALIASES_activation)
    _check_forward(x, weight, bias, initial_states, seq_idx, activation)
    if not ((x.requires_grad or weight.requires_grad or (bias is not None and bias.requires_grad) or (initial_states is not None and initial_states.requires_grad)) and torch.is_grad_enabled()):
        return _fwd(x, weight, bias, initial_states, seq_idx, activation, backend)  # no graph to record: skip Function.apply
    return _Function.apply(x, weight, bias, initial_states, seq_idx, activation, backend)


def causal_conv1d_fwd(x, weight, bias=None, initial_states=None, seq_idx=None, *, activation=_DEFAULT_activation, backend=None):
    """The outputs of causal_conv1d (out, final_states), without autograd."""
    activation = _c.choice(activation, 'activation', _CHOICES_activation, _ALIASES_activation)
    _check_forward(x, weight, bias, initial_states, seq_idx, activation)
    return _fwd(x, weight, bias, initial_states, seq_idx, activation, backend)


_forward_tuple = causal_conv1d_fwd


def causal_conv1d_bwd(x, weight, bias, initial_states, seq_idx, dout, dfinal_states=None, *, activation=_DEFAULT_activation, backend=None):
    """The gradients of causal_conv1d (dx, dweight, dbias, dinitial_states) from what the forward saved."""
    activation = _c.choice(activation, 'activation', _CHOICES_activation, _ALIASES_activation)
    _check_backward(x, weight, bias, initial_states, seq_idx, dout, dfinal_states, activation)
    return _bwd(x, weight, bias, initial_states, seq_idx, dout, dfinal_states, activation, backend)


class _Module(torch.nn.Module):
    def __init__(self, activation=_DEFAULT_activation, backend=None):
        super().__init__()
        activation = _c.choice(activation, 'activation', _CHOICES_activation, _ALIASES_activation)
        self.activation = activation
        self.backend = backend

    def forward(self, x, weight, bias=None, initial_states=None, seq_idx=None):
        return causal_conv1d(x=x, weight=weight, bias=bias, initial_states=initial_states, seq_idx=seq_idx, activation=self.activation, backend=self.backend)

    def extra_repr(self):
        return ', '.join([f'activation={self.activation!r}'])
