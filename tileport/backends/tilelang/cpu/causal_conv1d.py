"""causal_conv1d forward and backward as TileLang CPU kernels (C target), on the channel-last layout the models
hand over: x ``[B, D, T]`` read as its ``[B, T, D]`` view with unit-stride channels, 16 channels a step.

- Forward: a grid kernel over the B * T tokens (``interface.py``). A token walks its channels 16 at a time: the
  bias, then the W taps ``weight[:, w] * x[b, t - (W-1) + w]`` (an FMA each, the weight pre-transposed to
  ``[W, D]`` fp32 so a tap is one unit-stride load; the rows it reads are the W most recent ones, in L1), then
  silu (``z / (1 + exp(-z))``, simd.h's packed exp), rounded once to x's dtype. Whether a tap's term enters is one
  scalar test per token and tap (with ``seq_idx`` the ids compared; without it always, a position before the start
  holding the initial state or a zero that multiplies), never a lane mask: every channel of a token shares it.
- Backward: a grid kernel over (batch, 16-channel group) (``NC`` groups: the parameter-gradient partials'
  dimension). A work item walks its row once, keeping ``g = dout * silu'(z)`` of the last W tokens in a ring (z
  recomputed from x; 0 at padding tokens): a position's input gradient is the ring's correlation with the weight
  over the terms that entered, plus dfinal_states at the last W - 1 positions (added in fp32 before the one
  rounding), written to dx or, before the start, dinitial_states; ``dweight`` and ``dbias`` are accumulated over
  the row in fp64 from fp32 products, written as the item's partial ``[W + 1, 16]``; the host sums the B partials
  in fp64, in batch order: the same bits for any thread count. Widths past ``RING`` (16) run on the reference.

Other layouts (a contiguous ``[B, D, T]`` x) are copied to channel-last first and out and dx copied back to x's
layout: correct, two passes more. Final states are copies of the last W - 1 positions, taken by the host. fp16,
bf16 and fp32 here; fp64 runs on the torch backend.
"""

# No `from __future__ import annotations`: it breaks T.prim_func annotations.

from types import SimpleNamespace

import tilelang.cpu.language as T
import torch

from ... import outputs
from ...torch import causal_conv1d as reference
from .interface import GRID
from .rowwise import F32, VEC, VL, Io, get, put, splat, vectors
from .runtime import CACHE, threads_for

B, SEQ, D = T.dynamic("B"), T.dynamic("T"), T.dynamic("D")
W, S = T.dynamic("W"), T.dynamic("S")  # taps, initial states' width (W - 1; 0 where none are given)
NC = T.dynamic("NC")  # 16-channel groups (the backward's work items per batch row)
_INDEX = {torch.int32: "int32", torch.int64: "int64"}

# silu and its derivative on 16 lanes, from one packed exp: s = 1 / (1 + exp(-z)), silu = z * s (as z / (1 + e):
# one rounding less), silu' = s * (1 + z * (1 - s)). e = inf (z < -88) gives silu = -0 and silu' = 0; z = nan stays
# nan in both.
PRELUDE = r"""
TP_HELPER tp_v16 tp_cc_silu(tp_v16 z) {
  tp_v16 e = tp_exp(-z);
  return z / (tp_v16(1.0f) + e);
}
TP_HELPER tp_v16 tp_cc_silu_grad(tp_v16 z) {
  tp_v16 s = tp_v16(1.0f) / (tp_v16(1.0f) + tp_exp(-z));
  return s * (tp_v16(1.0f) + z * (tp_v16(1.0f) - s));
}
// acc (16 fp64 lanes: two tp_v16 slots) += a * b, the product rounded to fp32 (as torch's fp32 composite forms
// it) and added in fp64.
TP_HELPER void* tp_cc_acc64(tp_v16* acc, tp_v16 a, tp_v16 b) {
  tp_v16 p = a * b;
  tp_nd s[2], lo, hi;
  tp_nd_get2(acc, s);
  tp_widen16(&p, &lo, &hi);
  s[0] += lo;
  s[1] += hi;
  tp_nd_put2(acc, s);
  return 0;
}
TP_HELPER void* tp_cc_store64(tp_v16* acc, double* dst) {
  memcpy(dst, acc, 128);
  return 0;
}
"""


def _strides(name: str, rank: int) -> tuple:
    return tuple(T.dynamic(f"{name}_s{i}", "int64") for i in range(rank - 1)) + (1,)


def _tensor(dtype: str, name: str, *sizes):
    """A tensor of the given sizes with any strides but a unit last one (its stride variables named after it)."""
    return T.StridedTensor(sizes, _strides(name, len(sizes)), dtype)


