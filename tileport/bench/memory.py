"""Peak bytes of the tensors a call allocates, counted at the torch dispatcher.

CPU torch keeps no allocator statistics, and the profiler's CPU memory view misses allocations made through
``torch.empty`` here. So every aten op's outputs are seen through a ``TorchDispatchMode``: a storage not seen
before adds its bytes, and is subtracted when the tensor that brought it is freed (views share the storage
and are not counted twice). Inputs that exist before the call are not counted. This is tracemalloc for torch
tensors: what ATK's memory task reports, measured the same way for the operator and its baseline.
``resident_peak_bytes`` is the coarser measure by the process's resident memory, for code the dispatcher does not
see (torch.compile's).
"""

from __future__ import annotations

import ctypes
import re
import weakref
from collections.abc import Callable
from pathlib import Path

import torch
import torch.utils._pytree as pytree
from torch.utils._python_dispatch import TorchDispatchMode

from .. import devices


class _Accounting(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.live: dict[int, int] = {}
        self.current = 0
        self.peak = 0

    def _release(self, ptr: int) -> None:
        self.current -= self.live.pop(ptr, 0)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        # an output sharing an argument's storage is a view or an in-place result: nothing new was allocated
        given = {
            t.untyped_storage().data_ptr() for t in pytree.tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)
        }
        for t in pytree.tree_leaves(out):
            if isinstance(t, torch.Tensor) and t.device.type == "cpu":
                storage = t.untyped_storage()
                ptr = storage.data_ptr()
                if ptr and ptr not in self.live and ptr not in given:
                    self.live[ptr] = storage.nbytes()
                    self.current += storage.nbytes()
                    self.peak = max(self.peak, self.current)
                    weakref.finalize(t, self._release, ptr)
        return out


_STATUS = Path("/proc/self/status")
_CLEAR_REFS = Path("/proc/self/clear_refs")


def _status_bytes(key: str) -> int:
    """A ``/proc/self/status`` line's size (``VmRSS``, ``VmHWM``) in bytes."""
    found = re.search(rf"^{key}:\s+(\d+) kB", _STATUS.read_text(), re.MULTILINE)
    if found is None:
        raise OSError(f"no {key} in {_STATUS}")
    return int(found.group(1)) * 1024


def resident_peak_bytes(fn: Callable[[], object]) -> int | None:
    """The rise of this process's resident memory over ``fn()`` (Linux; None elsewhere): freed heap memory handed
    back to the system first (glibc's ``malloc_trim``), the resident high-water mark reset (``clear_refs`` 5), then
    the mark after the call less the resident size before it. It sees what ``peak_bytes`` cannot: allocations made
    outside the dispatcher, such as torch.compile's generated code's (dynamo runs a frame eagerly under a dispatch
    mode). Coarser: whole pages, and only memory the call touches."""
    try:
        libc = ctypes.CDLL(None)
        libc.malloc_trim(0)
        _CLEAR_REFS.write_text("5")
        base = _status_bytes("VmRSS")
    except (OSError, AttributeError):  # not Linux with glibc, or /proc not writable here
        return None
    result = fn()
    peak = max(0, _status_bytes("VmHWM") - base)
    del result
    return peak


def peak_bytes(fn: Callable[[], object], device: str = "cpu") -> int:
    """The largest total of bytes held at once by tensors that ``fn`` allocates (its outputs included).
    On a CUDA or NPU device, the caching allocator's own peak statistic is used instead."""

    accelerator = devices.module(device)
    if accelerator is not None:
        accelerator.synchronize()
        base = accelerator.memory_allocated()
        accelerator.reset_peak_memory_stats()
        result = fn()
        accelerator.synchronize()
        peak = accelerator.max_memory_allocated() - base
        del result
        return peak
    mode = _Accounting()
    with mode:
        result = fn()
    peak = mode.peak
    del result
    return peak
