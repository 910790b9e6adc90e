"""geglu forward and backward (``tileport.ops.geglu``'s contract) for Ascend arch35 (Ascend 950) in TileLang's
ascend dialect, one kernel per (dtype, approximate, casting): ``swiglu.build``'s persistent flat walk with
``../gated.py``'s gelu.

"none" needs erfc: the ascend dialect offers erf but no erfc, and 1 + erf(x / sqrt 2) cancels in fp32 for
negative x, so erfc is ``backends/triton/geglu.py``'s ``_cdf2`` fit (Numerical Recipes' erfcc, t * exp(-z^2 +
P(t)), t = 1 / (1 + z/2), relative error under 1.2e-7 for every z >= 0; 2 - erfc(z) for x >= 0, no
cancellation), fp32 only. The dialect has no fma, so x^2 is not split as Triton's is: exp's argument -x^2/2
carries x^2's rounding, a relative error under x^2 * 2^-25 (< 3e-6 while the tail is a normal fp32); the gate
reaches it clamped to [-20, 20] (``gated.py``).
"""

# No `from __future__ import annotations`: it breaks T.prim_func annotations.
import tilelang.ascend.language as T

from .. import gated
from .swiglu import RUNNER, build


def _cdf2(x):
    """2 Phi(x) = erfc(-x / sqrt 2) in fp32 (x already in [-20, 20])."""
    z = T.abs(x) * gated.SQRT1_2
    t = 1.0 / (1.0 + 0.5 * z)
    p = -1.26551223 + t * (
        1.00002368
        + t
        * (
            0.37409196
            + t
            * (
                0.09678418
                + t
                * (
                    -0.18628806
                    + t * (0.27886807 + t * (-1.13520398 + t * (1.48851587 + t * (-0.82215223 + t * 0.17087277))))
                )
            )
        )
    )
    e = t * T.exp(p - 0.5 * x * x)
    return T.if_then_else(x < 0, e, 2.0 - e)


lowered, forward, backward = gated.geglu_entries(T, build, RUNNER, "an Ascend 950 NPU", _cdf2)