def _call(fn: str, *args) -> None:
    T.evaluate(T.call_extern("handle", fn, *args))


def _ref(buf, *index):
    return T.address_of(T.BufferLoad(buf, list(index)))


def _when(cond, body) -> None:
    with T.If(cond), T.Then():
        body()


def _load(io, src, v, k, n) -> None:
    """v[k] = 16 lanes at ``src`` (an address) as fp32; with ``n``, the first n, the rest 0."""
    if n is None:
        _call(f"tp_load_{io.tag}", src, _ref(v, k))
    else:
        _call(f"tp_loadn_{io.tag}", src, _ref(v, k), n)


def _store(io, v, k, dst, n) -> None:
    if n is None:
        _call(f"tp_store_{io.tag}", _ref(v, k), dst)
    else:
        _call(f"tp_storen_{io.tag}", _ref(v, k), dst, n)


def _channel_groups(body) -> None:
    """body(j, n) over the channels: whole 16-channel groups, then the tail (n of them)."""
    with T.serial(D // VL) as jj:
        body(jj * VL, None)
    _when(D % VL > 0, lambda: body(D - D % VL, D % VL))


def _if(cond, then, otherwise=None) -> None:
    with T.If(cond):
        with T.Then():
            then()
        if otherwise is not None:
            with T.Else():
                otherwise()


def _set(buf, value) -> None:
    T.buffer_store(buf, value, [0])


def _tap_input(k, v, slot, s, j, n, me) -> None:
    """For the tap reading position ``s`` of token (k.b, t) whose id is ``me``: k.enters = whether its term enters,
    and v[slot] its input where it does. With seq_idx a term enters where the ids agree (a position before the start
    belongs to no sequence); without, every term enters, a position before the start holding the initial states'
    value or 0 (a zero that multiplies, as F.conv1d's padding: an inf weight gives nan there)."""
    _set(k.enters, 0)

    def inside():
        _set(k.enters, 1)
        same = T.if_then_else(T.cast(k.seq_idx[k.b, s], "int64") == me, 1, 0)
        _if(k.has_seq_idx != 0, lambda: _set(k.enters, same))
        _if(k.enters[0] != 0, lambda: _load(k.X, _ref(k.x, k.b, s, j), v, slot, n))

    def before():
        _set(k.enters, 1)
        state = _ref(k.initial_states, k.b, T.cast(S, "int64") + s, j)
        _if(k.has_initial_states != 0, lambda: _load(k.X, state, v, slot, n), lambda: put(v, slot, splat(T.float32(0))))

    _if(s >= 0, inside, lambda: _if(k.has_seq_idx == 0, before))


ACC, WV, XV = 0, 1, 2  # the forward's vector slots: the sum, a tap's weight, a tap's input


def _forward_group(k, v, t, j, n) -> None:
    """out[b, t, j : j + 16] (or its first n channels): bias, the taps that enter, silu, padding zeroed."""
    _if(k.has_bias != 0, lambda: _load(F32, _ref(k.bias, j), v, ACC, n), lambda: put(v, ACC, splat(T.float32(0))))
    with T.serial(W) as w:
        _tap_input(k, v, XV, t - T.cast(W - 1, "int64") + T.cast(w, "int64"), j, n, k.me[0])

        def tap():
            _load(F32, _ref(k.weight, w, j), v, WV, n)
            put(v, ACC, get(v, ACC) + get(v, WV) * get(v, XV))

        _if(k.enters[0] != 0, tap)
    _if(k.silu != 0, lambda: put(v, ACC, T.call_extern(VEC, "tp_cc_silu", get(v, ACC))))
    _if(k.me[0] < 0, lambda: put(v, ACC, splat(T.float32(0))))  # padding: 0, no bias
    _store(k.X, v, ACC, _ref(k.out, k.b, t, j), n)


def build_forward(x_dtype: torch.dtype, seq_dtype: str = "int64"):
    """The forward kernel for x of ``x_dtype`` and seq_idx of ``seq_dtype``: every width, shape and option."""
    X = Io(x_dtype)

    @T.prim_func
    def causal_conv1d_fwd(
        x: _tensor(X.tl, "x", B, SEQ, D),
        out: _tensor(X.tl, "out", B, SEQ, D),
        weight: _tensor("float32", "weight", W, D),
        bias: _tensor("float32", "bias", D),
        initial_states: _tensor(X.tl, "initial_states", B, S, D),
        seq_idx: _tensor(seq_dtype, "seq_idx", B, SEQ),
        silu: T.int32,
        has_bias: T.int32,
        has_initial_states: T.int32,
        has_seq_idx: T.int32,
        first: T.int64,
        count: T.int64,
    ):
        T.func_attr({GRID: ["B", "T"]})
        with T.Kernel(count, prelude=PRELUDE) as i:
            b = T.truncdiv(first + i, T.cast(SEQ, "int64"))
            t = T.truncmod(first + i, T.cast(SEQ, "int64"))
            me = T.alloc_local((1,), "int64")  # the token's sequence id (0 without seq_idx)
            enters = T.alloc_local((1,), "int32")
            me[0] = T.int64(0)
            if has_seq_idx != 0:
                me[0] = T.cast(seq_idx[b, t], "int64")
            v = vectors(3)
            k = SimpleNamespace(
                X=X,
                b=b,
                me=me,
                enters=enters,
                x=x,
                out=out,
                weight=weight,
                bias=bias,
                initial_states=initial_states,
                seq_idx=seq_idx,
                silu=silu,
                has_bias=has_bias,
                has_initial_states=has_initial_states,
                has_seq_idx=has_seq_idx,
            )
            _channel_groups(lambda j, n: _forward_group(k, v, t, j, n))

    return causal_conv1d_fwd


RING = 16  # g of the last RING tokens: the backward's widest kernel (W <= RING; wider runs on torch)
W1 = T.dynamic("W1")  # the partials' rows: W taps and the bias


def _backward_step(k, u, j, n) -> None:
    """Step u of a work item (channels j : j + 16, or the first n): g of token u (u < T) into the ring, its terms
    of dweight and dbias into the fp64 sums, then dxe of position s = u - (W - 1), the taps of the last W tokens
    whose terms entered."""
    v, ring, taps, acc = k.v, k.ring, k.taps, k.acc

    def token():  # u < T: recompute z where silu needs it, g = dout * act'(z), 0 at padding
        _set(k.me, T.int64(0))
        _if(k.has_seq_idx != 0, lambda: _set(k.me, T.cast(k.seq_idx[k.b, u], "int64")))
        put(v, Z, get(v, BIAS))
        with T.serial(W) as w:
            _tap_input(k, taps, w, u - T.cast(W - 1, "int64") + T.cast(w, "int64"), j, n, k.me[0])
            T.buffer_store(k.entered, k.enters[0], [w])
            _if(k.enters[0] != 0, lambda: put(v, Z, get(v, Z) + get(k.wv, w) * get(taps, w)))
        _load(k.X, _ref(k.dout, k.b, u, j), v, G, n)
        _if(k.silu != 0, lambda: put(v, G, get(v, G) * T.call_extern(VEC, "tp_cc_silu_grad", get(v, Z))))
        _if(k.me[0] < 0, lambda: put(v, G, splat(T.float32(0))))
        put(ring, T.truncmod(u, RING), get(v, G))
        _call("tp_cc_acc64", _ref(acc, 2 * W), get(v, G), splat(T.float32(1)))
        with T.serial(W) as w:  # a padding token has no terms (its g is 0, but its inputs may be inf)
            term = lambda: _call("tp_cc_acc64", _ref(acc, 2 * w), get(v, G), get(taps, w))  # noqa: E731
            _if(T.And(k.entered[w] != 0, k.me[0] >= 0), term)

    _if(u < T.cast(SEQ, "int64"), token, lambda: put(ring, T.truncmod(u, RING), splat(T.float32(0))))

    s = u - T.cast(W - 1, "int64")  # the position whose gradient is complete at step u

    def position():
        put(v, DX, splat(T.float32(0)))
        _set(k.mine, T.int64(0))
        _if(T.And(s >= 0, k.has_seq_idx != 0), lambda: _set(k.mine, T.cast(k.seq_idx[k.b, s], "int64")))
        with T.serial(W) as w:
            t = u - T.cast(w, "int64")  # the token that read s with tap w
            _set(k.enters, 0)
            same = T.if_then_else(T.And(T.cast(k.seq_idx[k.b, t], "int64") == k.mine[0], k.mine[0] >= 0), 1, 0)

            def inside():
                _set(k.enters, 1)
                _if(k.has_seq_idx != 0, lambda: _set(k.enters, same))

            live = T.And(t >= 0, t < T.cast(SEQ, "int64"))
            _if(live, lambda: _if(s >= 0, inside, lambda: _set(k.enters, T.if_then_else(k.has_seq_idx == 0, 1, 0))))
            dx_term = get(v, DX) + get(k.wv, w) * get(ring, T.truncmod(t + RING, RING))
            _if(k.enters[0] != 0, lambda: put(v, DX, dx_term))
        tail = T.cast(SEQ, "int64") - T.cast(W - 1, "int64")  # the final states' first position

        def dfinal():
            _load(k.X, _ref(k.dfinal_states, k.b, s - tail, j), v, G, n)
            put(v, DX, get(v, DX) + get(v, G))

        _if(T.And(k.has_dfinal_states != 0, s >= tail), dfinal)
        _if(
            s >= 0,
            lambda: _store(k.X, v, DX, _ref(k.dx, k.b, s, j), n),
            lambda: _store(k.X, v, DX, _ref(k.dinitial_states, k.b, T.cast(S, "int64") + s, j), n),
        )

    _if(T.Or(s >= 0, k.has_dinitial_states != 0), position)


BIAS, Z, G, DX = range(4)  # the backward's vector slots


def _backward_item(k, c, n) -> None:
    """Work item (k.b, group c): the weights of its channels once, the walk over its row, its partial."""
    j = c * VL
    _if(k.has_bias != 0, lambda: _load(F32, _ref(k.bias, j), k.v, BIAS, n), lambda: put(k.v, BIAS, splat(T.float32(0))))
    with T.serial(W) as w:
        _load(F32, _ref(k.weight, w, j), k.wv, w, n)
    with T.serial(2 * W + 2) as q:
        put(k.acc, q, splat(T.float32(0)))  # 0.0 in fp64 has the bits of two fp32 zeros
    with T.serial(RING) as q:
        put(k.ring, q, splat(T.float32(0)))
    with T.serial(T.cast(SEQ, "int64") + T.cast(W - 1, "int64")) as u:
        _backward_step(k, u, j, n)
    with T.serial(W + 1) as w:
        _call("tp_cc_store64", _ref(k.acc, 2 * w), _ref(k.partials, k.b, c, w, 0))


def build_backward(x_dtype: torch.dtype, seq_dtype: str = "int64"):
    """The backward kernel for x of ``x_dtype`` and seq_idx of ``seq_dtype``: every width up to RING, every shape."""
    X = Io(x_dtype)

    @T.prim_func
    def causal_conv1d_bwd(
        x: _tensor(X.tl, "x", B, SEQ, D),
        dout: _tensor(X.tl, "dout", B, SEQ, D),
        dx: _tensor(X.tl, "dx", B, SEQ, D),
        weight: _tensor("float32", "weight", W, D),
        bias: _tensor("float32", "bias", D),
        initial_states: _tensor(X.tl, "initial_states", B, S, D),
        dinitial_states: _tensor(X.tl, "dinitial_states", B, S, D),
        dfinal_states: _tensor(X.tl, "dfinal_states", B, S, D),
        seq_idx: _tensor(seq_dtype, "seq_idx", B, SEQ),
        partials: _tensor("float64", "partials", B, NC, W1, VL),
        silu: T.int32,
        has_bias: T.int32,
        has_initial_states: T.int32,
        has_dinitial_states: T.int32,
        has_dfinal_states: T.int32,
        has_seq_idx: T.int32,
        first: T.int64,
        count: T.int64,
    ):
        T.func_attr({GRID: ["B", "NC"]})
        with T.Kernel(count, prelude=PRELUDE) as i:
            b = T.truncdiv(first + i, T.cast(NC, "int64"))
            c = T.truncmod(first + i, T.cast(NC, "int64"))
            me = T.alloc_local((1,), "int64")
            mine = T.alloc_local((1,), "int64")
            enters = T.alloc_local((1,), "int32")
            entered = T.alloc_local((RING,), "int32")
            k = SimpleNamespace(
                X=X,
                b=b,
                me=me,
                mine=mine,
                enters=enters,
                entered=entered,
                v=vectors(4),
                wv=vectors(RING),
                taps=vectors(RING),
                ring=vectors(RING),
                acc=vectors(2 * RING + 2),
                x=x,
                dout=dout,
                dx=dx,
                weight=weight,
                bias=bias,
                initial_states=initial_states,
                dinitial_states=dinitial_states,
                dfinal_states=dfinal_states,
                seq_idx=seq_idx,
                partials=partials,
                silu=silu,
                has_bias=has_bias,
                has_initial_states=has_initial_states,
                has_dinitial_states=has_dinitial_states,
                has_dfinal_states=has_dfinal_states,
                has_seq_idx=has_seq_idx,
            )
            c32 = T.cast(c, "int32")
            if (c32 + 1) * VL <= D:
                _backward_item(k, c32, None)
            else:
                _backward_item(k, c32, D - c32 * VL)

    return causal_conv1d_bwd


# tests/backends/test_cpu_simd.py asks every kernel for a packed multiply inside an innermost loop; these kernels'
# innermost loops are the taps (FMAs), their multiplies in silu outside them, so
# tests/backends/test_cpu_causal_conv1d.py checks their disassembly itself.
PACKED_CHECKS = ()


def _channel_last(t):
    """t [B, D, L] as its [B, L, D] view with unit-stride channels, copied where its channels are strided."""
    v = t.transpose(1, 2)
    return v if v.stride(2) == 1 or v.shape[2] <= 1 else v.contiguous()


def _final_states(xt, init_t, width: int):
    """The last W - 1 positions of the initial states followed by x, as [B, W - 1, D] (channel-last)."""
    keep = width - 1
    both = torch.cat((init_t, xt[:, max(0, xt.shape[1] - keep) :]), 1)
    return both[:, both.shape[1] - keep :]


def _in_layout_of(x, t_view):
    """The kernel's channel-last result [B, T, D] as [B, D, T] in x's layout: a view where x is channel-last, else
    a copy in x's memory format."""
    out = t_view.transpose(1, 2)
    return out if x.stride(1) == 1 or x.shape[1] <= 1 else out.contiguous()


def forward(x, weight, bias, initial_states, seq_idx, activation: str):
    """(out, final_states or None): ``tileport.ops.causal_conv1d``'s contract, channel-last in the kernel."""
    xt = _channel_last(x)
    B_, T_, D_ = xt.shape
    width = weight.shape[1]
    out_t = outputs.empty((B_, T_, D_), x.dtype, x.device)
    init_t = None if initial_states is None else _channel_last(initial_states)
    if xt.numel():
        kernel = CACHE.kernel(
            "causal_conv1d_fwd", build_forward, x.dtype, _INDEX.get(getattr(seq_idx, "dtype", None), "int64")
        )
        kernel(
            threads_for(xt.numel() * width),
            x=xt,
            out=out_t,
            weight=weight.t().float().contiguous(),
            bias=None if bias is None else bias.float().contiguous(),
            initial_states=init_t,
            seq_idx=seq_idx,
            silu=int(activation == "silu"),
        )
    final = None if init_t is None else _final_states(xt, init_t, width).transpose(1, 2).contiguous()
    return _in_layout_of(x, out_t), final


def backward(x, weight, bias, initial_states, seq_idx, dout, dfinal_states, activation: str):
    """(dx, dweight, dbias, dinitial_states or None): the kernel's dx and dinitial_states, and its per-item fp64
    partials of dweight and dbias summed over the batch in fp64 and rounded once."""
    width = weight.shape[1]
    if width > RING or x.numel() == 0:  # a width past the ring, or nothing to walk: the reference's few terms
        return reference.backward(x, weight, bias, initial_states, seq_idx, dout, dfinal_states, activation)
    xt, dt = _channel_last(x), _channel_last(dout)
    B_, T_, D_ = xt.shape
    groups = -(-D_ // VL)
    dx_t = outputs.empty((B_, T_, D_), x.dtype, x.device)
    init_t = None if initial_states is None else _channel_last(initial_states)
    dinit_t = None if init_t is None else outputs.empty(init_t.shape, x.dtype, x.device)
    partials = torch.empty((B_, groups, width + 1, VL), dtype=torch.float64, device=x.device)
    kernel = CACHE.kernel(
        "causal_conv1d_bwd", build_backward, x.dtype, _INDEX.get(getattr(seq_idx, "dtype", None), "int64")
    )
    kernel(
        threads_for(xt.numel() * width),
        x=xt,
        dout=dt,
        dx=dx_t,
        weight=weight.t().float().contiguous(),
        bias=None if bias is None else bias.float().contiguous(),
        initial_states=init_t,
        dinitial_states=dinit_t,
        dfinal_states=None if dfinal_states is None else _channel_last(dfinal_states),
        seq_idx=seq_idx,
        partials=partials,
        silu=int(activation == "silu"),
    )
    sums = partials.sum(0).permute(1, 0, 2).reshape(width + 1, groups * VL)[:, :D_]  # fp64, in batch order
    dinit = None if dinit_t is None else dinit_t.transpose(1, 2).contiguous()
    dweight = sums[:width].t().to(x.dtype).contiguous()
    return _in_layout_of(x, dx_t), dweight, sums[width].to(x.dtype), dinit
