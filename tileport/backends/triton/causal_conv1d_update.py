"""causal_conv1d_update (one decoding step) in Triton (``tileport.ops.causal_conv1d_update``'s contract), as
``_fwd_kernel`` (forward only: the lowering lowers it alone, ``KERNELS``).

A block is one batch row's ``BLOCK_D`` channels; each program walks blocks (persistent, as ``common.blocks`` sizes
them for Ascend). For each of the T tokens the W taps of ``xs = [conv_state, x]`` are loaded through the tensors'
own strides (the state's positions, then x's), summed in fp32 after the bias, silu, rounded once to x's dtype;
then the block's new state, the last S positions of ``xs``, is written to its own tensor (copies, exact).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .. import outputs
from .ascend import chip_of
from .common import blocks, check_size, launch_context, storage, store

KERNELS = ("_fwd_kernel",)  # forward only
LIVE = {"fwd": 4}  # fp32 BLOCK_D lanes live at once (the sum, a tap's input and weight, the addresses)


@triton.jit
def _xs(X, ST, b, p, d, ok_d, S, sxb, sxd, sxt, ssb, ssd, sss):
    """xs[b, d, p] of ``xs = [conv_state, x]`` in fp32 (p a scalar position)."""
    if p < S:
        v = tl.load(ST + b * ssb + d * ssd + p * sss, mask=ok_d, other=0.0)
    else:
        v = tl.load(X + b * sxb + d * sxd + (p - S) * sxt, mask=ok_d, other=0.0)
    return v.to(tl.float32)


@triton.jit
def _fwd_kernel(
    X,
    ST,
    WGT,
    BIAS,
    OUT,
    NEW,
    B,
    T,
    D,
    S,
    sxb,
    sxd,
    sxt,
    ssb,
    ssd,
    sss,
    swd,
    sww,
    sob,
    sod,
    sot,
    snb,
    snd,
    sns,
    n_d,
    W: tl.constexpr,
    BLOCK_D: tl.constexpr,
    SILU: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    BF16: tl.constexpr,
):
    """out [B, D, T] and the new state [B, D, S] of one step, blocks of BLOCK_D channels of one row."""
    for blk in range(tl.program_id(0), B * n_d, tl.num_programs(0)):  # persistent: see common.blocks
        b = (blk // n_d).to(tl.int64)
        d = (blk % n_d) * BLOCK_D + tl.arange(0, BLOCK_D)
        ok_d = d < D
        if HAS_BIAS:
            bias = tl.load(BIAS + d, mask=ok_d, other=0.0).to(tl.float32)
        else:
            bias = tl.zeros((BLOCK_D,), dtype=tl.float32)
        for t in range(0, T):
            z = bias
            for w in tl.static_range(W):
                v = _xs(X, ST, b, S + t - (W - 1) + w, d, ok_d, S, sxb, sxd, sxt, ssb, ssd, sss)
                z += tl.load(WGT + d * swd + w * sww, mask=ok_d, other=0.0).to(tl.float32) * v
            if SILU:
                z = z / (1.0 + tl.exp(-z))
            store(OUT + b * sob + d * sod + t * sot, z, ok_d, BF16)
        for p in range(0, S):
            v = _xs(X, ST, b, T + p, d, ok_d, S, sxb, sxd, sxt, ssb, ssd, sss)
            store(NEW + b * snb + d * snd + p * sns, v, ok_d, BF16)


def forward(x, conv_state, weight, bias, activation: str):
    """(out, new_state), both contiguous: out in fp32 rounded once to x's dtype, new_state copies of the inputs."""
    check_size("causal_conv1d_update", conv_state)
    B, D, T = x.shape
    S = conv_state.shape[2]
    out = outputs.empty((B, D, T), x.dtype, x.device)
    new = outputs.empty((B, D, S), x.dtype, x.device)
    _, block_d, _, _ = blocks(max(B, 1), D, x.device, LIVE["fwd"])
    n_d = triton.cdiv(D, block_d)
    chip = chip_of(x.device)
    grid = (min(B * n_d, chip.vector_cores) if chip is not None else B * n_d,)
    with launch_context():
        _fwd_kernel[grid](
            x,
            conv_state,
            weight,
            x if bias is None else bias,
            storage(out),
            storage(new),
            B,
            T,
            D,
            S,
            *x.stride(),
            *conv_state.stride(),
            *weight.stride(),
            *out.stride(),
            *new.stride(),
            n_d,
            W=weight.shape[1],
            BLOCK_D=block_d,
            SILU=activation == "silu",
            HAS_BIAS=bias is not None,
            BF16=x.dtype == torch.bfloat16,
        )
    return out, new
