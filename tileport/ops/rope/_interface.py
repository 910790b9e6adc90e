"""The interface of rope, generated from its spec by `tileport generate`.
Do not edit: change the spec and regenerate."""

# ruff: noqa
# fmt: off
import torch

from tileport.backends.registry import REGISTRY
from tileport.ops import _checks as _c
from tileport.ops.interface import runtime as _rt
from .spec import SPEC

OP = 'rope'
_FLOAT = (torch.float16, torch.bfloat16, torch.float32, torch.float64,)
_INT64 = (torch.int64,)
_INT32 = (torch.int32,)
_INDEX = (torch.int64, torch.int32,)
_BOOL = (torch.bool,)
_DEFAULT_interleaved = False
_DEFAULT_offset = 0


_FORWARD = _rt.form_declaration(SPEC, 'forward')
_BACKWARD = _rt.form_declaration(SPEC, 'backward')
_WHERE = SPEC.declaration.where


def _check_forward(q, k, cos, sin, position_ids, offsets, interleaved, offset):
    """The forward's tensors against the declaration: each dimension bound once, checked everywhere."""
    if not (isinstance(q, torch.Tensor) and q.dtype in _FLOAT and q.dim() == 4):
        _rt.explain(_FORWARD, {'q': q, 'k': k, 'cos': cos, 'sin': sin, 'position_ids': position_ids, 'offsets': offsets}, {'interleaved': interleaved, 'offset': offset})
    B, T, Hq, D = q.shape
    Hk = None
    if k is not None:
        if not (isinstance(k, torch.Tensor) and k.dtype == q.dtype and k.dim() == 4 and k.shape[0] == B and k.shape[1] == T and k.shape[3] == D and k.device == q.device):
            _rt.explain(_FORWARD, {'q': q, 'k': k, 'cos': cos, 'sin': sin, 'position_ids': position_ids, 'offsets': offsets}, {'interleaved': interleaved, 'offset': offset})
        Hk = k.shape[2]
    if not (isinstance(cos, torch.Tensor) and cos.dtype == q.dtype and cos.dim() == 2 and cos.device == q.device):
        _rt.explain(_FORWARD, {'q': q, 'k': k, 'cos': cos, 'sin': sin, 'position_ids': position_ids, 'offsets': offsets}, {'interleaved': interleaved, 'offset': offset})
    T_ro = cos.shape[0]
    R = cos.shape[1] * 2
    if not (isinstance(sin, torch.Tensor) and sin.dtype == q.dtype and sin.dim() == 2 and sin.shape[0] == T_ro and sin.shape[1] * 2 == R and sin.device == q.device):
        _rt.explain(_FORWARD, {'q': q, 'k': k, 'cos': cos, 'sin': sin, 'position_ids': position_ids, 'offsets': offsets}, {'interleaved': interleaved, 'offset': offset})
    if position_ids is not None:
        if not (isinstance(position_ids, torch.Tensor) and position_ids.dtype in _INDEX and position_ids.dim() == 2 and position_ids.shape[0] == B and position_ids.shape[1] == T and position_ids.device == q.device):
            _rt.explain(_FORWARD, {'q': q, 'k': k, 'cos': cos, 'sin': sin, 'position_ids': position_ids, 'offsets': offsets}, {'interleaved': interleaved, 'offset': offset})
    if offsets is not None:
        if not (isinstance(offsets, torch.Tensor) and offsets.dtype in _INDEX and offsets.dim() == 1 and offsets.shape[0] == B and offsets.device == q.device):
            _rt.explain(_FORWARD, {'q': q, 'k': k, 'cos': cos, 'sin': sin, 'position_ids': position_ids, 'offsets': offsets}, {'interleaved': interleaved, 'offset': offset})
    if not (R <= D):
        _rt.explain(_FORWARD, {'q': q, 'k': k, 'cos': cos, 'sin': sin, 'position_ids': position_ids, 'offsets': offsets}, {'interleaved': interleaved, 'offset': offset})


