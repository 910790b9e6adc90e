"""Backends: a registry (dispatch by device and architecture) over one package per backend."""

from .registry import (  # noqa: F401
    REGISTRY,
    BackendInfo,
    BackendUnavailableError,
    available_backends,
    kernel_cache_info,
)
from .triton import ascend


def ascend_paths() -> tuple[str, str | None, list[str], list[tuple[str, str, str]]]:
    """(which Triton is installed, CANN's bishengir-compile or None, what an A2/A3 device run still needs, and per
    operator the backend an arch35 and an arch32 NPU would get here, decided from device names: no NPU needed)."""
    # here, not at the top: this package's name ``torch`` is its torch backend once that is imported
    import torch

    class _Npu:  # a device description: dispatch reads type and index only
        type, index = "npu", 0

    def first(op: str, name: str) -> str:
        try:
            got = REGISTRY.resolve(op, _Npu(), (torch.bfloat16,), npu_name=lambda index: name).name
        except BackendUnavailableError:
            return "none"
        return {"tilelang": "tilelang (ascend target)", "triton": "triton (triton-ascend)"}.get(got, got)

    ops = sorted({op for b in available_backends() for op in b.ops})
    rows = [(op, first(op, "Ascend950PR"), first(op, "Ascend910B3")) for op in ops]
    return ascend.triton_flavour(), ascend.bishengir(), ascend.missing_for_device(), rows
