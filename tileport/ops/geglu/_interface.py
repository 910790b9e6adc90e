"""The interface of geglu, generated from its spec by `tileport generate`.
Do not edit: change the spec and regenerate."""

# ruff: noqa
# fmt: off
import torch

from tileport.backends.registry import REGISTRY
from tileport.ops import _checks as _c
from tileport.ops.interface import runtime as _rt
from .spec import SPEC

OP = 'geglu'
_FLOAT = (torch.float16, torch.bfloat16, torch.float32, torch.float64,)
_INT64 = (torch.int64,)
_INT32 = (torch.int32,)
_INDEX = (torch.int64, torch.int32,)
_BOOL = (torch.bool,)
_DEFAULT_approximate = 'tanh'
_DEFAULT_casting = 'fp32'
_CHOICES_approximate = ('none', 'tanh')
_ALIASES_approximate = ()
_CHOICES_casting = ('fp32', 'eager')
_ALIASES_casting = ()


_FORWARD = _rt.form_declaration(SPEC, 'forward')
_BACKWARD = _rt.form_declaration(SPEC, 'backward')
_WHERE = SPEC.declaration.where


def _check_forward(gate, up, approximate, casting):
    """The forward's tensors against the declaration: each dimension bound once, checked everywhere."""
    if not (isinstance(gate, torch.Tensor) and gate.dtype in _FLOAT and gate.dim() >= 0):
        _rt.explain(_FORWARD, {'gate': gate, 'up': up}, {'approximate': approximate, 'casting': casting})
    lead_ = gate.shape[0:]
    if not (isinstance(up, torch.Tensor) and up.dtype == gate.dtype and up.dim() >= 0 and up.shape[0:] == lead_ and up.device == gate.device):
        _rt.explain(_FORWARD, {'gate': gate, 'up': up}, {'approximate': approximate, 'casting': casting})


def _check_backward(dy, gate, up, approximate, casting):
    """The backward's tensors against the declaration: each dimension bound once, checked everywhere."""
    if not (isinstance(dy, torch.Tensor) and dy.dtype in _FLOAT and dy.dim() >= 0):
        _rt.explain(_BACKWARD, {'dy': dy, 'gate': gate, 'up': up}, {'approximate': approximate, 'casting': casting})
    lead_ = dy.shape[0:]
    if not (isinstance(gate, torch.Tensor) and gate.dtype == dy.dtype and gate.dim() >= 0 and gate.shape[0:] == lead_ and gate.device == dy.device):
        _rt.explain(_BACKWARD, {'dy': dy, 'gate': gate, 'up': up}, {'approximate': approximate, 'casting': casting})
    if not (isinstance(up, torch.Tensor) and up.dtype == dy.dtype and up.dim() >= 0 and up.shape[0:] == lead_ and up.device == dy.device):
        _rt.explain(_BACKWARD, {'dy': dy, 'gate': gate, 'up': up}, {'approximate': approximate, 'casting': casting})


def _forward_shapes(gate, up):
    """The shapes of y from the dimensions the tensors bind."""
    lead_ = gate.shape[0:]
    return (*lead_,)


def _backward_shapes(dy, gate, up):
    """The shapes of dgate, dup from the dimensions the tensors bind."""
    lead_ = dy.shape[0:]
    return ((*lead_,), (*lead_,))


def _forward_impl(gate, up, approximate, casting, backend, out=None):
    impl = REGISTRY.kernels(OP, gate.device, (gate.dtype,), backend)
    if gate.numel() == 0:  # every output empty: no kernel is called
        shapes = (_forward_shapes(gate, up),)
        if _rt.all_empty(shapes):
            return (out[0] if out is not None else _rt.allocate(shapes, (gate.dtype,), gate.device)[0])
    gate = _rt.unit_last(gate)
    up = _rt.unit_last(up)
    if out is not None:
        return impl.forward(gate, up, approximate, casting, out=out)
    return impl.forward(gate, up, approximate, casting)


def _backward_impl(dy, gate, up, approximate, casting, backend):
    impl = REGISTRY.kernels(OP, dy.device, (dy.dtype,), backend)
    if dy.numel() == 0:  # every output empty: no kernel is called
        shapes = _backward_shapes(dy, gate, up)
        if _rt.all_empty(shapes):
            return _rt.allocate(shapes, (dy.dtype, dy.dtype), dy.device)
    dy = _rt.unit_last(dy)
    gate = _rt.unit_last(gate)
    up = _rt.unit_last(up)
    return impl.backward(dy, gate, up, approximate, casting)


def _fwd_op(gate, up, approximate, casting, backend):
    return _rt.as_tensors(_forward_impl(gate, up, approximate, casting, backend), gate)


def _fwd_fake(gate, up, approximate, casting, backend):
    return _rt.fake((_forward_shapes(gate, up),), (gate.dtype,), gate)[0]


_fwd_custom = torch.library.custom_op("tileport::geglu_fwd", _fwd_op, mutates_args=(), schema='(Tensor gate, Tensor up, str approximate, str casting, str? backend) -> Tensor')
_fwd_custom.register_fake(_fwd_fake)