def _check_backward(dq_out, dk_out, cos, sin, position_ids, offsets, interleaved, offset):
    """The backward's tensors against the declaration: each dimension bound once, checked everywhere."""
    if not (isinstance(dq_out, torch.Tensor) and dq_out.dtype in _FLOAT and dq_out.dim() == 4):
        _rt.explain(_BACKWARD, {'dq_out': dq_out, 'dk_out': dk_out, 'cos': cos, 'sin': sin, 'position_ids': position_ids, 'offsets': offsets}, {'interleaved': interleaved, 'offset': offset})
    B, T, Hq, D = dq_out.shape
    Hk = None
    if dk_out is not None:
        if not (isinstance(dk_out, torch.Tensor) and dk_out.dtype == dq_out.dtype and dk_out.dim() == 4 and dk_out.shape[0] == B and dk_out.shape[1] == T and dk_out.shape[3] == D and dk_out.device == dq_out.device):
            _rt.explain(_BACKWARD, {'dq_out': dq_out, 'dk_out': dk_out, 'cos': cos, 'sin': sin, 'position_ids': position_ids, 'offsets': offsets}, {'interleaved': interleaved, 'offset': offset})
        Hk = dk_out.shape[2]
    if not (isinstance(cos, torch.Tensor) and cos.dtype == dq_out.dtype and cos.dim() == 2 and cos.device == dq_out.device):
        _rt.explain(_BACKWARD, {'dq_out': dq_out, 'dk_out': dk_out, 'cos': cos, 'sin': sin, 'position_ids': position_ids, 'offsets': offsets}, {'interleaved': interleaved, 'offset': offset})
    T_ro = cos.shape[0]
    R = cos.shape[1] * 2
    if not (isinstance(sin, torch.Tensor) and sin.dtype == dq_out.dtype and sin.dim() == 2 and sin.shape[0] == T_ro and sin.shape[1] * 2 == R and sin.device == dq_out.device):
        _rt.explain(_BACKWARD, {'dq_out': dq_out, 'dk_out': dk_out, 'cos': cos, 'sin': sin, 'position_ids': position_ids, 'offsets': offsets}, {'interleaved': interleaved, 'offset': offset})
    if position_ids is not None:
        if not (isinstance(position_ids, torch.Tensor) and position_ids.dtype in _INDEX and position_ids.dim() == 2 and position_ids.shape[0] == B and position_ids.shape[1] == T and position_ids.device == dq_out.device):
            _rt.explain(_BACKWARD, {'dq_out': dq_out, 'dk_out': dk_out, 'cos': cos, 'sin': sin, 'position_ids': position_ids, 'offsets': offsets}, {'interleaved': interleaved, 'offset': offset})
    if offsets is not None:
        if not (isinstance(offsets, torch.Tensor) and offsets.dtype in _INDEX and offsets.dim() == 1 and offsets.shape[0] == B and offsets.device == dq_out.device):
            _rt.explain(_BACKWARD, {'dq_out': dq_out, 'dk_out': dk_out, 'cos': cos, 'sin': sin, 'position_ids': position_ids, 'offsets': offsets}, {'interleaved': interleaved, 'offset': offset})
    if not (R <= D):
        _rt.explain(_BACKWARD, {'dq_out': dq_out, 'dk_out': dk_out, 'cos': cos, 'sin': sin, 'position_ids': position_ids, 'offsets': offsets}, {'interleaved': interleaved, 'offset': offset})


def _forward_shapes(q, k, cos, sin, position_ids, offsets):
    """The shapes of q_out, k_out from the dimensions the tensors bind."""
    B = q.shape[0]
    T = q.shape[1]
    Hq = q.shape[2]
    D = q.shape[3]
    Hk = None
    if k is not None:
        Hk = k.shape[2]
    return ((B, T, Hq, D), ((B, T, Hk, D) if k is not None else None))


def _backward_shapes(dq_out, dk_out, cos, sin, position_ids, offsets):
    """The shapes of dq, dk from the dimensions the tensors bind."""
    B = dq_out.shape[0]
    T = dq_out.shape[1]
    Hq = dq_out.shape[2]
    D = dq_out.shape[3]
    Hk = None
    if dk_out is not None:
        Hk = dk_out.shape[2]
    return ((B, T, Hq, D), ((B, T, Hk, D) if dk_out is not None else None))


