"""The interface of cross_entropy, generated from its spec by `tileport generate`.
Do not edit: change the spec and regenerate."""

# ruff: noqa
# fmt: off
import torch

from tileport.backends.registry import REGISTRY
from tileport.ops import _checks as _c
from tileport.ops.interface import runtime as _rt
from .spec import SPEC

OP = 'cross_entropy'
_FLOAT = (torch.float16, torch.bfloat16, torch.float32, torch.float64,)
_INT64 = (torch.int64,)
_INT32 = (torch.int32,)
_INDEX = (torch.int64, torch.int32,)
_BOOL = (torch.bool,)
_DEFAULT_ignore_index = -100
_DEFAULT_label_smoothing = 0.0
_DEFAULT_lse_square_scale = 0.0
_DEFAULT_softcap = 0.0


_FORWARD = _rt.form_declaration(SPEC, 'forward')
_BACKWARD = _rt.form_declaration(SPEC, 'backward')
_WHERE = SPEC.declaration.where


def _check_forward(input, target, weight, ignore_index, label_smoothing, lse_square_scale, softcap):
    """The forward's tensors against the declaration: each dimension bound once, checked everywhere."""
    if not (isinstance(input, torch.Tensor) and input.dtype in _FLOAT and input.dim() == 2):
        _rt.explain(_FORWARD, {'input': input, 'target': target, 'weight': weight}, {'ignore_index': ignore_index, 'label_smoothing': label_smoothing, 'lse_square_scale': lse_square_scale, 'softcap': softcap})
    N, C = input.shape
    if not (isinstance(target, torch.Tensor) and target.dtype in _INDEX and target.dim() == 1 and target.shape[0] == N and target.device == input.device):
        _rt.explain(_FORWARD, {'input': input, 'target': target, 'weight': weight}, {'ignore_index': ignore_index, 'label_smoothing': label_smoothing, 'lse_square_scale': lse_square_scale, 'softcap': softcap})
    if weight is not None:
        if not (isinstance(weight, torch.Tensor) and weight.dtype == input.dtype and weight.dim() == 1 and weight.shape[0] == C and weight.device == input.device):
            _rt.explain(_FORWARD, {'input': input, 'target': target, 'weight': weight}, {'ignore_index': ignore_index, 'label_smoothing': label_smoothing, 'lse_square_scale': lse_square_scale, 'softcap': softcap})
    if not (C >= 1):
        _rt.explain(_FORWARD, {'input': input, 'target': target, 'weight': weight}, {'ignore_index': ignore_index, 'label_smoothing': label_smoothing, 'lse_square_scale': lse_square_scale, 'softcap': softcap})
    _rt.check_values(_FORWARD, {'input': input, 'target': target, 'weight': weight}, {'ignore_index': ignore_index, 'label_smoothing': label_smoothing, 'lse_square_scale': lse_square_scale, 'softcap': softcap})


