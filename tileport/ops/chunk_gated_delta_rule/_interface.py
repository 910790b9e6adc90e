"""The interface of chunk_gated_delta_rule, generated from its spec by `tileport generate`.
Do not edit: change the spec and regenerate."""

# ruff: noqa
# fmt: off
import torch

from tileport.backends.registry import REGISTRY
from tileport.ops import _checks as _c
from tileport.ops.interface import runtime as _rt
from .spec import SPEC

OP = 'chunk_gated_delta_rule'
_FLOAT = (torch.float16, torch.bfloat16, torch.float32, torch.float64,)
_INT64 = (torch.int64,)
_INT32 = (torch.int32,)
_INDEX = (torch.int64, torch.int32,)
_BOOL = (torch.bool,)
_DEFAULT_scale = 1.0


_FORWARD = _rt.form_declaration(SPEC, 'forward')
_BACKWARD = _rt.form_declaration(SPEC, 'backward')
_WHERE = SPEC.declaration.where


def _check_forward(q, k, v, g, beta, initial_state, cu_seqlens, scale):
    """The forward's tensors against the declaration: each dimension bound once, checked everywhere."""
    if not (isinstance(q, torch.Tensor) and q.dtype in _FLOAT and q.dim() == 4):
        _rt.explain(_FORWARD, {'q': q, 'k': k, 'v': v, 'g': g, 'beta': beta, 'initial_state': initial_state, 'cu_seqlens': cu_seqlens}, {'scale': scale})
    B, T, H, K = q.shape
    if not (isinstance(k, torch.Tensor) and k.dtype == q.dtype and k.dim() == 4 and k.shape[0] == B and k.shape[1] == T and k.shape[2] == H and k.shape[3] == K and k.device == q.device):
        _rt.explain(_FORWARD, {'q': q, 'k': k, 'v': v, 'g': g, 'beta': beta, 'initial_state': initial_state, 'cu_seqlens': cu_seqlens}, {'scale': scale})
    if not (isinstance(v, torch.Tensor) and v.dtype == q.dtype and v.dim() == 4 and v.shape[0] == B and v.shape[1] == T and v.device == q.device):
        _rt.explain(_FORWARD, {'q': q, 'k': k, 'v': v, 'g': g, 'beta': beta, 'initial_state': initial_state, 'cu_seqlens': cu_seqlens}, {'scale': scale})
    HV = v.shape[2]
    V = v.shape[3]
    if not (isinstance(g, torch.Tensor) and g.dtype in _FLOAT and g.dim() == 3 and g.shape[0] == B and g.shape[1] == T and g.shape[2] == HV and g.device == q.device):
        _rt.explain(_FORWARD, {'q': q, 'k': k, 'v': v, 'g': g, 'beta': beta, 'initial_state': initial_state, 'cu_seqlens': cu_seqlens}, {'scale': scale})
    if not (isinstance(beta, torch.Tensor) and beta.dtype in _FLOAT and beta.dim() == 3 and beta.shape[0] == B and beta.shape[1] == T and beta.shape[2] == HV and beta.device == q.device):
        _rt.explain(_FORWARD, {'q': q, 'k': k, 'v': v, 'g': g, 'beta': beta, 'initial_state': initial_state, 'cu_seqlens': cu_seqlens}, {'scale': scale})
    N = None
    if initial_state is not None:
        if not (isinstance(initial_state, torch.Tensor) and initial_state.dtype in _FLOAT and initial_state.dim() == 4 and initial_state.shape[1] == HV and initial_state.shape[2] == K and initial_state.shape[3] == V and initial_state.device == q.device):
            _rt.explain(_FORWARD, {'q': q, 'k': k, 'v': v, 'g': g, 'beta': beta, 'initial_state': initial_state, 'cu_seqlens': cu_seqlens}, {'scale': scale})
        N = initial_state.shape[0]
    S = None
    if cu_seqlens is not None:
        if not (isinstance(cu_seqlens, torch.Tensor) and cu_seqlens.dtype in _INT64 and cu_seqlens.dim() == 1 and cu_seqlens.device == q.device):
            _rt.explain(_FORWARD, {'q': q, 'k': k, 'v': v, 'g': g, 'beta': beta, 'initial_state': initial_state, 'cu_seqlens': cu_seqlens}, {'scale': scale})
        S = cu_seqlens.shape[0]
    if not _WHERE[0].holds({'HV': HV, 'H': H}):
        _rt.explain(_FORWARD, {'q': q, 'k': k, 'v': v, 'g': g, 'beta': beta, 'initial_state': initial_state, 'cu_seqlens': cu_seqlens}, {'scale': scale})
    if S is not None and N is not None and not (S == N + 1):
        _rt.explain(_FORWARD, {'q': q, 'k': k, 'v': v, 'g': g, 'beta': beta, 'initial_state': initial_state, 'cu_seqlens': cu_seqlens}, {'scale': scale})


