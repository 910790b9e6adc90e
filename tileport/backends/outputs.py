"""Output allocation for kernel modules: large CPU outputs on transparent huge pages, poisoned on request.

Huge pages: glibc maps every block of 32 MiB or more fresh from the system (its mmap threshold stops rising
there) and the new output then faults in 4 KiB page by page: three quarters of a large call's time. Where the
kernel offers transparent huge pages (``/sys/kernel/mm/transparent_hugepage/enabled``: ``madvise`` or
``always``), such outputs are anonymous mappings advised ``MADV_HUGEPAGE``, 2 MiB-aligned, faulting 512 times
less often. Below 32 MiB glibc reuses freed blocks and ``torch.empty`` is faster. ``TILEPORT_HUGE_PAGES=0``
or ``set_huge_page_outputs(False)`` turns it off (verify's workers do: they keep freed memory instead).

Poison: the standard (section 3, note 2) initializes output memory to NaN before a test, so an element a
kernel never writes shows up as an error instead of passing with whatever the allocator left there. Kernel
modules allocate their outputs here; ``verify`` runs the backends under test inside ``poisoned()``.
"""

from __future__ import annotations

import contextvars
import functools
import math
import mmap
import os
from contextlib import contextmanager
from pathlib import Path

import torch

HUGE_MIN_BYTES = 32 << 20  # glibc's DEFAULT_MMAP_THRESHOLD_MAX on 64-bit: from here every block is mapped fresh
HUGE_PAGE = 2 << 20
THP_SETTING = Path("/sys/kernel/mm/transparent_hugepage/enabled")
_HUGE = {"on": os.environ.get("TILEPORT_HUGE_PAGES", "1") != "0"}


@functools.cache
def huge_pages_offered() -> bool:
    """Whether this kernel gives transparent huge pages to a mapping advised MADV_HUGEPAGE."""
    try:
        mode = THP_SETTING.read_text()
    except OSError:
        return False
    return hasattr(mmap, "MADV_HUGEPAGE") and ("[madvise]" in mode or "[always]" in mode)


def set_huge_page_outputs(enabled: bool) -> bool:
    """Turn the huge-page outputs on or off for this process (default: on, unless ``TILEPORT_HUGE_PAGES=0``);
    returns the previous setting."""
    previous, _HUGE["on"] = _HUGE["on"], bool(enabled)
    return previous


def huge_page_outputs() -> bool:
    """Whether large CPU outputs go on huge pages now (the setting, and the kernel offering them)."""
    return _HUGE["on"] and huge_pages_offered()


def _on_cpu(device) -> bool:
    return device is None or torch.device(device).type == "cpu"


def _huge_empty(shape, dtype: torch.dtype) -> torch.Tensor:
    n = math.prod(shape)
    nbytes = n * dtype.itemsize
    area = mmap.mmap(-1, nbytes + HUGE_PAGE, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    area.madvise(mmap.MADV_HUGEPAGE)
    offset = -torch.frombuffer(area, dtype=torch.uint8, count=1).data_ptr() % HUGE_PAGE
    return torch.frombuffer(area, dtype=dtype, count=n, offset=offset).view(shape)  # the tensor keeps the mapping


_POISON = contextvars.ContextVar("tileport_poison_outputs", default=False)


def empty(shape, dtype: torch.dtype, device=None) -> torch.Tensor:
    """``torch.empty`` (on huge pages for a large CPU output, see above), filled with NaN inside ``poisoned()``
    (floating dtypes)."""
    if type(shape) is int:
        shape = (shape,)
    if _HUGE["on"] and math.prod(shape) * dtype.itemsize >= HUGE_MIN_BYTES and _on_cpu(device) and huge_pages_offered():
        t = _huge_empty(tuple(shape), dtype)
    else:  # the one-row path: a dict lookup and a product; sizes as arguments, which torch parses faster than
        t = torch.empty(*shape, dtype=dtype, device=device)  # a tuple
    if _POISON.get() and t.is_floating_point():
        t.fill_(math.nan)
    return t


def empty_like(x: torch.Tensor, dtype: torch.dtype | None = None) -> torch.Tensor:
    """A contiguous ``empty`` of x's shape on x's device."""
    return empty(x.shape, dtype or x.dtype, x.device)


def empty_in_layout(x: torch.Tensor) -> torch.Tensor:
    """``torch.empty_like(x)`` (x's strides where x is dense, else dense in x's dimension order: a transposed
    input gives an output transposed alike) allocated here (huge pages, poison)."""
    if x.is_contiguous():
        return empty(x.shape, x.dtype, x.device)
    strides = torch.empty_like(x, device="meta").stride()  # dense: numel elements hold it
    return empty((x.numel(),), x.dtype, x.device).as_strided(x.shape, strides)


def copied_into(out, results: tuple):
    """``results`` where ``out`` is None, else each result copied into its ``out`` slot (None slots skipped) and
    ``out`` returned: ``out=`` for a kernel whose launch writes its own buffers."""
    if out is None:
        return results
    for into, value in zip(out, results):
        if into is not None:
            into.copy_(value)
    return out


@contextmanager
def poisoned():
    """Every output allocated here within the block starts as NaN."""
    token = _POISON.set(True)
    try:
        yield
    finally:
        _POISON.reset(token)
