"""chunk_gated_delta_rule's spec: its tensors by named dimensions (packed sequences and states included), the
float64 golden (the token-by-token recurrence), and what the generic layers (verify, bench, cases, docs) read."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from ...backends import sequences
from .. import spec as s
from ..l2norm import l2norm

INPUTS = (
    "q: [B, T, H, K] float grad",
    "k: [B, T, H, K] like:q grad",
    "v: [B, T, HV, V] like:q grad",
    "g: [B, T, HV] float grad",
    "beta: [B, T, HV] float grad",
    "initial_state: [N, HV, K, V] float grad optional",
    "cu_seqlens: [S] int64 optional",
)
L2NORM = s.Attr("use_qk_l2norm_in_kernel", False, "a bool: q and k L2-normalized first (eps 1e-6)", s.BOOL)
L2NORM_EPS = 1e-6  # fla's and transformers' l2norm inside the kernel


def default_scale(K: int) -> float:
    """fla's default scale, K ** -0.5 (1 for K = 0, where o is 0 whatever the scale)."""
    return K**-0.5 if K else 1.0


def _l2norm(x: torch.Tensor) -> torch.Tensor:
    return x * torch.rsqrt((x * x).sum(-1, keepdim=True) + L2NORM_EPS)


def function(
    q, k, v, g, beta, initial_state=None, cu_seqlens=None, scale=None, use_qk_l2norm_in_kernel=False, backend=None
):
    """``(o, final_state)``: the derived function with q and k first normalized by tileport's l2norm (eps 1e-6,
    differentiable) where asked, and ``scale=None`` as K ** -0.5; final_state is None without an initial state."""
    if use_qk_l2norm_in_kernel:
        q, k = l2norm(q, L2NORM_EPS, backend=backend), l2norm(k, L2NORM_EPS, backend=backend)
    scale = default_scale(q.shape[-1]) if scale is None else scale
    return SPEC.api.function(q, k, v, g, beta, initial_state, cu_seqlens, scale=scale, backend=backend)


