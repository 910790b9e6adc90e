"""The rotary function an attention module calls (transformers' ``apply_rotary_pos_emb``), found by the global
its forward looks up and confirmed by what it computes (GPT-NeoX halves over q, k [B, H, T, D] with cos, sin
[B or 1, T, R]; partial rotary where R < D), replaced by tileport's rope for that module alone."""

from __future__ import annotations

from collections.abc import Callable

import torch

from .. import ops
from . import probe

NAME = "apply_rotary_pos_emb"


def tileport_rotary(backend: str | None) -> Callable:
    """transformers' ``apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=1)`` on tileport's rope."""

    def apply_rotary_pos_emb(q, k, cos, sin, position_ids=None, unsqueeze_dim=1):
        return ops.apply_rotary_pos_emb(
            q, k, cos, sin, unsqueeze_dim=unsqueeze_dim, backend=backend
        )

    return apply_rotary_pos_emb


def _inputs(rotary: int, dtype: torch.dtype, gen: torch.Generator):
    b, h, hk, t, d = 2, 4, 2, 5, 16
    q = torch.randn(b, h, t, d, generator=gen).to(dtype)
    k = torch.randn(b, hk, t, d, generator=gen).to(dtype)
    inv = 1.0 / (10000 ** (torch.arange(0, rotary, 2, dtype=torch.float64) / rotary))
    ang = torch.arange(t, dtype=torch.float64)[:, None] * inv[None, :]
    emb = torch.cat((ang, ang), -1)[None].expand(b, t, rotary)
    return q, k, emb.cos().to(dtype), emb.sin().to(dtype)


def identify(fn: Callable) -> str | None:
    """None where ``fn`` computes transformers' rotary embedding (full and, where it takes it, partial), else why
    not."""
    gen = probe._generator(2)
    for rotary in (16, 8):
        q, k, cos, sin = _inputs(rotary, torch.float32, gen)
        try:
            with torch.no_grad():
                want = fn(q, k, cos, sin)
        except Exception:  # noqa: BLE001 - a form it does not take (partial rotary) is not asked of it
            if rotary == 16:
                return "it fails on q, k [B, H, T, D] with cos, sin [B, T, D]"
            continue
        with torch.no_grad():
            got = ops.apply_rotary_pos_emb(q, k, cos, sin, backend="torch")
        if not (
            isinstance(want, tuple)
            and len(want) == 2
            and all(probe.same(w, g, exact=False) for w, g in zip(want, got))
        ):
            return f"its output differs from the GPT-NeoX rotary (rotary dim {rotary} of 16)"
    return None