def _fwd(gate, up, approximate, casting, backend):
    if torch.compiler.is_compiling():
        return _fwd_custom(gate, up, approximate, casting, backend)
    return _forward_impl(gate, up, approximate, casting, backend)


def _bwd_op(dy, gate, up, approximate, casting, backend):
    return _rt.as_tensors(_backward_impl(dy, gate, up, approximate, casting, backend), dy)


def _bwd_fake(dy, gate, up, approximate, casting, backend):
    return _rt.fake(_backward_shapes(dy, gate, up), (dy.dtype, dy.dtype), dy)


_bwd_custom = torch.library.custom_op("tileport::geglu_bwd", _bwd_op, mutates_args=(), schema='(Tensor dy, Tensor gate, Tensor up, str approximate, str casting, str? backend) -> (Tensor, Tensor)')
_bwd_custom.register_fake(_bwd_fake)


def _bwd(dy, gate, up, approximate, casting, backend):
    if torch.compiler.is_compiling():
        return _bwd_custom(dy, gate, up, approximate, casting, backend)
    return _backward_impl(dy, gate, up, approximate, casting, backend)


class _Function(torch.autograd.Function):
    @staticmethod
    def forward(ctx, gate, up, approximate, casting, backend):
        y = _fwd(gate, up, approximate, casting, backend)
        ctx.save_for_backward(gate, up)
        ctx.options = (approximate, casting, backend,)
        return y

    @staticmethod
    def backward(ctx, dy):
        gate, up = ctx.saved_tensors
        approximate, casting, backend = ctx.options
        dgate, dup = _bwd(dy, gate, up, approximate, casting, backend)
        need = ctx.needs_input_grad
        return (dgate if need[0] else None), (dup if need[1] else None), None, None, None


def geglu(gate, up, approximate=_DEFAULT_approximate, *, casting=_DEFAULT_casting, backend=None):
    """Differentiable geglu: gelu(gate) * up, gelu(v) = v / 2 * erfc(-v / sqrt 2) (none) or v * sigmoid(2 * sqrt(2/pi) * (v + 0.044715 v^3)) (tanh) (the contract: the operator's package)."""
    approximate = _c.choice(approximate, 'approximate', _CHOICES_approximate, _ALIASES_approximate)
    casting = _c.choice(casting, 'casting', _CHOICES_casting, _ALIASES_casting)
    _check_forward(gate, up, approximate, casting)
    if not ((gate.requires_grad or up.requires_grad) and torch.is_grad_enabled()):
        return _fwd(gate, up, approximate, casting, backend)  # no graph to record: skip Function.apply
    return _Function.apply(gate, up, approximate, casting, backend)


def geglu_fwd(gate, up, approximate=_DEFAULT_approximate, *, casting=_DEFAULT_casting, backend=None, out=None):
    """The outputs of geglu (y), without autograd."""
    approximate = _c.choice(approximate, 'approximate', _CHOICES_approximate, _ALIASES_approximate)
    casting = _c.choice(casting, 'casting', _CHOICES_casting, _ALIASES_casting)
    _check_forward(gate, up, approximate, casting)
    if out is not None:
        out = _rt.check_outs('geglu_fwd', out, (_forward_shapes(gate, up),), (gate.dtype,), gate.device, ('y',))
        return _forward_impl(gate, up, approximate, casting, backend, out[0])
    return _fwd(gate, up, approximate, casting, backend)


def _forward_tuple(gate, up, approximate=_DEFAULT_approximate, *, casting=_DEFAULT_casting, backend=None, out=None):
    return (geglu_fwd(gate=gate, up=up, approximate=approximate, casting=casting, backend=backend, out=out),)


def geglu_bwd(dy, gate, up, *, approximate=_DEFAULT_approximate, casting=_DEFAULT_casting, backend=None):
    """The gradients of geglu (dgate, dup) from what the forward saved."""
    approximate = _c.choice(approximate, 'approximate', _CHOICES_approximate, _ALIASES_approximate)
    casting = _c.choice(casting, 'casting', _CHOICES_casting, _ALIASES_casting)
    _check_backward(dy, gate, up, approximate, casting)
    return _bwd(dy, gate, up, approximate, casting, backend)


class _Module(torch.nn.Module):
    def __init__(self, approximate=_DEFAULT_approximate, casting=_DEFAULT_casting, backend=None):
        super().__init__()
        approximate = _c.choice(approximate, 'approximate', _CHOICES_approximate, _ALIASES_approximate)
        self.approximate = approximate
        casting = _c.choice(casting, 'casting', _CHOICES_casting, _ALIASES_casting)
        self.casting = casting
        self.backend = backend

    def forward(self, gate, up):
        return geglu(gate=gate, up=up, approximate=self.approximate, casting=self.casting, backend=self.backend)

    def extra_repr(self):
        return ', '.join([f'approximate={self.approximate!r}', f'casting={self.casting!r}'])
