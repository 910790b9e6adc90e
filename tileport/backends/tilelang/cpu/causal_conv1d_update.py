"""causal_conv1d_update (one decoding step) as a TileLang CPU kernel (C target): one pass over the state.

A grid kernel over (batch, 16-channel group) (``NC`` groups: the weight handed over grouped, ``[NC, W, 16]`` fp32,
zero-padded, so a tap's weights are one aligned load). A work item computes its T outputs 16 channels at a time:
the W taps of ``xs = [conv_state, x]`` (the state's positions gathered along its channel stride, x's loaded as
channel-last rows), an FMA each, then silu (causal_conv1d's CPU prelude), rounded once to x's dtype; then it writes
its channels' new state, the last S positions of ``xs``, as element copies (exact). The state is read once and
written once; the new state goes to its own tensor, which the front copies into ``conv_state``.
"""

# No `from __future__ import annotations`: it breaks T.prim_func annotations.
from types import SimpleNamespace

import tilelang.cpu.language as T
import torch

from ... import outputs
from .causal_conv1d import PRELUDE as CONV_PRELUDE
from .causal_conv1d import _call, _if, _load, _ref, _store, _tensor
from .interface import GRID
from .rowwise import F32, VEC, VL, Io, get, put, vectors
from .runtime import CACHE, threads_for

B, SEQ, D = T.dynamic("B"), T.dynamic("T"), T.dynamic("D")
W, S, NC = T.dynamic("W"), T.dynamic("S"), T.dynamic("NC")
STATE_S0, STATE_S1 = T.dynamic("conv_state_s0", "int64"), T.dynamic("conv_state_s1", "int64")
NEW_S0, NEW_S1 = T.dynamic("new_state_s0", "int64"), T.dynamic("new_state_s1", "int64")

# The state's positions across 16 channels: a gather along the channel stride into fp32 lanes (the first n, the rest
# 0), and element copies between strided channels (the state's shift: bits moved, no conversion).
PRELUDE = (
    CONV_PRELUDE
    + r"""
#define TP_CC_STRIDED(tag, T, widen)                                                                  \
  TP_HELPER void* tp_cc_gather_##tag(T* src, int64_t stride, tp_v16* dst, int32_t n) {      \
    float f[16] = {0};                                                                              \
    for (int i = 0; i < n; ++i) f[i] = widen(src[i * stride]);                                      \
    memcpy(dst, f, 64);                                                                             \
    return 0;                                                                                       \
  }                                                                                                 \
  TP_HELPER void* tp_cc_copy_##tag(T* src, int64_t ss, T* dst, int64_t ds, int32_t n) {     \
    for (int i = 0; i < n; ++i) dst[i * ds] = src[i * ss];                                          \
    return 0;                                                                                       \
  }
static inline float tp_cc_f32(float v) { return v; }
TP_CC_STRIDED(f32, float, tp_cc_f32)
TP_CC_STRIDED(f16, uint16_t, tp_load1_f16)
TP_CC_STRIDED(bf16, uint16_t, tp_load1_bf16)
#undef TP_CC_STRIDED
"""
)

ACC, WV, XV = 0, 1, 2  # vector slots: the sum, a tap's weights, a tap's input


def _group(k, v, c, n) -> None:
    """Item (k.b, group c): its outputs for every token, then its channels' new state."""
    j = c * VL
    lanes = VL if n is None else n
    with T.serial(SEQ) as t:
        _load(F32, _ref(k.bias, c, 0), v, ACC, None)
        with T.serial(W) as w:
            p = S + t - (W - 1) + w  # the position in xs = [conv_state, x]
            state = _ref(k.conv_state, k.b, j, p)
            _if(
                p < S,
                lambda: _call(f"tp_cc_gather_{k.X.tag}", state, STATE_S1, _ref(v, XV), lanes),
                lambda: _load(k.X, _ref(k.x, k.b, p - S, j), v, XV, n),
            )
            _load(F32, _ref(k.weight, c, w, 0), v, WV, None)
            put(v, ACC, get(v, ACC) + get(v, WV) * get(v, XV))
        _if(k.silu != 0, lambda: put(v, ACC, T.call_extern(VEC, "tp_cc_silu", get(v, ACC))))
        _store(k.X, v, ACC, _ref(k.out, k.b, t, j), n)
    with T.serial(S) as p:
        q = SEQ + p  # the new state's position p is xs's T + p
        dst = _ref(k.new_state, k.b, j, p)
        _if(
            q < S,
            lambda: _call(f"tp_cc_copy_{k.X.tag}", _ref(k.conv_state, k.b, j, q), STATE_S1, dst, NEW_S1, lanes),
            lambda: _call(f"tp_cc_copy_{k.X.tag}", _ref(k.x, k.b, q - S, j), T.int64(1), dst, NEW_S1, lanes),
        )