def _check_backward(dloss, dz_loss, input, target, weight, lse, ignore_index, label_smoothing, lse_square_scale, softcap):
    """The backward's tensors against the declaration: each dimension bound once, checked everywhere."""
    if not (isinstance(dloss, torch.Tensor) and isinstance(input, torch.Tensor) and dloss.dtype == (torch.float64 if input.dtype == torch.float64 else torch.float32) and dloss.dim() == 1):
        _rt.explain(_BACKWARD, {'dloss': dloss, 'dz_loss': dz_loss, 'input': input, 'target': target, 'weight': weight, 'lse': lse}, {'ignore_index': ignore_index, 'label_smoothing': label_smoothing, 'lse_square_scale': lse_square_scale, 'softcap': softcap})
    N = dloss.shape[0]
    if dz_loss is not None:
        if not (isinstance(dz_loss, torch.Tensor) and isinstance(input, torch.Tensor) and dz_loss.dtype == (torch.float64 if input.dtype == torch.float64 else torch.float32) and dz_loss.dim() == 1 and dz_loss.shape[0] == N and dz_loss.device == dloss.device):
            _rt.explain(_BACKWARD, {'dloss': dloss, 'dz_loss': dz_loss, 'input': input, 'target': target, 'weight': weight, 'lse': lse}, {'ignore_index': ignore_index, 'label_smoothing': label_smoothing, 'lse_square_scale': lse_square_scale, 'softcap': softcap})
    if not (isinstance(input, torch.Tensor) and input.dtype in _FLOAT and input.dim() == 2 and input.shape[0] == N and input.device == dloss.device):
        _rt.explain(_BACKWARD, {'dloss': dloss, 'dz_loss': dz_loss, 'input': input, 'target': target, 'weight': weight, 'lse': lse}, {'ignore_index': ignore_index, 'label_smoothing': label_smoothing, 'lse_square_scale': lse_square_scale, 'softcap': softcap})
    C = input.shape[1]
    if not (isinstance(target, torch.Tensor) and target.dtype in _INDEX and target.dim() == 1 and target.shape[0] == N and target.device == dloss.device):
        _rt.explain(_BACKWARD, {'dloss': dloss, 'dz_loss': dz_loss, 'input': input, 'target': target, 'weight': weight, 'lse': lse}, {'ignore_index': ignore_index, 'label_smoothing': label_smoothing, 'lse_square_scale': lse_square_scale, 'softcap': softcap})
    if weight is not None:
        if not (isinstance(weight, torch.Tensor) and weight.dtype == input.dtype and weight.dim() == 1 and weight.shape[0] == C and weight.device == dloss.device):
            _rt.explain(_BACKWARD, {'dloss': dloss, 'dz_loss': dz_loss, 'input': input, 'target': target, 'weight': weight, 'lse': lse}, {'ignore_index': ignore_index, 'label_smoothing': label_smoothing, 'lse_square_scale': lse_square_scale, 'softcap': softcap})
    if not (isinstance(lse, torch.Tensor) and isinstance(input, torch.Tensor) and lse.dtype == (torch.float64 if input.dtype == torch.float64 else torch.float32) and lse.dim() == 1 and lse.shape[0] == N and lse.device == dloss.device):
        _rt.explain(_BACKWARD, {'dloss': dloss, 'dz_loss': dz_loss, 'input': input, 'target': target, 'weight': weight, 'lse': lse}, {'ignore_index': ignore_index, 'label_smoothing': label_smoothing, 'lse_square_scale': lse_square_scale, 'softcap': softcap})
    if not (C >= 1):
        _rt.explain(_BACKWARD, {'dloss': dloss, 'dz_loss': dz_loss, 'input': input, 'target': target, 'weight': weight, 'lse': lse}, {'ignore_index': ignore_index, 'label_smoothing': label_smoothing, 'lse_square_scale': lse_square_scale, 'softcap': softcap})
    _rt.check_values(_BACKWARD, {'dloss': dloss, 'dz_loss': dz_loss, 'input': input, 'target': target, 'weight': weight, 'lse': lse}, {'ignore_index': ignore_index, 'label_smoothing': label_smoothing, 'lse_square_scale': lse_square_scale, 'softcap': softcap})


def _forward_shapes(input, target, weight):
    """The shapes of loss, z_loss, lse from the dimensions the tensors bind."""
    N = input.shape[0]
    return ((N,), (N,), (N,))


def _backward_shapes(dloss, dz_loss, input, target, weight, lse):
    """The shapes of dinput from the dimensions the tensors bind."""
    N = dloss.shape[0]
    C = input.shape[1]
    return (N, C)


def _forward_impl(input, target, weight, ignore_index, label_smoothing, lse_square_scale, softcap, backend):
    impl = REGISTRY.kernels(OP, input.device, (input.dtype,), backend)
    if input.numel() == 0:  # every output empty: no kernel is called
        shapes = _forward_shapes(input, target, weight)
        if _rt.all_empty(shapes):
            return _rt.allocate(shapes, (_rt.stat_dtype(input.dtype), _rt.stat_dtype(input.dtype), _rt.stat_dtype(input.dtype)), input.device)
    input = _rt.unit_last(input)
    target = _rt.unit_last(target)
    if weight is not None:
        weight = _rt.unit_last(weight)
    return impl.forward(input, target, weight, ignore_index, label_smoothing, lse_square_scale, softcap)


def _backward_impl(dloss, dz_loss, input, target, weight, lse, ignore_index, label_smoothing, lse_square_scale, softcap, backend):
    impl = REGISTRY.kernels(OP, input.device, (input.dtype,), backend)
    if input.numel() == 0:  # every output empty: no kernel is called
        shapes = (_backward_shapes(dloss, dz_loss, input, target, weight, lse),)
        if _rt.all_empty(shapes):
            return _rt.allocate(shapes, (input.dtype,), input.device)[0]
    dloss = _rt.unit_last(dloss)
    if dz_loss is not None:
        dz_loss = _rt.unit_last(dz_loss)
    input = _rt.unit_last(input)
    target = _rt.unit_last(target)
    if weight is not None:
        weight = _rt.unit_last(weight)
    lse = _rt.unit_last(lse)
    return impl.backward(dloss, dz_loss, input, target, weight, lse, ignore_index, label_smoothing, lse_square_scale, softcap)


