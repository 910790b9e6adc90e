"""chunk_gated_delta_rule: gated DeltaNet's linear attention in chunks (the contract, stated once here).

Semantics (flash-linear-attention's ``chunk_gated_delta_rule``; transformers' ``torch_chunk_gated_delta_rule``, the
linear attention of Qwen3-Next, Qwen3.5 and OLMo-hybrid):
- q, k ``[B, T, H, K]``, v ``[B, T, HV, V]`` with HV a multiple of H (grouped value heads: value head j reads key
  head j // (HV / H)), g and beta ``[B, T, HV]``; K and V may differ. Per value head a state S [K, V], from
  ``initial_state[n]`` (zeros where none is given), and per token t:
      S <- exp(g_t) S;   v'_t = beta_t (v_t - S^T k_t);   S <- S + k_t v'_t^T;   o_t = scale S^T q_t.
  g is a log-space decay (<= 0 in models; any real is computed as given), beta the update's strength (in (0, 1)
  in models). With ``cu_seqlens`` [N + 1] (int64, rising from 0 to T, B = 1) the T tokens are N sequences, each
  with its own state; otherwise N = B. ``scale`` None is K ** -0.5.
- o in q's dtype; the final state ``[N, HV, K, V]`` in fp32 (fp64 for fp64), when asked for; the initial state
  in any float dtype. ``use_qk_l2norm_in_kernel``: q and k are first L2-normalized, x * rsqrt(sum(x^2) + 1e-6)
  (tileport's l2norm). Differentiable in q, k, v, g, beta and initial_state, the final state's gradient included.
- Computed in chunks of 64 tokens (the WY representation, ``tileport/backends/tilelang/cpu/chunked.py``): the
  result of the recurrence above, to the precision standard's ratios against the same-dtype benchmark (the torch
  backend: the chunk algorithm in the input dtype) with the token-by-token recurrence in float64 as the golden.

What a backend's ``chunk_gated_delta_rule`` kernel module gives (called by the interface unless every result is
empty; tensors as the caller gave them, any strides; q, k, v of one dtype, g, beta and initial_state of their own):

    forward(q, k, v, g, beta, initial_state, cu_seqlens, scale: float) -> (o, final_state)
    backward(q, k, v, g, beta, initial_state, cu_seqlens, do, dfinal_state, scale: float)
        -> (dq, dk, dv, dg, dbeta, dinitial_state)

``initial_state`` may be None (then final_state and dinitial_state are None, the state starts at zeros);
``cu_seqlens`` may be None (B sequences of T tokens); ``dfinal_state`` may be None (no gradient reaches the final
state). Each gradient in its input's dtype.
"""

from __future__ import annotations

from .front import chunk_gated_delta_rule
from .spec import SPEC
from .spec import function as gated_delta_rule

OP = "chunk_gated_delta_rule"
_API = SPEC.api
chunk_gated_delta_rule_fwd, chunk_gated_delta_rule_bwd = _API.forward, _API.backward  # the declaration's forms
__all__ = ["chunk_gated_delta_rule", "chunk_gated_delta_rule_bwd", "chunk_gated_delta_rule_fwd", "gated_delta_rule"]
chunk_gated_delta_rule.__module__ = gated_delta_rule.__module__ = __name__  # the public names' home
