"""The Triton backend: one module of Triton kernels per op, native on a GPU, on Ascend A2/A3 (and arch35)
through triton-ascend (``ascend.py``, ``lowering.py``), under the interpreter on the CPU.

Without a GPU, Triton only runs with ``TRITON_INTERPRET=1`` set before ``import triton``; probing this
backend on a machine with no CUDA device sets it (when triton is not imported yet). The interpreter costs
milliseconds per program instance, so on the CPU the backend serves small shapes only, is never chosen by
dispatch (force it with ``backend="triton"``), and ``available_backends()`` says so.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import os
import sys

import torch

from .. import platform
from ..registry import Availability, declared_support, kernel_modules
from . import ascend

INTERPRET_MAX_ELEMENTS = 1 << 20  # per call on the CPU interpreter
_DTYPES = frozenset({torch.float32, torch.float16, torch.bfloat16})


def interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET") == "1"


def _npu() -> bool:
    """An Ascend NPU is usable here (torch_npu imports and sees one)."""
    try:
        import torch_npu  # noqa: F401
    except Exception:  # noqa: BLE001 - no NPU stack here
        return False
    return bool(torch.npu.is_available())  # type: ignore[attr-defined]


@functools.lru_cache(maxsize=1)
def _probe() -> Availability:
    if importlib.util.find_spec("triton") is None:
        return Availability(
            False, "triton is not installed (pip install tileport[triton], or tileport[ascend] for A2/A3)"
        )
    if ascend.triton_ascend_version() is not None:  # triton-ascend: no interpreter, no GPU; lowers here, runs on an NPU
        try:
            importlib.import_module("triton")
        except Exception as exc:
            return Availability(
                False, f"triton-ascend does not import: {type(exc).__name__}: {exc} (it needs pybind11)"
            )
        where = "on " + torch.npu.get_device_name() if _npu() else "lowering only: no NPU here"  # type: ignore[attr-defined]
        return Availability(True, f"{ascend.triton_flavour()}, {where}")
    gpu = torch.cuda.is_available()
    if not gpu and "triton" not in sys.modules:
        os.environ.setdefault("TRITON_INTERPRET", "1")  # must precede the import: tl.sum is built at import
    try:
        # triton: optional (tileport[triton]), kept out of start-up
        import triton
    except Exception as exc:
        return Availability(False, f"triton does not import: {type(exc).__name__}: {exc}")
    if gpu:
        return Availability(True, f"triton {triton.__version__} on {torch.cuda.get_device_name()}")
    if not interpreting():
        return Availability(
            False, "no GPU, and triton was imported without TRITON_INTERPRET=1 (set it before importing triton)"
        )
    return Availability(
        True,
        (
            f"triton {triton.__version__} interpreter (TRITON_INTERPRET=1): CPU, small shapes only (<= "
            f"{INTERPRET_MAX_ELEMENTS} elements), slow"
        ),
    )


class TritonBackend:
    name = "triton"
    # GPUs and the CPU interpreter with upstream Triton; Ascend (A2/A3, and arch35) with triton-ascend
    device_kinds = frozenset({platform.CUDA, platform.CPU, platform.NPU_ARCH32, platform.NPU_ARCH35})
    dtypes = {op: _DTYPES for op in kernel_modules(__file__, support=("common", "ascend", "lowering"))}

    def available(self) -> Availability:
        return _probe()

    @property
    def interpreted(self) -> bool:
        return _probe().ok and not torch.cuda.is_available() and ascend.triton_ascend_version() is None

    def supports(self, op, device_kind, dtypes):
        why = declared_support(self, op, device_kind, dtypes)
        if why is not None:
            return why
        on_npu = device_kind in (platform.NPU_ARCH32, platform.NPU_ARCH35)
        if on_npu and ascend.triton_ascend_version() is None:
            return f"backend 'triton' runs on Ascend only with triton-ascend installed ({ascend.INSTALL})"
        if not on_npu and ascend.triton_ascend_version() is not None:
            return "backend 'triton' is triton-ascend here: it runs on Ascend NPUs only"
        if device_kind == platform.CPU and not interpreting():
            return "backend 'triton' runs on the CPU only under TRITON_INTERPRET=1"
        return None

    def kernels(self, op, device_kind=platform.CUDA):
        return importlib.import_module(f"{__name__}.{op}")

    def cache_info(self):
        return []  # Triton keeps its own JIT cache, keyed by constexprs; rows are not among them


BACKEND = TritonBackend()
