"""fused_recurrent_gated_delta_rule: gated DeltaNet token by token, for decoding (the contract, stated once here).

Semantics (flash-linear-attention's ``fused_recurrent_gated_delta_rule``; transformers'
``torch_recurrent_gated_delta_rule``, the decode path of Qwen3-Next, Qwen3.5 and OLMo-hybrid): chunk_gated_delta_rule's
recurrence (``tileport.ops.chunk_gated_delta_rule``), computed a token at a time, with g optional (None: no decay)
and beta optional (None: 1). The state a call starts from (``initial_state``) is what the previous call left
(``output_final_state=True``); its dtype any float, the final state fp32 (fp64 for fp64). Forward only: its
backward raises NotImplementedError, as fla's does.

What a backend's ``fused_recurrent_gated_delta_rule`` kernel module gives (tensors as the caller gave them):

    forward(q, k, v, g, beta, initial_state, cu_seqlens, scale: float) -> (o, final_state)

g, beta, initial_state and cu_seqlens may be None; final_state is None without initial_state. A step reads each
state once and writes it once (the decode roofline: the state's bytes against the copy's bandwidth).
"""

from __future__ import annotations

from .front import fused_recurrent_gated_delta_rule
from .spec import SPEC
from .spec import function as gated_delta_rule_step

OP = "fused_recurrent_gated_delta_rule"
_API = SPEC.api
fused_recurrent_gated_delta_rule_fwd = _API.forward  # the declaration's form
__all__ = ["fused_recurrent_gated_delta_rule", "fused_recurrent_gated_delta_rule_fwd", "gated_delta_rule_step"]
fused_recurrent_gated_delta_rule.__module__ = gated_delta_rule_step.__module__ = __name__  # the public names' home
