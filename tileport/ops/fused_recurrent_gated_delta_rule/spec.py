"""fused_recurrent_gated_delta_rule's spec: gated DeltaNet token by token (decoding: a few tokens, a state carried
between calls), forward only; its golden is the recurrence in float64."""

from __future__ import annotations

import torch

from .. import spec as s
from ..chunk_gated_delta_rule.spec import L2NORM, L2NORM_EPS, default_scale, recurrence
from ..l2norm import l2norm

INPUTS = (
    "q: [B, T, H, K] float grad",
    "k: [B, T, H, K] like:q grad",
    "v: [B, T, HV, V] like:q grad",
    "g: [B, T, HV] float grad optional",
    "beta: [B, T, HV] float grad optional",
    "initial_state: [N, HV, K, V] float grad optional",
    "cu_seqlens: [S] int64 optional",
)


def function(
    q,
    k,
    v,
    g=None,
    beta=None,
    initial_state=None,
    cu_seqlens=None,
    scale=None,
    use_qk_l2norm_in_kernel=False,
    backend=None,
):
    """``(o, final_state)``: the derived function with q and k first normalized (tileport's l2norm, eps 1e-6)
    where asked, ``scale=None`` as K ** -0.5; final_state is None without an initial state."""
    if use_qk_l2norm_in_kernel:
        q, k = l2norm(q, L2NORM_EPS, backend=backend), l2norm(k, L2NORM_EPS, backend=backend)
    scale = default_scale(q.shape[-1]) if scale is None else scale
    return SPEC.api.function(q, k, v, g, beta, initial_state, cu_seqlens, scale=scale, backend=backend)


def _scale(inputs: dict) -> float:
    scale = inputs.get("scale")
    return default_scale(inputs["q"].shape[-1]) if scale is None else scale


def _outputs(o, final) -> dict:
    return {"o": o} | ({} if final is None else {"final_state": final})


def run(inputs: dict, backend: str | None, backward: bool) -> dict:
    """verify's executor: the operator on the case (its final state where an initial one is given)."""
    names = ("q", "k", "v", "g", "beta", "initial_state", "cu_seqlens")
    with torch.no_grad():
        o, final = function(
            *(inputs.get(n) for n in names), _scale(inputs), bool(inputs.get(L2NORM.name)), backend=backend
        )
    return _outputs(o, final)


def golden(inputs: dict, backward: bool) -> dict:
    """The float64 golden: the recurrence token by token (g None: no decay; beta None: 1)."""
    q, v = inputs["q"], inputs["v"]
    g = inputs.get("g")
    beta = inputs.get("beta")
    g = torch.zeros(v.shape[:3], dtype=q.dtype) if g is None else g
    beta = torch.ones(v.shape[:3], dtype=q.dtype) if beta is None else beta
    h0 = inputs.get("initial_state")
    with torch.no_grad():
        o, final = recurrence(
            q, inputs["k"], v, g, beta, h0, inputs.get("cu_seqlens"), _scale(inputs), bool(inputs.get(L2NORM.name))
        )
    return _outputs(o, final if h0 is not None else None)


def composite(
    q, k, v, g=None, beta=None, initial_state=None, cu_seqlens=None, scale=None, use_qk_l2norm_in_kernel=False
):
    """What transformers runs without flash-linear-attention: ``torch_recurrent_gated_delta_rule``, a Python loop
    over tokens of several passes over the state each (packed sequences one at a time, as its users must)."""
    # transformers: a heavy optional dependency, kept out of tileport's start-up
    from transformers.models.qwen3_next.modeling_qwen3_next import torch_recurrent_gated_delta_rule

    fallback = getattr(torch_recurrent_gated_delta_rule, "__wrapped__", torch_recurrent_gated_delta_rule)
    g = torch.zeros(v.shape[:3], dtype=torch.float32, device=v.device) if g is None else g
    beta = torch.ones(v.shape[:3], dtype=v.dtype, device=v.device) if beta is None else beta
    K = q.shape[-1]
    if scale is not None and scale != K**-0.5:  # it always scales by K ** -0.5
        if use_qk_l2norm_in_kernel:
            q, k = (x * torch.rsqrt((x.float() ** 2).sum(-1, keepdim=True) + L2NORM_EPS).to(x.dtype) for x in (q, k))
        q, use_qk_l2norm_in_kernel = q * (scale * K**0.5), False
    if cu_seqlens is None:
        return fallback(
            q,
            k,
            v,
            g,
            beta,
            initial_state=initial_state,
            output_final_state=True,
            use_qk_l2norm_in_kernel=use_qk_l2norm_in_kernel,
        )
    outs, finals = [], []
    for n, (a, e) in enumerate(zip(cu_seqlens[:-1].tolist(), cu_seqlens[1:].tolist())):
        h0 = None if initial_state is None else initial_state[n : n + 1]
        o, ht = fallback(
            *(x[:, a:e] for x in (q, k, v, g, beta)),
            initial_state=h0,
            output_final_state=True,
            use_qk_l2norm_in_kernel=use_qk_l2norm_in_kernel,
        )
        outs.append(o)
        finals.append(ht)
    return torch.cat(outs, 1), torch.cat(finals)


