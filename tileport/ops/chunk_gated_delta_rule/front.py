"""flash-linear-attention's ``chunk_gated_delta_rule`` signature over the declared operator: the final state only when
asked for (from zeros where no initial state is given), fla's checks of packed sequences, and NotImplementedError for
fla's arguments tileport does not implement."""

from __future__ import annotations

import torch

from ...backends.sequences import lengths
from .spec import function

# fla's arguments without an implementation here, with the value that asks for nothing (any other raises)
UNSUPPORTED = {
    "use_gate_in_kernel": False,
    "A_log": None,
    "dt_bias": None,
    "use_beta_sigmoid_in_kernel": False,
    "allow_neg_eigval": False,
    "state_v_first": False,
    "chunk_indices": None,
    "cp_context": None,
    "gk": None,  # fused_recurrent_gated_delta_rule's per-key and per-value decays
    "gv": None,
}


def refuse_unsupported(op: str, given: dict) -> None:
    """NotImplementedError naming the first of fla's arguments given a value that asks for what tileport lacks."""
    for name, value in given.items():
        idle = UNSUPPORTED[name]
        if (value is not None) if idle is None else (value != idle):
            shown = "a tensor" if isinstance(value, torch.Tensor) else repr(value)
            raise NotImplementedError(
                f"{op}: {name} = {shown} is not implemented by tileport (flash-linear-attention's argument; "
                f"compute it before the call: {name} must be {idle!r})"
            )


def chunk_gated_delta_rule(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    scale: float | None = None,
    initial_state: torch.Tensor | None = None,
    output_final_state: bool = False,
    use_qk_l2norm_in_kernel: bool = False,
    use_beta_sigmoid_in_kernel: bool = False,
    allow_neg_eigval: bool = False,
    state_v_first: bool = False,
    cu_seqlens: torch.Tensor | None = None,
    cu_seqlens_cpu: torch.Tensor | None = None,
    chunk_indices: torch.Tensor | None = None,
    cp_context=None,
    *,
    use_gate_in_kernel: bool = False,
    A_log: torch.Tensor | None = None,
    dt_bias: torch.Tensor | None = None,
    chunk_size: int = 64,
    backend: str | None = None,
):
    """``(o, final_state)``: gated DeltaNet over chunks (flash-linear-attention's signature and semantics).

    q, k ``[B, T, H, K]``, v ``[B, T, HV, V]`` (HV a multiple of H: grouped value heads), g (log-space decay, <= 0)
    and beta ``[B, T, HV]`` (fp32 beside 16-bit q, k, v, or their dtype); ``scale`` None for K ** -0.5;
    ``initial_state [N, HV, K, V]`` in any float dtype; ``output_final_state``: the final state [N, HV, K, V] in
    fp32 (fp64 for fp64), else None; ``use_qk_l2norm_in_kernel``: q and k L2-normalized first (eps 1e-6);
    ``cu_seqlens [N + 1]`` int64 offsets of packed sequences in q [1, T, H, K]. o in q's dtype. Differentiable in
    q, k, v, g, beta and initial_state. ``cu_seqlens_cpu`` (a host copy of cu_seqlens) and ``chunk_size`` (16, 32,
    64: fla's tiling) change nothing here; fla's in-kernel gate and beta, ``state_v_first``, ``chunk_indices`` and
    ``cp_context`` raise NotImplementedError."""
    refuse_unsupported(
        "chunk_gated_delta_rule",
        dict(
            use_gate_in_kernel=use_gate_in_kernel,
            A_log=A_log,
            dt_bias=dt_bias,
            use_beta_sigmoid_in_kernel=use_beta_sigmoid_in_kernel,
            allow_neg_eigval=allow_neg_eigval,
            state_v_first=state_v_first,
            chunk_indices=chunk_indices,
            cp_context=cp_context,
        ),
    )
    if chunk_size not in (16, 32, 64):
        raise ValueError(f"chunk_size must be 16, 32 or 64 (fla's), got {chunk_size!r}")
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor) or t.dim() != 4:
            got = tuple(t.shape) if isinstance(t, torch.Tensor) else type(t).__name__
            raise ValueError(f"{name} must be a 4-dim tensor [B, T, heads, dim], got {got}")
    if k.shape[2] != q.shape[2] or v.shape[2] % max(q.shape[2], 1):
        raise ValueError(
            f"v's HV = {v.shape[2]} heads (its dim 2) must be a multiple of q's and k's H = {q.shape[2]}, with k's "
            f"H = {k.shape[2]}"
        )
    n = len(
        lengths(q.shape[0], q.shape[1], cu_seqlens, initial_state if isinstance(initial_state, torch.Tensor) else None)
    )
    if output_final_state and initial_state is None:
        initial_state = q.new_zeros(n, v.shape[2], q.shape[3], v.shape[3], dtype=torch.float32)
    o, final = function(q, k, v, g, beta, initial_state, cu_seqlens, scale, use_qk_l2norm_in_kernel, backend)
    return o, (final if output_final_state else None)
