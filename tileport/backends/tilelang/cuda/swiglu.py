"""swiglu forward and backward (``tileport.ops.swiglu``'s contract) as TileLang CUDA kernels, one per (dtype,
casting); the element count is a runtime value. Also the flat elementwise builder the gated activations share
(``geglu.py`` passes gelu); the activations and entry points are ``../gated.py``'s.

One CTA per ``BLOCK`` contiguous elements (non-contiguous inputs copied first): fp32 math, rounded once to the
dtype; casting "eager" rounds the activation (and dup's factor) to the dtype first, as ``F.silu(gate) * up``
does; dgate = dy * up * act' is rounded once in either casting (the contract).
"""

# No `from __future__ import annotations`: it breaks T.prim_func annotations.
import tilelang.language as T
import torch

from .. import gated
from ..targets import RUNNERS, TL_DTYPE

RUNNER = RUNNERS["cuda"]
THREADS = 128
BLOCK = 1024  # elements per CTA: 8 per thread


def build(name: str, m: gated.Math, dtype: torch.dtype, backward: bool):
    """The kernel ``name`` over N runtime elements: y, or (dgate, dup), by ``m`` per element."""
    dt = TL_DTYPE[dtype]
    N = T.dynamic("N")

    @T.prim_func
    def fwd(G: T.Tensor((N,), dt), U: T.Tensor((N,), dt), Y: T.Tensor((N,), dt)):
        with T.Kernel(T.ceildiv(N, BLOCK), threads=THREADS) as bx:
            for i in T.Parallel(BLOCK):
                k = bx * BLOCK + i
                if k < N:
                    g = G[k].astype("float32")
                    Y[k] = m.y(g, U[k].astype("float32"))

    @T.prim_func
    def bwd(
        DY: T.Tensor((N,), dt),
        G: T.Tensor((N,), dt),
        U: T.Tensor((N,), dt),
        DG: T.Tensor((N,), dt),
        DU: T.Tensor((N,), dt),
    ):
        with T.Kernel(T.ceildiv(N, BLOCK), threads=THREADS) as bx:
            for i in T.Parallel(BLOCK):
                k = bx * BLOCK + i
                if k < N:
                    g = G[k].astype("float32")
                    dy = DY[k].astype("float32")
                    DG[k] = m.dgate(dy, g, U[k].astype("float32"))
                    DU[k] = m.dup(dy, g)

    return (bwd if backward else fwd).with_attr("global_symbol", name)


lowered, forward, backward = gated.swiglu_entries(T, build, RUNNER, "the GPU")