def _fwd_op(input, target, weight, ignore_index, label_smoothing, lse_square_scale, softcap, backend):
    _rt.check_values(_FORWARD, {'input': input, 'target': target, 'weight': weight}, {'ignore_index': ignore_index, 'label_smoothing': label_smoothing, 'lse_square_scale': lse_square_scale, 'softcap': softcap})
    return _rt.as_tensors(_forward_impl(input, target, weight, ignore_index, label_smoothing, lse_square_scale, softcap, backend), input)


def _fwd_fake(input, target, weight, ignore_index, label_smoothing, lse_square_scale, softcap, backend):
    return _rt.fake(_forward_shapes(input, target, weight), (_rt.stat_dtype(input.dtype), _rt.stat_dtype(input.dtype), _rt.stat_dtype(input.dtype)), input)


_fwd_custom = torch.library.custom_op("tileport::cross_entropy_fwd", _fwd_op, mutates_args=(), schema='(Tensor input, Tensor target, Tensor? weight, int ignore_index, float label_smoothing, float lse_square_scale, float softcap, str? backend) -> (Tensor, Tensor, Tensor)')
_fwd_custom.register_fake(_fwd_fake)


def _fwd(input, target, weight, ignore_index, label_smoothing, lse_square_scale, softcap, backend):
    if torch.compiler.is_compiling():
        return _fwd_custom(input, target, weight, ignore_index, label_smoothing, lse_square_scale, softcap, backend)
    return _forward_impl(input, target, weight, ignore_index, label_smoothing, lse_square_scale, softcap, backend)


def _bwd_op(dloss, dz_loss, input, target, weight, lse, ignore_index, label_smoothing, lse_square_scale, softcap, backend):
    _rt.check_values(_BACKWARD, {'dloss': dloss, 'dz_loss': dz_loss, 'input': input, 'target': target, 'weight': weight, 'lse': lse}, {'ignore_index': ignore_index, 'label_smoothing': label_smoothing, 'lse_square_scale': lse_square_scale, 'softcap': softcap})
    return _rt.as_tensors(_backward_impl(dloss, dz_loss, input, target, weight, lse, ignore_index, label_smoothing, lse_square_scale, softcap, backend), dloss)


def _bwd_fake(dloss, dz_loss, input, target, weight, lse, ignore_index, label_smoothing, lse_square_scale, softcap, backend):
    return _rt.fake((_backward_shapes(dloss, dz_loss, input, target, weight, lse),), (input.dtype,), dloss)[0]


_bwd_custom = torch.library.custom_op("tileport::cross_entropy_bwd", _bwd_op, mutates_args=(), schema='(Tensor dloss, Tensor? dz_loss, Tensor input, Tensor target, Tensor? weight, Tensor lse, int ignore_index, float label_smoothing, float lse_square_scale, float softcap, str? backend) -> Tensor')
_bwd_custom.register_fake(_bwd_fake)


def _bwd(dloss, dz_loss, input, target, weight, lse, ignore_index, label_smoothing, lse_square_scale, softcap, backend):
    if torch.compiler.is_compiling():
        return _bwd_custom(dloss, dz_loss, input, target, weight, lse, ignore_index, label_smoothing, lse_square_scale, softcap, backend)
    return _backward_impl(dloss, dz_loss, input, target, weight, lse, ignore_index, label_smoothing, lse_square_scale, softcap, backend)


class _Function(torch.autograd.Function):
    @staticmethod
    def forward(ctx, input, target, weight, ignore_index, label_smoothing, lse_square_scale, softcap, backend):
        loss, z_loss, lse = _fwd(input, target, weight, ignore_index, label_smoothing, lse_square_scale, softcap, backend)
        ctx.save_for_backward(input, target, weight, lse)
        ctx.options = (ignore_index, label_smoothing, lse_square_scale, softcap, backend,)
        ctx.mark_non_differentiable(lse)
        return (loss, z_loss, lse)

    @staticmethod
    def backward(ctx, dloss, dz_loss, dlse):
        input, target, weight, lse = ctx.saved_tensors
        ignore_index, label_smoothing, lse_square_scale, softcap, backend = ctx.options
        dinput = _bwd(dloss, dz_loss, input, target, weight, lse, ignore_index, label_smoothing, lse_square_scale, softcap, backend)
        need = ctx.needs_input_grad
        return (dinput if need[0] else None), None, None, None, None, None, None, None


