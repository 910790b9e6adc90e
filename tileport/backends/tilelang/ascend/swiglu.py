"""swiglu forward and backward (``tileport.ops.swiglu``'s contract) for Ascend arch35 (Ascend 950) in TileLang's
ascend dialect, one kernel per (dtype, casting); the element count is a runtime value. Also the flat elementwise
builder the gated activations share (``geglu.py`` passes gelu); the activations and entry points (flat contiguous
inputs, outputs of the input's shape) are ``../gated.py``'s with the Ascend runner.

A persistent grid of ``CORES`` vector cores, each walking its own contiguous run of ``BLOCK``-element tiles:
GM -> UB (runtime lengths, so no copy leaves the tensor), the activation in a SIMT sub-kernel in fp32, rounded once
to the dtype, UB -> GM, double-buffered by ``T.Pipelined``. One pipelined loop per core, never nested in another
loop over a dynamic extent (that overflows tilelang 0.1.15's ascend latency estimate, see ``rope.py``). casting
"eager" rounds the activation (and dup's factor) to the dtype first, as ``F.silu(gate) * up`` does; dgate =
dy * up * act' is rounded once in either casting (the contract).
"""

# No `from __future__ import annotations`: it breaks T.prim_func annotations.
import tilelang.ascend.language as T
import torch

from .. import gated
from ..targets import RUNNERS, TL_DTYPE
from ._common import CORES, MAX_WIDTH, UB_BUDGET
from ._walk import flat, lanes

RUNNER = RUNNERS["ascend"]
BLOCK = MAX_WIDTH  # elements per tile: the backward's five fp32 tiles (80 KB) fit UB_BUDGET, two stages the UB
assert 5 * 4 * BLOCK <= UB_BUDGET


def build(name: str, m: gated.Math, dtype: torch.dtype, backward: bool):
    """The kernel ``name`` over N runtime elements: y, or (dgate, dup), by ``m`` per element."""
    dt = TL_DTYPE[dtype]
    N = T.dynamic("N")

    @T.prim_func
    def fwd(G: T.Tensor((N,), dt), U: T.Tensor((N,), dt), Y: T.Tensor((N,), dt)):
        with T.Kernel(CORES) as core:
            gu = T.alloc_shared((BLOCK,), dt)
            uu = T.alloc_shared((BLOCK,), dt)
            yu = T.alloc_shared((BLOCK,), dt)
            for _ in flat(core, N, BLOCK, ((G, gu), (U, uu)), ((yu, Y),)):
                for j in lanes(BLOCK):
                    g = gu[j].astype("float32")
                    yu[j] = m.y(g, uu[j].astype("float32"))

    @T.prim_func
    def bwd(
        DY: T.Tensor((N,), dt),
        G: T.Tensor((N,), dt),
        U: T.Tensor((N,), dt),
        DG: T.Tensor((N,), dt),
        DU: T.Tensor((N,), dt),
    ):
        with T.Kernel(CORES) as core:
            dyu = T.alloc_shared((BLOCK,), dt)
            gu = T.alloc_shared((BLOCK,), dt)
            uu = T.alloc_shared((BLOCK,), dt)
            dgu = T.alloc_shared((BLOCK,), dt)
            duu = T.alloc_shared((BLOCK,), dt)
            for _ in flat(core, N, BLOCK, ((DY, dyu), (G, gu), (U, uu)), ((dgu, DG), (duu, DU))):
                for j in lanes(BLOCK):
                    g = gu[j].astype("float32")
                    dy = dyu[j].astype("float32")
                    dgu[j] = m.dgate(dy, g, uu[j].astype("float32"))
                    duu[j] = m.dup(dy, g)

    return (bwd if backward else fwd).with_attr("global_symbol", name)


lowered, forward, backward = gated.swiglu_entries(T, build, RUNNER, "an Ascend 950 NPU")