def build(x_dtype: torch.dtype):
    """The step's kernel for x (and the state) of ``x_dtype``: every width, state length and shape."""
    X = Io(x_dtype)

    @T.prim_func
    def causal_conv1d_update(
        x: _tensor(X.tl, "x", B, SEQ, D),
        out: _tensor(X.tl, "out", B, SEQ, D),
        conv_state: T.StridedTensor((B, D, S), (STATE_S0, STATE_S1, 1), X.tl),
        new_state: T.StridedTensor((B, D, S), (NEW_S0, NEW_S1, 1), X.tl),
        weight: _tensor("float32", "weight", NC, W, VL),
        bias: _tensor("float32", "bias", NC, VL),
        silu: T.int32,
        first: T.int64,
        count: T.int64,
    ):
        T.func_attr({GRID: ["B", "NC"]})
        with T.Kernel(count, prelude=PRELUDE) as i:
            b = T.truncdiv(first + i, T.cast(NC, "int64"))
            c = T.cast(T.truncmod(first + i, T.cast(NC, "int64")), "int32")
            v = vectors(3)
            k = SimpleNamespace(
                X=X, b=b, x=x, out=out, conv_state=conv_state, new_state=new_state, weight=weight, bias=bias, silu=silu
            )
            if (c + 1) * VL <= D:
                _group(k, v, c, None)
            else:
                _group(k, v, c, D - c * VL)

    return causal_conv1d_update


# tests/backends/test_cpu_simd.py asks for a packed multiply inside an innermost loop; this kernel's innermost loops
# are the taps (FMAs) and the state's element copies, so its own test (test_cpu_causal_conv1d_update.py) checks it.
PACKED_CHECKS = ()


def _grouped(t: torch.Tensor, groups: int) -> torch.Tensor:
    """t [D, ...] in fp32 as [groups, ..., 16]: channel groups of 16, zero-padded."""
    d = t.shape[0]
    padded = torch.zeros((groups * VL, *t.shape[1:]), dtype=torch.float32, device=t.device)
    padded[:d] = t
    return padded.view(groups, VL, *t.shape[1:]).movedim(1, -1).contiguous()


def forward(x, conv_state, weight, bias, activation: str):
    """(out, new_state): ``tileport.ops.causal_conv1d_update``'s contract; out and new_state contiguous."""
    B_, D_, T_ = x.shape
    groups = -(-D_ // VL)
    xt = x.transpose(1, 2)
    if xt.stride(2) != 1 and D_ > 1:
        xt = xt.contiguous()
    state = conv_state if conv_state.stride(2) == 1 or conv_state.shape[2] <= 1 else conv_state.contiguous()
    out_t = outputs.empty((B_, T_, D_), x.dtype, x.device)
    new_state = outputs.empty(tuple(conv_state.shape), x.dtype, x.device)
    if B_ * D_:
        bias_g = torch.zeros((groups, VL)) if bias is None else _grouped(bias, groups)
        kernel = CACHE.kernel("causal_conv1d_update", build, x.dtype)
        kernel(
            threads_for(x.numel() * weight.shape[1] + conv_state.numel()),
            x=xt,
            out=out_t,
            conv_state=state,
            new_state=new_state,
            weight=_grouped(weight, groups),
            bias=bias_g.to(x.device),
            silu=int(activation == "silu"),
        )
    return out_t.transpose(1, 2).contiguous(), new_state