def _check_backward(q, k, v, g, beta, initial_state, cu_seqlens, do, dfinal_state, scale):
    """The backward's tensors against the declaration: each dimension bound once, checked everywhere."""
    if not (isinstance(q, torch.Tensor) and q.dtype in _FLOAT and q.dim() == 4):
        _rt.explain(_BACKWARD, {'q': q, 'k': k, 'v': v, 'g': g, 'beta': beta, 'initial_state': initial_state, 'cu_seqlens': cu_seqlens, 'do': do, 'dfinal_state': dfinal_state}, {'scale': scale})
    B, T, H, K = q.shape
    if not (isinstance(k, torch.Tensor) and k.dtype == q.dtype and k.dim() == 4 and k.shape[0] == B and k.shape[1] == T and k.shape[2] == H and k.shape[3] == K and k.device == q.device):
        _rt.explain(_BACKWARD, {'q': q, 'k': k, 'v': v, 'g': g, 'beta': beta, 'initial_state': initial_state, 'cu_seqlens': cu_seqlens, 'do': do, 'dfinal_state': dfinal_state}, {'scale': scale})
    if not (isinstance(v, torch.Tensor) and v.dtype == q.dtype and v.dim() == 4 and v.shape[0] == B and v.shape[1] == T and v.device == q.device):
        _rt.explain(_BACKWARD, {'q': q, 'k': k, 'v': v, 'g': g, 'beta': beta, 'initial_state': initial_state, 'cu_seqlens': cu_seqlens, 'do': do, 'dfinal_state': dfinal_state}, {'scale': scale})
    HV = v.shape[2]
    V = v.shape[3]
    if not (isinstance(g, torch.Tensor) and g.dtype in _FLOAT and g.dim() == 3 and g.shape[0] == B and g.shape[1] == T and g.shape[2] == HV and g.device == q.device):
        _rt.explain(_BACKWARD, {'q': q, 'k': k, 'v': v, 'g': g, 'beta': beta, 'initial_state': initial_state, 'cu_seqlens': cu_seqlens, 'do': do, 'dfinal_state': dfinal_state}, {'scale': scale})
    if not (isinstance(beta, torch.Tensor) and beta.dtype in _FLOAT and beta.dim() == 3 and beta.shape[0] == B and beta.shape[1] == T and beta.shape[2] == HV and beta.device == q.device):
        _rt.explain(_BACKWARD, {'q': q, 'k': k, 'v': v, 'g': g, 'beta': beta, 'initial_state': initial_state, 'cu_seqlens': cu_seqlens, 'do': do, 'dfinal_state': dfinal_state}, {'scale': scale})
    N = None
    if initial_state is not None:
        if not (isinstance(initial_state, torch.Tensor) and initial_state.dtype in _FLOAT and initial_state.dim() == 4 and initial_state.shape[1] == HV and initial_state.shape[2] == K and initial_state.shape[3] == V and initial_state.device == q.device):
            _rt.explain(_BACKWARD, {'q': q, 'k': k, 'v': v, 'g': g, 'beta': beta, 'initial_state': initial_state, 'cu_seqlens': cu_seqlens, 'do': do, 'dfinal_state': dfinal_state}, {'scale': scale})
        N = initial_state.shape[0]
    S = None
    if cu_seqlens is not None:
        if not (isinstance(cu_seqlens, torch.Tensor) and cu_seqlens.dtype in _INT64 and cu_seqlens.dim() == 1 and cu_seqlens.device == q.device):
            _rt.explain(_BACKWARD, {'q': q, 'k': k, 'v': v, 'g': g, 'beta': beta, 'initial_state': initial_state, 'cu_seqlens': cu_seqlens, 'do': do, 'dfinal_state': dfinal_state}, {'scale': scale})
        S = cu_seqlens.shape[0]
    if not (isinstance(do, torch.Tensor) and do.dtype == q.dtype and do.dim() == 4 and do.shape[0] == B and do.shape[1] == T and do.shape[2] == HV and do.shape[3] == V and do.device == q.device):
        _rt.explain(_BACKWARD, {'q': q, 'k': k, 'v': v, 'g': g, 'beta': beta, 'initial_state': initial_state, 'cu_seqlens': cu_seqlens, 'do': do, 'dfinal_state': dfinal_state}, {'scale': scale})
    if dfinal_state is not None:
        if not (isinstance(dfinal_state, torch.Tensor) and isinstance(q, torch.Tensor) and dfinal_state.dtype == (torch.float64 if q.dtype == torch.float64 else torch.float32) and dfinal_state.dim() == 4 and (N is None or dfinal_state.shape[0] == N) and dfinal_state.shape[1] == HV and dfinal_state.shape[2] == K and dfinal_state.shape[3] == V and dfinal_state.device == q.device):
            _rt.explain(_BACKWARD, {'q': q, 'k': k, 'v': v, 'g': g, 'beta': beta, 'initial_state': initial_state, 'cu_seqlens': cu_seqlens, 'do': do, 'dfinal_state': dfinal_state}, {'scale': scale})
        if N is None:
            N = dfinal_state.shape[0]
    if not _WHERE[0].holds({'HV': HV, 'H': H}):
        _rt.explain(_BACKWARD, {'q': q, 'k': k, 'v': v, 'g': g, 'beta': beta, 'initial_state': initial_state, 'cu_seqlens': cu_seqlens, 'do': do, 'dfinal_state': dfinal_state}, {'scale': scale})
    if S is not None and N is not None and not (S == N + 1):
        _rt.explain(_BACKWARD, {'q': q, 'k': k, 'v': v, 'g': g, 'beta': beta, 'initial_state': initial_state, 'cu_seqlens': cu_seqlens, 'do': do, 'dfinal_state': dfinal_state}, {'scale': scale})


