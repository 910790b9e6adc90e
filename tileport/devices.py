"""The devices ``verify`` and ``bench`` run on: the CPU, a CUDA GPU, an Ascend NPU (torch_npu). torch_npu mirrors
torch.cuda's API (``torch.npu.synchronize``, memory statistics, device names), so one accessor serves both.
The NPU parts are plain functions, replaced in tests where no NPU is (as the platform tests inject device names).
"""

from __future__ import annotations

import torch

from .backends import platform

DEVICES = ("cpu", "cuda", "npu")
GOLDEN_ON_CPU = ("npu",)  # no fp64 arithmetic on the device: the float64 golden runs on the CPU


def npu_ready() -> str | None:
    """None where an NPU is usable (torch_npu imports and sees one), else why not."""
    try:
        import torch_npu  # noqa: F401
    except Exception as exc:  # noqa: BLE001 - any failure to import means no NPU here
        return (
            f"torch_npu does not import ({type(exc).__name__}: {exc}); on an Ascend host source CANN's set_env.sh "
            "and install torch_npu"
        )
    if not torch.npu.is_available():  # type: ignore[attr-defined]
        return "torch_npu sees no NPU"
    return None


def check(device: str) -> str:
    """``device`` where it is usable here; ValueError saying why not otherwise."""
    if device == "cpu":
        return device
    if device == "cuda":
        if not torch.cuda.is_available():
            raise ValueError("device 'cuda' is not usable here: torch sees no CUDA GPU")
        return device
    if device == "npu":
        why = npu_ready()
        if why is not None:
            raise ValueError(f"device 'npu' is not usable here: {why}")
        return device
    raise ValueError(f"device must be one of {', '.join(DEVICES)}, got {device!r}")


def module(device: str):
    """torch.cuda or torch.npu for an accelerator device (the same API), None for the CPU."""
    kind = device.split(":")[0]
    return None if kind == "cpu" else getattr(torch, kind)


def to(t: torch.Tensor, device: str) -> torch.Tensor:
    """``t`` on ``device`` (a seam: tests stand an NPU in with the CPU)."""
    return t.to(device)


def name(device: str) -> str:
    """The accelerator's name (the CPU's is the machine's, named elsewhere)."""
    m = module(device)
    return "" if m is None else m.get_device_name()


def kind(device: str, npu_name=None) -> str:
    """The dispatch kind of a device string (``npu`` -> npu-arch32 or npu-arch35, from the chip's name)."""

    if device.split(":")[0] == "npu":

        class _Npu:
            type, index = "npu", 0

        return platform.device_kind(_Npu(), npu_name) if npu_name else platform.device_kind(_Npu())
    return torch.device(device).type