def _forward_impl(q, k, cos, sin, position_ids, offsets, interleaved, offset, backend, out=None):
    impl = REGISTRY.kernels(OP, q.device, (q.dtype,), backend)
    if q.numel() == 0:  # every output empty: no kernel is called
        shapes = _forward_shapes(q, k, cos, sin, position_ids, offsets)
        if _rt.all_empty(shapes):
            return (out if out is not None else _rt.allocate(shapes, (q.dtype, q.dtype), q.device))
    q = _rt.unit_last(q)
    if k is not None:
        k = _rt.unit_last(k)
    cos = _rt.unit_last(cos)
    sin = _rt.unit_last(sin)
    if position_ids is not None:
        position_ids = _rt.unit_last(position_ids)
    if offsets is not None:
        offsets = _rt.unit_last(offsets)
    if out is not None:
        return impl.forward(q, k, cos, sin, position_ids, offsets, interleaved, offset, out=out)
    return impl.forward(q, k, cos, sin, position_ids, offsets, interleaved, offset)


def _backward_impl(dq_out, dk_out, cos, sin, position_ids, offsets, interleaved, offset, backend):
    impl = REGISTRY.kernels(OP, dq_out.device, (dq_out.dtype,), backend)
    if dq_out.numel() == 0:  # every output empty: no kernel is called
        shapes = _backward_shapes(dq_out, dk_out, cos, sin, position_ids, offsets)
        if _rt.all_empty(shapes):
            return _rt.allocate(shapes, (dq_out.dtype, dq_out.dtype), dq_out.device)
    dq_out = _rt.unit_last(dq_out)
    if dk_out is not None:
        dk_out = _rt.unit_last(dk_out)
    cos = _rt.unit_last(cos)
    sin = _rt.unit_last(sin)
    if position_ids is not None:
        position_ids = _rt.unit_last(position_ids)
    if offsets is not None:
        offsets = _rt.unit_last(offsets)
    return impl.backward(dq_out, dk_out, cos, sin, position_ids, offsets, interleaved, offset)


def _fwd_op(q, k, cos, sin, position_ids, offsets, interleaved, offset, backend):
    return _rt.as_tensors(_forward_impl(q, k, cos, sin, position_ids, offsets, interleaved, offset, backend), q)


def _fwd_fake(q, k, cos, sin, position_ids, offsets, interleaved, offset, backend):
    return _rt.fake(_forward_shapes(q, k, cos, sin, position_ids, offsets), (q.dtype, q.dtype), q)


_fwd_custom = torch.library.custom_op("tileport::rope_fwd", _fwd_op, mutates_args=(), schema='(Tensor q, Tensor? k, Tensor cos, Tensor sin, Tensor? position_ids, Tensor? offsets, bool interleaved, int offset, str? backend) -> (Tensor, Tensor)')
_fwd_custom.register_fake(_fwd_fake)


def _fwd(q, k, cos, sin, position_ids, offsets, interleaved, offset, backend):
    if torch.compiler.is_compiling():
        q_out, k_out = _fwd_custom(q, k, cos, sin, position_ids, offsets, interleaved, offset, backend)
        return (q_out, (k_out if k is not None else None))
    return _forward_impl(q, k, cos, sin, position_ids, offsets, interleaved, offset, backend)


def _bwd_op(dq_out, dk_out, cos, sin, position_ids, offsets, interleaved, offset, backend):
    return _rt.as_tensors(_backward_impl(dq_out, dk_out, cos, sin, position_ids, offsets, interleaved, offset, backend), dq_out)


def _bwd_fake(dq_out, dk_out, cos, sin, position_ids, offsets, interleaved, offset, backend):
    return _rt.fake(_backward_shapes(dq_out, dk_out, cos, sin, position_ids, offsets), (dq_out.dtype, dq_out.dtype), dq_out)


_bwd_custom = torch.library.custom_op("tileport::rope_bwd", _bwd_op, mutates_args=(), schema='(Tensor dq_out, Tensor? dk_out, Tensor cos, Tensor sin, Tensor? position_ids, Tensor? offsets, bool interleaved, int offset, str? backend) -> (Tensor, Tensor)')
_bwd_custom.register_fake(_bwd_fake)