def _forward_shapes(q, k, v, g, beta, initial_state, cu_seqlens):
    """The shapes of o, final_state from the dimensions the tensors bind."""
    B = q.shape[0]
    T = q.shape[1]
    K = q.shape[3]
    HV = v.shape[2]
    V = v.shape[3]
    N = None
    if initial_state is not None:
        N = initial_state.shape[0]
    return ((B, T, HV, V), ((N, HV, K, V) if initial_state is not None else None))


def _backward_shapes(q, k, v, g, beta, initial_state, cu_seqlens, do, dfinal_state):
    """The shapes of dq, dk, dv, dg, dbeta, dinitial_state from the dimensions the tensors bind."""
    B = q.shape[0]
    T = q.shape[1]
    H = q.shape[2]
    K = q.shape[3]
    HV = v.shape[2]
    V = v.shape[3]
    N = None
    if initial_state is not None:
        N = initial_state.shape[0]
    return ((B, T, H, K), (B, T, H, K), (B, T, HV, V), (B, T, HV), (B, T, HV), ((N, HV, K, V) if initial_state is not None and dfinal_state is not None else None))


def _forward_impl(q, k, v, g, beta, initial_state, cu_seqlens, scale, backend):
    impl = REGISTRY.kernels(OP, q.device, (q.dtype, g.dtype, beta.dtype) + (() if initial_state is None else (initial_state.dtype,)), backend)
    if q.numel() == 0:  # every output empty: no kernel is called
        shapes = _forward_shapes(q, k, v, g, beta, initial_state, cu_seqlens)
        if _rt.all_empty(shapes):
            return _rt.allocate(shapes, (q.dtype, _rt.stat_dtype(q.dtype)), q.device)
    return impl.forward(q, k, v, g, beta, initial_state, cu_seqlens, scale)


