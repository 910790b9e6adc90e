"""chunk_gated_delta_rule on the CPU: the chunk algorithm of ``chunked.py`` (its matrix products in torch's fp32
GEMMs, the state recurrence one batched product pair per chunk step), for q, k, v in fp32, fp16 or bf16, computed
in fp32 (a 16-bit GEMM on a CPU without AVX512-BF16 runs at a few GFLOP/s, and fp32 keeps the state exact to fp32)."""

from __future__ import annotations

import torch

from ... import sequences
from . import chunked, wy

# its GEMMs are torch's; the kernel of the intra-chunk preparation (decays, the WY inverse) is its own
PACKED_CHECKS = (("wy_prepare", lambda dtype: wy.build(chunked.C)),)


def _nothing_flows(q, v) -> bool:
    """No token, or states of no element (HV, K or V = 0): o is 0 and the states pass through unchanged."""
    return 0 in (q.shape[1], v.shape[2], q.shape[3], v.shape[3])


def forward(q, k, v, g, beta, initial_state, cu_seqlens, scale: float):
    sequences.lengths(q.shape[0], q.shape[1], cu_seqlens, initial_state)
    if _nothing_flows(q, v):
        final = None if initial_state is None else initial_state.to(torch.float32, copy=True)
        return torch.zeros_like(v), final
    return chunked.forward(q, k, v, g, beta, initial_state, cu_seqlens, scale)


def backward(q, k, v, g, beta, initial_state, cu_seqlens, do, dfinal_state, scale: float):
    sequences.lengths(q.shape[0], q.shape[1], cu_seqlens, initial_state)
    if _nothing_flows(q, v):
        dh0 = None
        if initial_state is not None:
            dh0 = torch.zeros_like(initial_state) if dfinal_state is None else dfinal_state.to(initial_state.dtype)
        return (*(torch.zeros_like(x) for x in (q, k, v, g, beta)), dh0)
    return chunked.backward(q, k, v, g, beta, initial_state, cu_seqlens, do, dfinal_state, scale)
