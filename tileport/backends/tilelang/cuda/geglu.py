"""geglu forward and backward (``tileport.ops.geglu``'s contract) as TileLang CUDA kernels, one per (dtype,
approximate, casting): swiglu's flat builder (``swiglu.build``) with ``../gated.py``'s gelu, whose "none" form
takes CUDA's erfcf (1 + erf cancels in fp32 for negative x).
"""

# No `from __future__ import annotations`: it breaks T.prim_func annotations.
import tilelang.language as T

from .. import gated
from .swiglu import RUNNER, build


def _cdf2(x):
    """2 Phi(x) = erfc(-x / sqrt 2)."""
    return T.call_extern("float32", "erfcf", -x * gated.SQRT1_2)


lowered, forward, backward = gated.geglu_entries(T, build, RUNNER, "the GPU", _cdf2)