def _backward_impl(q, k, v, g, beta, initial_state, cu_seqlens, do, dfinal_state, scale, backend):
    impl = REGISTRY.kernels(OP, q.device, (q.dtype, g.dtype, beta.dtype) + (() if initial_state is None else (initial_state.dtype,)), backend)
    if q.numel() == 0:  # every output empty: no kernel is called
        shapes = _backward_shapes(q, k, v, g, beta, initial_state, cu_seqlens, do, dfinal_state)
        if _rt.all_empty(shapes):
            return _rt.allocate(shapes, (q.dtype, q.dtype, q.dtype, g.dtype, beta.dtype, (initial_state.dtype if initial_state is not None else None)), q.device)
    return impl.backward(q, k, v, g, beta, initial_state, cu_seqlens, do, dfinal_state, scale)


def _fwd_op(q, k, v, g, beta, initial_state, cu_seqlens, scale, backend):
    return _rt.as_tensors(_forward_impl(q, k, v, g, beta, initial_state, cu_seqlens, scale, backend), q)


def _fwd_fake(q, k, v, g, beta, initial_state, cu_seqlens, scale, backend):
    return _rt.fake(_forward_shapes(q, k, v, g, beta, initial_state, cu_seqlens), (q.dtype, _rt.stat_dtype(q.dtype)), q)


_fwd_custom = torch.library.custom_op("tileport::chunk_gated_delta_rule_fwd", _fwd_op, mutates_args=(), schema='(Tensor q, Tensor k, Tensor v, Tensor g, Tensor beta, Tensor? initial_state, Tensor? cu_seqlens, float scale, str? backend) -> (Tensor, Tensor)')
_fwd_custom.register_fake(_fwd_fake)


def _fwd(q, k, v, g, beta, initial_state, cu_seqlens, scale, backend):
    if torch.compiler.is_compiling():
        o, final_state = _fwd_custom(q, k, v, g, beta, initial_state, cu_seqlens, scale, backend)
        return (o, (final_state if initial_state is not None else None))
    return _forward_impl(q, k, v, g, beta, initial_state, cu_seqlens, scale, backend)


def _bwd_op(q, k, v, g, beta, initial_state, cu_seqlens, do, dfinal_state, scale, backend):
    return _rt.as_tensors(_backward_impl(q, k, v, g, beta, initial_state, cu_seqlens, do, dfinal_state, scale, backend), q)


def _bwd_fake(q, k, v, g, beta, initial_state, cu_seqlens, do, dfinal_state, scale, backend):
    return _rt.fake(_backward_shapes(q, k, v, g, beta, initial_state, cu_seqlens, do, dfinal_state), (q.dtype, q.dtype, q.dtype, g.dtype, beta.dtype, (initial_state.dtype if initial_state is not None else None)), q)


_bwd_custom = torch.library.custom_op("tileport::chunk_gated_delta_rule_bwd", _bwd_op, mutates_args=(), schema='(Tensor q, Tensor k, Tensor v, Tensor g, Tensor beta, Tensor? initial_state, Tensor? cu_seqlens, Tensor do, Tensor? dfinal_state, float scale, str? backend) -> (Tensor, Tensor, Tensor, Tensor, Tensor, Tensor)')
_bwd_custom.register_fake(_bwd_fake)


