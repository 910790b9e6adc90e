"""swiglu forward and backward (``tileport.ops.swiglu``'s contract) as TileLang CUDA kernels, one per (dtype,
casting); the element count is a runtime value. Also the flat elementwise builder and launcher the gated
activations share (``geglu.py`` passes gelu).

One CTA per ``BLOCK`` contiguous elements (non-contiguous inputs copied first): fp32 math, rounded once to the
dtype; casting "eager" rounds the activation (and dup's factor) to the dtype first, as ``F.silu(gate) * up``
does; dgate = dy * up * act' is rounded once in either casting (the contract). silu = x / (1 + exp(-x)); silu' takes sigmoid and 1 - sigmoid from exp(-|x|).
"""

# No `from __future__ import annotations`: it breaks T.prim_func annotations.
import tilelang.language as T
import torch

from ... import outputs
from ..targets import RUNNERS, TL_DTYPE

RUNNER = RUNNERS["cuda"]
THREADS = 128
BLOCK = 1024  # elements per CTA: 8 per thread


def silu(x):
    return x / (1.0 + T.exp(-x))


def silu_grad(x):
    e = T.exp(-T.abs(x))
    r = 1.0 / (1.0 + e)
    s = T.if_then_else(x >= 0, r, e * r)
    t = T.if_then_else(x >= 0, e * r, r)
    return s * (1.0 + x * t)


def build(name: str, act, act_grad, dtype: torch.dtype, eager: bool, backward: bool):
    """The kernel ``name`` over N runtime elements: y = act(g) * u, or (dg, du) with act_grad."""
    dt = TL_DTYPE[dtype]
    N = T.dynamic("N")

    def rounded(v):
        return v.astype(dt).astype("float32") if eager else v

    @T.prim_func
    def fwd(G: T.Tensor((N,), dt), U: T.Tensor((N,), dt), Y: T.Tensor((N,), dt)):
        with T.Kernel(T.ceildiv(N, BLOCK), threads=THREADS) as bx:
            for i in T.Parallel(BLOCK):
                k = bx * BLOCK + i
                if k < N:
                    g = G[k].astype("float32")
                    Y[k] = (rounded(act(g)) * U[k].astype("float32")).astype(dt)

    @T.prim_func
    def bwd(DY: T.Tensor((N,), dt), G: T.Tensor((N,), dt), U: T.Tensor((N,), dt), DG: T.Tensor((N,), dt),
            DU: T.Tensor((N,), dt)):  # fmt: skip
        with T.Kernel(T.ceildiv(N, BLOCK), threads=THREADS) as bx:
            for i in T.Parallel(BLOCK):
                k = bx * BLOCK + i
                if k < N:
                    g = G[k].astype("float32")
                    dy = DY[k].astype("float32")
                    DG[k] = (dy * U[k].astype("float32") * act_grad(g)).astype(dt)
                    DU[k] = (dy * rounded(act(g))).astype(dt)

    return (bwd if backward else fwd).with_attr("global_symbol", name)


def run(runner, op: str, builder, ins: tuple, n_out: int, *args):
    """``n_out`` contiguous outputs of ins[-1]'s shape and dtype from the kernel ``builder(*args)`` over the flat,
    contiguous ``ins``."""
    like = ins[-1]
    flat = tuple(t.contiguous().view(-1) for t in ins)
    outs = tuple(outputs.empty((like.numel(),), like.dtype, like.device) for _ in range(n_out))
    runner.kernel(op, builder, *args)(*flat, *outs)
    return tuple(o.view(like.shape) for o in outs)


def _build(dtype: torch.dtype, eager: bool, backward: bool):
    return build("swiglu_bwd" if backward else "swiglu_fwd", silu, silu_grad, dtype, eager, backward)


def lowered(dtype: torch.dtype, dim: int, casting: str = "fp32") -> dict:
    """{kernel name: prim_func} (``dim`` unused: the element count is a runtime value), for ``tileport lower``."""
    eager = casting == "eager"
    return {"swiglu_fwd": _build(dtype, eager, False), "swiglu_bwd": _build(dtype, eager, True)}


def forward(gate: torch.Tensor, up: torch.Tensor, casting: str = "fp32") -> torch.Tensor:
    """y = silu(gate) * up on the GPU."""
    return run(RUNNER, "swiglu_fwd", _build, (gate, up), 1, gate.dtype, casting == "eager", False)[0]


def backward(dy: torch.Tensor, gate: torch.Tensor, up: torch.Tensor, casting: str = "fp32"):
    """(dgate, dup) on the GPU."""
    return run(RUNNER, "swiglu_bwd", _build, (dy, gate, up), 2, gate.dtype, casting == "eager", True)
