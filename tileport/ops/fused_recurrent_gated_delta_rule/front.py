"""flash-linear-attention's ``fused_recurrent_gated_delta_rule`` signature over the declared operator (the final
state only when asked for, from zeros where no initial state is given)."""

from __future__ import annotations

import torch

from ...backends.sequences import lengths
from ..chunk_gated_delta_rule.front import refuse_unsupported
from .spec import function


def fused_recurrent_gated_delta_rule(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor | None = None,
    gk: torch.Tensor | None = None,
    gv: torch.Tensor | None = None,
    beta: torch.Tensor | None = None,
    scale: float | None = None,
    initial_state: torch.Tensor | None = None,
    output_final_state: bool = False,
    use_qk_l2norm_in_kernel: bool = False,
    use_gate_in_kernel: bool = False,
    A_log: torch.Tensor | None = None,
    dt_bias: torch.Tensor | None = None,
    use_beta_sigmoid_in_kernel: bool = False,
    allow_neg_eigval: bool = False,
    state_v_first: bool = False,
    cu_seqlens: torch.Tensor | None = None,
    *,
    backend: str | None = None,
):
    """``(o, final_state)``: gated DeltaNet token by token, for decoding (flash-linear-attention's signature).

    q, k ``[B, T, H, K]``, v ``[B, T, HV, V]``, g (log-space decay; None: none) and beta (None: 1) ``[B, T, HV]``;
    ``scale`` None for K ** -0.5; ``initial_state [N, HV, K, V]`` (the state earlier tokens left);
    ``output_final_state``: the state after the last token, fp32 (fp64 for fp64); ``use_qk_l2norm_in_kernel``:
    q and k L2-normalized first; ``cu_seqlens``: packed sequences (B = 1). Forward only: a backward raises
    NotImplementedError (train with chunk_gated_delta_rule). fla's ``gk``, ``gv``, in-kernel gate and beta and
    ``state_v_first`` raise NotImplementedError."""
    refuse_unsupported(
        "fused_recurrent_gated_delta_rule",
        dict(
            gk=gk,
            gv=gv,
            use_gate_in_kernel=use_gate_in_kernel,
            A_log=A_log,
            dt_bias=dt_bias,
            use_beta_sigmoid_in_kernel=use_beta_sigmoid_in_kernel,
            allow_neg_eigval=allow_neg_eigval,
            state_v_first=state_v_first,
        ),
    )
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor) or t.dim() != 4:
            got = tuple(t.shape) if isinstance(t, torch.Tensor) else type(t).__name__
            raise ValueError(f"{name} must be a 4-dim tensor [B, T, heads, dim], got {got}")
    states = initial_state if isinstance(initial_state, torch.Tensor) else None
    n = len(lengths(q.shape[0], q.shape[1], cu_seqlens, states))
    if output_final_state and initial_state is None:
        initial_state = q.new_zeros(n, v.shape[2], q.shape[3], v.shape[3], dtype=torch.float32)
    o, final = function(q, k, v, g, beta, initial_state, cu_seqlens, scale, use_qk_l2norm_in_kernel, backend)
    return o, (final if output_final_state else None)