def _bwd(q, k, v, g, beta, initial_state, cu_seqlens, do, dfinal_state, scale, backend):
    if torch.compiler.is_compiling():
        dq, dk, dv, dg, dbeta, dinitial_state = _bwd_custom(q, k, v, g, beta, initial_state, cu_seqlens, do, dfinal_state, scale, backend)
        return (dq, dk, dv, dg, dbeta, (dinitial_state if initial_state is not None and dfinal_state is not None else None))
    return _backward_impl(q, k, v, g, beta, initial_state, cu_seqlens, do, dfinal_state, scale, backend)


class _Function(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, g, beta, initial_state, cu_seqlens, scale, backend):
        o, final_state = _fwd(q, k, v, g, beta, initial_state, cu_seqlens, scale, backend)
        ctx.save_for_backward(q, k, v, g, beta, initial_state, cu_seqlens)
        ctx.options = (scale, backend,)
        return (o, final_state)

    @staticmethod
    def backward(ctx, do, dfinal_state):
        q, k, v, g, beta, initial_state, cu_seqlens = ctx.saved_tensors
        scale, backend = ctx.options
        dq, dk, dv, dg, dbeta, dinitial_state = _bwd(q, k, v, g, beta, initial_state, cu_seqlens, do, dfinal_state, scale, backend)
        need = ctx.needs_input_grad
        return (dq if need[0] else None), (dk if need[1] else None), (dv if need[2] else None), (dg if need[3] else None), (dbeta if need[4] else None), (dinitial_state if need[5] else None), None, None, None


def chunk_gated_delta_rule(q, k, v, g, beta, initial_state=None, cu_seqlens=None, *, scale=_DEFAULT_scale, backend=None):
    """Differentiable chunk_gated_delta_rule: S <- exp(g) S; S <- S + beta k (v - S^T k)^T; o = scale S^T q, per token (the chunked WY form) (the contract: the operator's package)."""
    scale = _c.finite_real(scale, 'scale')
    _check_forward(q, k, v, g, beta, initial_state, cu_seqlens, scale)
    if not ((q.requires_grad or k.requires_grad or v.requires_grad or g.requires_grad or beta.requires_grad or (initial_state is not None and initial_state.requires_grad)) and torch.is_grad_enabled()):
        return _fwd(q, k, v, g, beta, initial_state, cu_seqlens, scale, backend)  # no graph to record: skip Function.apply
    return _Function.apply(q, k, v, g, beta, initial_state, cu_seqlens, scale, backend)


def chunk_gated_delta_rule_fwd(q, k, v, g, beta, initial_state=None, cu_seqlens=None, *, scale=_DEFAULT_scale, backend=None):
    """The outputs of chunk_gated_delta_rule (o, final_state), without autograd."""
    scale = _c.finite_real(scale, 'scale')
    _check_forward(q, k, v, g, beta, initial_state, cu_seqlens, scale)
    return _fwd(q, k, v, g, beta, initial_state, cu_seqlens, scale, backend)


_forward_tuple = chunk_gated_delta_rule_fwd


def chunk_gated_delta_rule_bwd(q, k, v, g, beta, initial_state, cu_seqlens, do, dfinal_state=None, *, scale=_DEFAULT_scale, backend=None):
    """The gradients of chunk_gated_delta_rule (dq, dk, dv, dg, dbeta, dinitial_state) from what the forward saved."""
    scale = _c.finite_real(scale, 'scale')
    _check_backward(q, k, v, g, beta, initial_state, cu_seqlens, do, dfinal_state, scale)
    return _bwd(q, k, v, g, beta, initial_state, cu_seqlens, do, dfinal_state, scale, backend)


class _Module(torch.nn.Module):
    def __init__(self, scale=_DEFAULT_scale, backend=None):
        super().__init__()
        scale = _c.finite_real(scale, 'scale')
        self.scale = scale
        self.backend = backend

    def forward(self, q, k, v, g, beta, initial_state=None, cu_seqlens=None):
        return chunk_gated_delta_rule(q=q, k=k, v=v, g=g, beta=beta, initial_state=initial_state, cu_seqlens=cu_seqlens, scale=self.scale, backend=self.backend)

    def extra_repr(self):
        return ', '.join([f'scale={self.scale!r}'])
