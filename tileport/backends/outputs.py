"""Output allocation for kernel modules, poisoned on request.

The standard (section 3, note 2) initializes output memory to NaN before a test, so an element a kernel
never writes shows up as an error instead of passing with whatever the allocator left there. Kernel modules
allocate their outputs here; ``verify`` runs the backends under test inside ``poisoned()``.
"""

from __future__ import annotations

import contextvars
import math
from contextlib import contextmanager

import torch

_POISON = contextvars.ContextVar("tileport_poison_outputs", default=False)


def empty(shape, dtype: torch.dtype, device=None) -> torch.Tensor:
    """``torch.empty``, filled with NaN inside ``poisoned()`` (floating dtypes)."""
    t = torch.empty(shape, dtype=dtype, device=device)
    if _POISON.get() and t.is_floating_point():
        t.fill_(math.nan)
    return t


def empty_like(x: torch.Tensor, dtype: torch.dtype | None = None) -> torch.Tensor:
    """A contiguous ``empty`` of x's shape on x's device."""
    return empty(x.shape, dtype or x.dtype, x.device)


@contextmanager
def poisoned():
    """Every output allocated here within the block starts as NaN."""
    token = _POISON.set(True)
    try:
        yield
    finally:
        _POISON.reset(token)
