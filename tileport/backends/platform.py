"""Device and architecture detection.

Dispatch needs one word per tensor device: which family of kernels can serve it. For Ascend NPUs that word
depends on the chip: Ascend 950 (arch35) runs the tilelang wheel's ``ascend`` target, while the older A2/A3
parts (arch32, Ascend 910B / 910_93) need the separate ``tilelang-ascend`` package. The decisions are pure
functions of device names so they can be unit-tested without the hardware.
"""

from __future__ import annotations

import functools
import hashlib
import platform
import re

import torch

CPU = "cpu"
CUDA = "cuda"
NPU_ARCH35 = "npu-arch35"
NPU_ARCH32 = "npu-arch32"


def is_arch35(device_name: str) -> bool:
    """True for Ascend 950-class chips (arch35), after MindSpeed-Ops' ``is_arch35()`` name test."""
    return "Ascend950" in device_name or "Ascend910_95" in device_name


def is_arch32(device_name: str) -> bool:
    """True for Ascend A2/A3 chips (Ascend 910B, 910_93, 910C), served by tilelang-ascend."""
    return any(tag in device_name for tag in ("Ascend910B", "Ascend910_93", "Ascend910C"))


def npu_kind(device_name: str) -> str:
    """Map an Ascend device name (``torch_npu.npu.get_device_name()``) to a dispatch kind."""
    if is_arch35(device_name):
        return NPU_ARCH35
    if is_arch32(device_name):
        return NPU_ARCH32
    raise ValueError(
        f"unsupported Ascend device {device_name!r}: tileport knows arch35 (Ascend950, Ascend910_95) "
        "and arch32 (Ascend910B, Ascend910_93, Ascend910C)"
    )


def _npu_device_name(index: int | None) -> str:
    import torch_npu  # noqa: F401  (only on Ascend machines)

    return torch.npu.get_device_name(index if index is not None else 0)  # type: ignore[attr-defined]


def device_kind(device: torch.device, npu_name=_npu_device_name) -> str:
    """The dispatch kind of a tensor device: ``cpu``, ``cuda``, ``npu-arch35``, ``npu-arch32`` or the raw type.

    ``device`` may be any description with ``type`` and ``index`` (``torch.device("npu")`` exists only once
    torch_npu is imported); ``npu_name`` is injectable so tests decide for device names without an NPU.
    """
    if device.type == "npu":
        return npu_kind(npu_name(device.index))
    return device.type


@functools.lru_cache(maxsize=1)
def cpu_model() -> str:
    """The CPU's model name (``/proc/cpuinfo``), falling back to ``platform.processor()``."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown-cpu"


@functools.lru_cache(maxsize=1)
def cpu_flags() -> frozenset[str]:
    """ISA feature flags of the CPU (empty where ``/proc/cpuinfo`` is absent)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith("flags"):
                    return frozenset(line.split(":", 1)[1].split())
    except OSError:
        pass
    return frozenset()


def cpu_isa(flags: frozenset[str] | None = None) -> str:
    """The CPU's vector ISA in a few words, from its feature flags (what benchmarks must name)."""
    f = cpu_flags() if flags is None else flags
    base = next(
        (
            name
            for flag, name in (
                ("avx512f", "AVX-512"),
                ("avx2", "AVX2"),
                ("avx", "AVX"),
                ("asimd", "NEON"),
                ("sse2", "SSE2"),
            )
            if flag in f
        ),
        "no SIMD flags",
    )
    extras = [name for flag, name in (("fma", "FMA"), ("f16c", "F16C"), ("avx512_bf16", "AVX512-BF16")) if flag in f]
    return ", ".join([base, *extras])


def cpu_tag() -> str:
    """A file-name-safe tag for this CPU model and ISA: kernels built with -march=native are only valid here."""
    slug = re.sub(r"[^A-Za-z0-9]+", "-", cpu_model()).strip("-").lower()[:48] or "cpu"
    digest = hashlib.sha1(" ".join(sorted(cpu_flags())).encode()).hexdigest()[:8]
    return f"{platform.machine()}-{slug}-{digest}"
