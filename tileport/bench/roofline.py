"""This machine's memory roofline for a given traffic: a torch copy of the same bytes, timed in the same run."""

from __future__ import annotations

import torch

from .timing import Timing, interleave


def copy_provider(nbytes_read: int, device="cpu"):
    """A provider copying ``nbytes_read`` bytes into a preallocated buffer (read + write = 2x the bytes)."""
    n = max(1, nbytes_read // 4)
    src, dst = torch.ones(n, device=device), torch.empty(n, device=device)
    return lambda: dst.copy_(src)


def gbps(nbytes: int, t: Timing) -> float:
    """GB/s of ``nbytes`` moved in the minimum time."""
    return nbytes / (t.min_us * 1e-6) / 1e9


def copy_bandwidth(nbytes_read: int, budget_s: float = 0.3) -> float:
    """GB/s of a copy reading ``nbytes_read`` bytes (and writing as many)."""
    t = interleave({"copy": copy_provider(nbytes_read)}, budget_s)["copy"]
    return gbps(2 * nbytes_read, t)