def cross_entropy(input, target, weight=None, *, ignore_index=_DEFAULT_ignore_index, label_smoothing=_DEFAULT_label_smoothing, lse_square_scale=_DEFAULT_lse_square_scale, softcap=_DEFAULT_softcap, backend=None):
    """Differentiable cross_entropy: loss = (1 - eps) w_t (lse - z_t) + eps / C sum_c w_c (lse - z_c), z_loss = s lse^2, z = softcap tanh(x / softcap), lse = log sum_c exp(z_c) (the contract: the operator's package)."""
    ignore_index = _c.integer(ignore_index, 'ignore_index')
    label_smoothing = _c.probability(label_smoothing, 'label_smoothing')
    lse_square_scale = _c.eps_value(lse_square_scale, 'lse_square_scale')
    softcap = _c.eps_value(softcap, 'softcap')
    _check_forward(input, target, weight, ignore_index, label_smoothing, lse_square_scale, softcap)
    if not ((input.requires_grad) and torch.is_grad_enabled()):
        return _fwd(input, target, weight, ignore_index, label_smoothing, lse_square_scale, softcap, backend)  # no graph to record: skip Function.apply
    return _Function.apply(input, target, weight, ignore_index, label_smoothing, lse_square_scale, softcap, backend)


def cross_entropy_fwd(input, target, weight=None, *, ignore_index=_DEFAULT_ignore_index, label_smoothing=_DEFAULT_label_smoothing, lse_square_scale=_DEFAULT_lse_square_scale, softcap=_DEFAULT_softcap, backend=None):
    """The outputs of cross_entropy (loss, z_loss, lse), without autograd."""
    ignore_index = _c.integer(ignore_index, 'ignore_index')
    label_smoothing = _c.probability(label_smoothing, 'label_smoothing')
    lse_square_scale = _c.eps_value(lse_square_scale, 'lse_square_scale')
    softcap = _c.eps_value(softcap, 'softcap')
    _check_forward(input, target, weight, ignore_index, label_smoothing, lse_square_scale, softcap)
    return _fwd(input, target, weight, ignore_index, label_smoothing, lse_square_scale, softcap, backend)


_forward_tuple = cross_entropy_fwd


def cross_entropy_bwd(dloss, dz_loss, input, target, weight, lse, *, ignore_index=_DEFAULT_ignore_index, label_smoothing=_DEFAULT_label_smoothing, lse_square_scale=_DEFAULT_lse_square_scale, softcap=_DEFAULT_softcap, backend=None):
    """The gradients of cross_entropy (dinput) from what the forward saved."""
    ignore_index = _c.integer(ignore_index, 'ignore_index')
    label_smoothing = _c.probability(label_smoothing, 'label_smoothing')
    lse_square_scale = _c.eps_value(lse_square_scale, 'lse_square_scale')
    softcap = _c.eps_value(softcap, 'softcap')
    _check_backward(dloss, dz_loss, input, target, weight, lse, ignore_index, label_smoothing, lse_square_scale, softcap)
    return _bwd(dloss, dz_loss, input, target, weight, lse, ignore_index, label_smoothing, lse_square_scale, softcap, backend)


class _Module(torch.nn.Module):
    def __init__(self, ignore_index=_DEFAULT_ignore_index, label_smoothing=_DEFAULT_label_smoothing, lse_square_scale=_DEFAULT_lse_square_scale, softcap=_DEFAULT_softcap, backend=None):
        super().__init__()
        ignore_index = _c.integer(ignore_index, 'ignore_index')
        self.ignore_index = ignore_index
        label_smoothing = _c.probability(label_smoothing, 'label_smoothing')
        self.label_smoothing = label_smoothing
        lse_square_scale = _c.eps_value(lse_square_scale, 'lse_square_scale')
        self.lse_square_scale = lse_square_scale
        softcap = _c.eps_value(softcap, 'softcap')
        self.softcap = softcap
        self.backend = backend

    def forward(self, input, target, weight=None):
        return cross_entropy(input=input, target=target, weight=weight, ignore_index=self.ignore_index, label_smoothing=self.label_smoothing, lse_square_scale=self.lse_square_scale, softcap=self.softcap, backend=self.backend)

    def extra_repr(self):
        return ', '.join([f'ignore_index={self.ignore_index!r}', f'label_smoothing={self.label_smoothing!r}', f'lse_square_scale={self.lse_square_scale!r}', f'softcap={self.softcap!r}'])