def recurrence(q, k, v, g, beta, initial_state, cu_seqlens, scale: float, l2norm: bool = False):
    """The operator token by token, in the inputs' dtype (the golden runs it in float64, differentiated by
    autograd): S <- exp(g_t) S; v'_t = beta_t (v_t - S^T k_t); S <- S + k_t v'_t^T; o_t = scale S^T q_t, per value
    head, q and k shared by their group of HV / H value heads. Every sequence advances together, a token a step (the
    longest first). Returns (o, the final states [N, HV, K, V])."""
    B, T, H, K = q.shape
    HV, V = v.shape[2], v.shape[3]
    if l2norm:
        q, k = _l2norm(q), _l2norm(k)
    q, k = (x.repeat_interleave(HV // H, dim=2).reshape(B * T, HV, K) for x in (q, k))
    v, g, beta = v.reshape(B * T, HV, V), g.reshape(B * T, HV), beta.reshape(B * T, HV)
    lengths = sequences.lengths(B, T, cu_seqlens, initial_state)
    firsts = [b * T for b in range(B)] if cu_seqlens is None else cu_seqlens[:-1].tolist()
    order = sorted(range(len(lengths)), key=lambda n: -lengths[n])
    S = q.new_zeros(len(lengths), HV, K, V) if initial_state is None else initial_state.to(q.dtype)
    S = S[order] if order else S
    rows = [None] * (B * T)
    for j in range(max(lengths, default=0)):
        n = sum(lengths[m] > j for m in order)
        idx = torch.tensor([firsts[m] + j for m in order[:n]])
        s = S[:n] * g[idx].exp()[..., None, None]
        d = (v[idx] - (s * k[idx][..., None]).sum(-2)) * beta[idx][..., None]
        s = s + k[idx][..., None] * d[..., None, :]
        for t, row in zip(idx.tolist(), ((s * q[idx][..., None]).sum(-2) * scale).unbind(0)):
            rows[t] = row
        S = torch.cat([s, S[n:]]) if n < len(order) else s
    o = torch.stack(rows).view(B, T, HV, V) if rows else v.new_zeros(B, T, HV, V)
    final = S.new_empty(S.shape).index_copy(0, torch.tensor(order, dtype=torch.long), S) if order else S
    return o, final


def _scale(inputs: dict) -> float:
    """The case's scale; None (the public default) is K ** -0.5."""
    scale = inputs.get("scale")
    return default_scale(inputs["q"].shape[-1]) if scale is None else scale


def _results(fn, inputs: dict, backward: bool) -> dict:
    """{o, final_state} of ``fn(q, k, v, g, beta, initial_state) -> (o, final_state)`` and, with ``backward``, the
    gradients of every floating input present from the case's ``do`` and ``dfinal_state``."""
    names = ("q", "k", "v", "g", "beta", "initial_state")
    leaves = {n: inputs.get(n) for n in names}
    if backward:
        leaves = {n: None if t is None else t.detach().requires_grad_(True) for n, t in leaves.items()}
    with torch.enable_grad() if backward else torch.no_grad():
        o, final = fn(*leaves.values())
    out = {"o": o.detach()} | ({} if final is None else {"final_state": final.detach()})
    if backward:
        outs = [(o, inputs["do"])] + ([] if final is None else [(final, inputs.get("dfinal_state"))])
        outs = [(t, torch.zeros_like(t) if d is None else d.to(t.dtype)) for t, d in outs if t.requires_grad]
        wrt = {n: t for n, t in leaves.items() if t is not None}
        grads = (
            torch.autograd.grad(
                [t for t, _ in outs],
                list(wrt.values()),
                [d for _, d in outs],
                allow_unused=True,
                materialize_grads=True,
            )
            if outs  # no token (T = 0): no output depends on the inputs
            else [torch.zeros_like(t) for t in wrt.values()]
        )
        out |= {f"d{n}": gr for n, gr in zip(wrt, grads)}
    return out


def run(inputs: dict, backend: str | None, backward: bool) -> dict:
    """verify's executor: the operator on the case (its final state where an initial one is given) and its
    gradients."""

    def fn(q, k, v, g, beta, h0):
        return function(
            q, k, v, g, beta, h0, inputs.get("cu_seqlens"), _scale(inputs), bool(inputs.get(L2NORM.name)), backend
        )

    return _results(fn, inputs, backward)


def golden(inputs: dict, backward: bool) -> dict:
    """The float64 golden: the token-by-token recurrence (not the chunk algorithm) and torch.autograd."""

    def fn(q, k, v, g, beta, h0):
        o, final = recurrence(
            q, k, v, g, beta, h0, inputs.get("cu_seqlens"), _scale(inputs), bool(inputs.get(L2NORM.name))
        )
        return o, final if h0 is not None else None

    return _results(fn, inputs, backward)


def composite(q, k, v, g, beta, initial_state=None, cu_seqlens=None, scale=None, use_qk_l2norm_in_kernel=False):
    """What transformers runs without flash-linear-attention: its pure-torch ``torch_chunk_gated_delta_rule``
    (chunks in a Python loop, fp32 inside, a per-chunk loop for the triangular system; it knows no packed
    sequences, so they go one at a time, as a user of it must)."""
    # transformers: a heavy optional dependency, kept out of tileport's start-up
    from transformers.models.qwen3_next.modeling_qwen3_next import torch_chunk_gated_delta_rule

    fallback = getattr(torch_chunk_gated_delta_rule, "__wrapped__", torch_chunk_gated_delta_rule)
    K = q.shape[-1]
    if scale is not None and scale != K**-0.5:  # it always scales by K ** -0.5: q rescaled, normalized first
        q, k = (_l2norm(x.float()).to(x.dtype) for x in (q, k)) if use_qk_l2norm_in_kernel else (q, k)
        q, use_qk_l2norm_in_kernel = q * (scale * K**0.5), False
    if cu_seqlens is None:
        return fallback(
            q,
            k,
            v,
            g,
            beta,
            initial_state=initial_state,
            output_final_state=initial_state is not None,
            use_qk_l2norm_in_kernel=use_qk_l2norm_in_kernel,
        )
    outs, finals = [], []
    for n, (a, e) in enumerate(zip(cu_seqlens[:-1].tolist(), cu_seqlens[1:].tolist())):
        h0 = None if initial_state is None else initial_state[n : n + 1]
        o, ht = fallback(
            *(x[:, a:e] for x in (q, k, v, g, beta)),
            initial_state=h0,
            output_final_state=h0 is not None,
            use_qk_l2norm_in_kernel=use_qk_l2norm_in_kernel,
        )
        outs.append(o)
        finals.append(ht)
    return torch.cat(outs, 1), (torch.cat(finals) if initial_state is not None else None)


def _sizes(shape) -> tuple[int, ...]:
    """(B, T, H, HV, K, V, P) of a benchmark shape ``BxTxHxHVxKxV[xP]``: P > 0 packs B * T tokens as P sequences."""
    if len(shape) not in (6, 7):
        raise ValueError(
            f"a chunk_gated_delta_rule benchmark shape is B x T x H x HV x K x V [x P packed sequences], got {shape}"
        )
    return (*shape, 0) if len(shape) == 6 else tuple(shape)


def example(shape, dtype, device, generator) -> dict:
    """Inputs as gated DeltaNet makes them: q, k, v from a projection (normal), the decay g = logsigmoid of a
    normal (fp32, as Qwen3-Next computes it), beta = sigmoid of a normal, q and k normalized in the kernel; P > 0:
    B * T tokens packed as P sequences of random lengths (B = 1)."""
    B, T, H, HV, K, V, P = _sizes(shape)
    cu = None
    if P:
        B, T = 1, B * T
        cuts = torch.randperm(T - 1, generator=generator)[: P - 1] + 1
        cu = torch.cat([torch.zeros(1, dtype=torch.long), cuts.sort().values, torch.tensor([T])]).to(device)

    def normal(*size):
        return torch.randn(size, generator=generator)

    return {
        "q": normal(B, T, H, K).to(dtype).to(device),
        "k": normal(B, T, H, K).to(dtype).to(device),
        "v": normal(B, T, HV, V).to(dtype).to(device),
        "g": F.logsigmoid(normal(B, T, HV)).to(device),
        "beta": normal(B, T, HV).sigmoid().to(dtype).to(device),
        "cu_seqlens": cu,
        L2NORM.name: True,
    }


def flops(shape, mode: str) -> float:
    """The chunk algorithm's matrix products (2 flops a multiply-add) at chunks of 64: per chunk and value head,
    k k^T, q k^T (per key head), the WY products (C^2 (K + V)), the state's read and write (3 C K V) and the
    intra-chunk output (C^2 V); the backward about twice as many. Useful work, for a matmul-bound operator's rate."""
    B, T, H, HV, K, V, P = _sizes(shape)
    chunks = B * math.ceil(T / 64) if not P else math.ceil(B * T / 64) + P
    c = 64
    fwd = 2 * chunks * (2 * H * c * c * K + HV * (c * c * (K + V) + 3 * c * K * V + c * c * V))
    return {"fwd": fwd, "bwd": 2 * fwd, "fwdbwd": 3 * fwd}[mode]


def gemm(shape, dtype, device):
    """torch.matmul of the chunk's dominant product size in ``dtype`` (the state's read and write: per chunk and
    value head a [64, K] x [K, V] product), as many as the operator has: the rate a matmul-bound operator is judged
    against. Returns (the call, its flops)."""
    B, T, H, HV, K, V, P = _sizes(shape)
    chunks = B * math.ceil(T / 64) if not P else math.ceil(B * T / 64) + P
    g = torch.Generator().manual_seed(0)
    a = torch.randn(chunks * HV, 64, K, generator=g).to(dtype).to(device)
    b = torch.randn(chunks * HV, K, V, generator=g).to(dtype).to(device)
    return (lambda: torch.matmul(a, b)), 2.0 * chunks * HV * 64 * K * V


def bytes_moved(shape, dtype, mode: str) -> int:
    """q, k, v, g and beta read and o written once (the forward), their gradients written (the backward)."""
    B, T, H, HV, K, V, _ = _sizes(shape)
    e = dtype.itemsize
    once = B * T * (2 * H * K + HV * V) * e + B * T * HV * (4 + e)
    fwd = once + B * T * HV * V * e
    return {"fwd": fwd, "bwd": fwd + once, "fwdbwd": 2 * fwd + once}[mode]


QWEN3_NEXT = "1x2048x4x8x128x128"  # the measure: B=1 T=2048 H=4 HV=8 K=V=128, q/k normalized in the kernel
SHAPES = (QWEN3_NEXT, "1x8192x4x8x128x128", "1x4096x16x32x128x128", "1x8192x4x8x128x128x8")  # long, wide, packed

_BACKWARD_CAUSE = (
    "one sequence (1x2048, AMD EPYC, AVX2, 2 threads, fp32, measured in session 28): the backward recomputes the "
    "forward's states and WY factors from the inputs (24 of 94 ms of forward+backward) and its products run at about "
    "100 GFLOP/s; saving the forward's residuals for the backward would remove the 24 ms. Packed (8 sequences of "
    "random lengths) it is worse, 1.1-1.4x the fallback, and its cause is not yet measured: the state recurrence "
    "takes as many steps as the longest sequence has chunks, each a batched product over the sequences still running"
)
_PACKED_CAUSE = (
    "packed sequences only (one sequence: 0.59-0.71): the cause is not yet measured (the state recurrence's steps "
    "are batched products over the sequences still running, fewer and smaller as the shorter ones end)"
)
BAR = (
    s.Criterion(
        "fwdbwd vs the pure-torch fallback", ("fwdbwd",), SHAPES, "speedup_vs_eager", 3.0, cause=_BACKWARD_CAUSE
    ),
    s.Criterion(
        "fwdbwd vs the fallback under torch.compile",
        ("fwdbwd",),
        SHAPES,
        "speedup_vs_compile",
        1.5,
        cause=_BACKWARD_CAUSE,
    ),
    s.Criterion(
        "fwd: share of torch.matmul's rate at the chunk's sizes",
        ("fwd",),
        SHAPES,
        "matmul_share",
        0.4,
        cause=_PACKED_CAUSE,
    ),
    s.Criterion("fwdbwd peak memory: the fallback's or less", ("fwdbwd",), SHAPES, "memory_vs_eager", 1.0),
)

SPEC = s.OpSpec(
    name="chunk_gated_delta_rule",
    aliases=("chunk_gdn", "torch_chunk_gated_delta_rule", "ChunkGatedDeltaRuleFunction"),
    summary="gated DeltaNet's linear attention over chunks of 64 tokens: a decayed, delta-rule recurrent state",
    math="S <- exp(g) S; S <- S + beta k (v - S^T k)^T; o = scale S^T q, per token (the chunked WY form)",
    inputs=INPUTS,
    attrs=(s.Attr("scale", 1.0, "finite (the public function: None for K ** -0.5)", s.REAL),),
    case_attrs=(L2NORM,),
    outputs=("o: [B, T, HV, V] like:q", "final_state: [N, HV, K, V] stat:q optional"),
    grads=(
        "dq: [B, T, H, K] like:q",
        "dk: [B, T, H, K] like:q",
        "dv: [B, T, HV, V] like:q",
        "dg: [B, T, HV] like:g",
        "dbeta: [B, T, HV] like:beta",
        "dinitial_state: [N, HV, K, V] like:initial_state optional",
    ),
    where=("HV % H == 0", "S == N + 1"),
    backward=s.Backward(("q", "k", "v", "g", "beta", "initial_state", "cu_seqlens", "do", "dfinal_state"), ("scale",)),
    public=function,
    run=run,
    golden=golden,
    composite=composite,
    example=example,
    bytes_moved=bytes_moved,
    dtypes=s.FLOATS,
    modes=("fwd", "fwdbwd"),
    workloads={"qwen3-next-80b-a3b": (1, 4096, 16, 32, 128, 128), "qwen3.5-27b": (1, 4096, 16, 48, 128, 128)},
    sweep=[
        (1, 2048, 4, 8, 128, 128),
        (1, 8192, 4, 8, 128, 128),
        (1, 4096, 16, 32, 128, 128),
        (1, 8192, 4, 8, 128, 128, 8),
    ],
    flops=flops,
    gemm=gemm,
    bar=BAR,
    precision_dtypes={"final_state": torch.float32},
    usage="""```python
import tileport

o, final_state = tileport.chunk_gated_delta_rule(q, k, v, g, beta, initial_state=h0, output_final_state=True,
                                                 use_qk_l2norm_in_kernel=True)      # fla's call
o, _ = tileport.chunk_gated_delta_rule(q, k, v, g, beta, cu_seqlens=cu_seqlens)    # packed sequences, B = 1
```""",
)