def _bwd(dq_out, dk_out, cos, sin, position_ids, offsets, interleaved, offset, backend):
    if torch.compiler.is_compiling():
        dq, dk = _bwd_custom(dq_out, dk_out, cos, sin, position_ids, offsets, interleaved, offset, backend)
        return (dq, (dk if dk_out is not None else None))
    return _backward_impl(dq_out, dk_out, cos, sin, position_ids, offsets, interleaved, offset, backend)


class _Function(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, cos, sin, position_ids, offsets, interleaved, offset, backend):
        q_out, k_out = _fwd(q, k, cos, sin, position_ids, offsets, interleaved, offset, backend)
        ctx.save_for_backward(cos, sin, position_ids, offsets)
        ctx.options = (interleaved, offset, backend,)
        return (q_out, k_out)

    @staticmethod
    def backward(ctx, dq_out, dk_out):
        cos, sin, position_ids, offsets = ctx.saved_tensors
        interleaved, offset, backend = ctx.options
        dq, dk = _bwd(dq_out, dk_out, cos, sin, position_ids, offsets, interleaved, offset, backend)
        need = ctx.needs_input_grad
        return (dq if need[0] else None), (dk if need[1] else None), None, None, None, None, None, None, None


def rope(q, k, cos, sin, position_ids=None, offsets=None, *, interleaved=_DEFAULT_interleaved, offset=_DEFAULT_offset, backend=None):
    """Differentiable rope: x1 * cos - x2 * sin, x2 * cos + x1 * sin over the first R columns' pairs; the rest passes through (the contract: the operator's package)."""
    interleaved = _c.flag(interleaved, 'interleaved')
    offset = _c.integer(offset, 'offset')
    _check_forward(q, k, cos, sin, position_ids, offsets, interleaved, offset)
    if not ((q.requires_grad or (k is not None and k.requires_grad)) and torch.is_grad_enabled()):
        return _fwd(q, k, cos, sin, position_ids, offsets, interleaved, offset, backend)  # no graph to record: skip Function.apply
    return _Function.apply(q, k, cos, sin, position_ids, offsets, interleaved, offset, backend)


def rope_fwd(q, k, cos, sin, position_ids=None, offsets=None, *, interleaved=_DEFAULT_interleaved, offset=_DEFAULT_offset, backend=None, out=None):
    """The outputs of rope (q_out, k_out), without autograd."""
    interleaved = _c.flag(interleaved, 'interleaved')
    offset = _c.integer(offset, 'offset')
    _check_forward(q, k, cos, sin, position_ids, offsets, interleaved, offset)
    if out is not None:
        out = _rt.check_outs('rope_fwd', out, _forward_shapes(q, k, cos, sin, position_ids, offsets), (q.dtype, q.dtype), q.device, ('q_out', 'k_out'))
        return _forward_impl(q, k, cos, sin, position_ids, offsets, interleaved, offset, backend, out)
    return _fwd(q, k, cos, sin, position_ids, offsets, interleaved, offset, backend)


_forward_tuple = rope_fwd


def rope_bwd(dq_out, dk_out, cos, sin, position_ids=None, offsets=None, *, interleaved=_DEFAULT_interleaved, offset=_DEFAULT_offset, backend=None):
    """The gradients of rope (dq, dk) from what the forward saved."""
    interleaved = _c.flag(interleaved, 'interleaved')
    offset = _c.integer(offset, 'offset')
    _check_backward(dq_out, dk_out, cos, sin, position_ids, offsets, interleaved, offset)
    return _bwd(dq_out, dk_out, cos, sin, position_ids, offsets, interleaved, offset, backend)


class _Module(torch.nn.Module):
    def __init__(self, interleaved=_DEFAULT_interleaved, offset=_DEFAULT_offset, backend=None):
        super().__init__()
        interleaved = _c.flag(interleaved, 'interleaved')
        self.interleaved = interleaved
        offset = _c.integer(offset, 'offset')
        self.offset = offset
        self.backend = backend

    def forward(self, q, k, cos, sin, position_ids=None, offsets=None):
        return rope(q=q, k=k, cos=cos, sin=sin, position_ids=position_ids, offsets=offsets, interleaved=self.interleaved, offset=self.offset, backend=self.backend)

    def extra_repr(self):
        return ', '.join([f'interleaved={self.interleaved!r}', f'offset={self.offset!r}'])
