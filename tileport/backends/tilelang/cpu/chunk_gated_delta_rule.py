"""chunk_gated_delta_rule on the CPU: the chunk algorithm of ``chunked.py`` (its matrix products in torch's fp32
GEMMs, the state recurrence one batched product pair per chunk step), for q, k, v in fp32, fp16 or bf16, computed
in fp32 (a 16-bit GEMM on a CPU without AVX512-BF16 runs at a few GFLOP/s, and fp32 keeps the state exact to fp32)."""

from __future__ import annotations

import torch

from . import chunked

PACKED_CHECKS = ()  # no TileLang loop of its own to read: its products are torch's GEMMs


def forward(q, k, v, g, beta, initial_state, cu_seqlens, scale: float):
    if q.shape[1] == 0:  # no token: the states pass through
        o = v.new_empty(v.shape)
        return o, None if initial_state is None else initial_state.to(torch.float32, copy=True)
    return chunked.forward(q, k, v, g, beta, initial_state, cu_seqlens, scale)


def backward(q, k, v, g, beta, initial_state, cu_seqlens, do, dfinal_state, scale: float):
    if q.shape[1] == 0:
        dh0 = None
        if initial_state is not None:
            dh0 = torch.zeros_like(initial_state) if dfinal_state is None else dfinal_state.to(initial_state.dtype)
        return (*(torch.zeros_like(x) for x in (q, k, v, g, beta)), dh0)
    return chunked.backward(q, k, v, g, beta, initial_state, cu_seqlens, do, dfinal_state, scale)