def _sizes(shape) -> tuple[int, ...]:
    if len(shape) != 6:
        raise ValueError(f"a fused_recurrent_gated_delta_rule benchmark shape is B x T x H x HV x K x V, got {shape}")
    return tuple(shape)


def example(shape, dtype, device, generator) -> dict:
    """A decode step's inputs as gated DeltaNet makes them, with the state the earlier tokens left (fp32)."""
    B, T, H, HV, K, V = _sizes(shape)

    def normal(*size):
        return torch.randn(size, generator=generator)

    return {
        "q": normal(B, T, H, K).to(dtype).to(device),
        "k": normal(B, T, H, K).to(dtype).to(device),
        "v": normal(B, T, HV, V).to(dtype).to(device),
        "g": torch.nn.functional.logsigmoid(normal(B, T, HV)).to(device),
        "beta": normal(B, T, HV).sigmoid().to(dtype).to(device),
        "initial_state": (normal(B, HV, K, V) * 0.1).to(device),
        L2NORM.name: True,
    }


def bytes_moved(shape, dtype, mode: str) -> int:
    """The state read once and written once (fp32), q, k, v, g, beta read and o written once."""
    B, T, H, HV, K, V = _sizes(shape)
    e = dtype.itemsize
    return 2 * B * HV * K * V * 4 + B * T * (2 * H * K + 2 * HV * V) * e + B * T * HV * (4 + e)


DECODE = ("1x1x16x32x128x128", "16x1x16x32x128x128", "64x1x16x32x128x128")
_KERNEL_CAUSE = (
    "the kernel call itself is the time (AMD EPYC, AVX2, 1 thread, fp32, 32 heads of 128 x 128): 1039 us of the public "
    "call's 1141 us at B = 1 and 19.1 of 19.4 ms at B = 16, against 72 us and 3.6 ms for a copy of the state's bytes; "
    "it is compute-bound at about a seventh to a fourteenth of the copy's rate (two fp64-accumulated walks per "
    "16-column strip), about ten times what its instruction count predicts, a gap not yet found. At B = 1 the "
    "fallback's state (2 MB) stays in cache, so it is 0.74-0.84x the fallback there; from B = 16 it is 3.6-7.3x"
)
BAR = (
    s.Criterion(
        "fwd vs the pure-torch recurrent fallback", ("fwd",), DECODE, "speedup_vs_eager", 2.0, cause=_KERNEL_CAUSE
    ),
    s.Criterion(
        "fwd: share of the copy of the state's bytes", ("fwd",), DECODE, "bandwidth_share", 0.5, cause=_KERNEL_CAUSE
    ),
)

SPEC = s.OpSpec(
    name="fused_recurrent_gated_delta_rule",
    aliases=("fused_recurrent_gdn", "torch_recurrent_gated_delta_rule"),
    summary="gated DeltaNet token by token (decoding): each token's state update and read in one pass over the state",
    math="S <- exp(g) S; S <- S + beta k (v - S^T k)^T; o = scale S^T q, token by token",
    inputs=INPUTS,
    attrs=(s.Attr("scale", 1.0, "finite (the public function: None for K ** -0.5)", s.REAL),),
    case_attrs=(L2NORM,),
    outputs=("o: [B, T, HV, V] like:q", "final_state: [N, HV, K, V] stat:q optional"),
    grads=(),
    where=("HV % H == 0", "S == N + 1"),
    public=function,
    run=run,
    golden=golden,
    composite=composite,
    example=example,
    bytes_moved=bytes_moved,
    dtypes=s.FLOATS,
    modes=("fwd",),
    workloads={"qwen3-next-decode-b16": (16, 1, 16, 32, 128, 128)},
    sweep=[(1, 1, 16, 32, 128, 128), (16, 1, 16, 32, 128, 128), (64, 1, 16, 32, 128, 128)],
    bar=BAR,
    precision_dtypes={"final_state": torch.float32},
    usage="""```python
import tileport

o, state = tileport.fused_recurrent_gated_delta_rule(q, k, v, g=g, beta=beta, initial_state=state,
                                                     output_final_state=True, use_qk_l2norm_in_kernel=True)
```""",
)
