"""Ascend A2/A3 (arch32) through triton-ascend: which Triton is installed, the chips' tiling, and lowering every
kernel to its TTIR and Linalg IR (and the NPU binary where CANN is present) without a device.

The kernels are the GPU ones (``tileport/backends/triton/<op>.py``): each program walks row blocks
(``for blk in range(pid, blocks, programs)``), so on a GPU the grid is one program per row block and on Ascend
it is the vector-core count with each program looping; the blocks fit the unified buffer (``common.blocks``).
Lowering captures the launches an operator's forward and backward make on small CPU tensors (nothing runs)
and compiles each for the chip (``triton.compile`` with an ``npu`` target).
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import importlib.metadata
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

import torch

INSTALL = (
    "pip install 'tileport[ascend]'  (triton-ascend and pybind11, in an environment of its own: it replaces "
    "upstream triton)"
)


@dataclass(frozen=True)
class Chip:
    """An Ascend chip as Triton targets it: its arch string, vector cores (a vector kernel's grid) and unified
    buffer per vector core. The table's numbers are used for lowering; on a device the driver's count wins."""

    target: str  # tileport's name: ascend-a2, ascend-a3
    arch: str  # triton-ascend's GPUTarget arch
    name: str
    vector_cores: int
    ub_bytes: int


CHIPS = {
    "ascend-a2": Chip("ascend-a2", "Ascend910B3", "Atlas 800T A2 (Ascend 910B3)", 40, 192 * 1024),
    "ascend-a3": Chip("ascend-a3", "Ascend910_9391", "Atlas 800T A3 (Ascend 910_9391)", 48, 192 * 1024),
}
_LOWERING: contextvars.ContextVar[Chip | None] = contextvars.ContextVar("tileport_ascend_lowering", default=None)


@functools.lru_cache(maxsize=1)
def triton_ascend_version() -> str | None:
    """The installed triton-ascend's version, or None (upstream Triton, or none)."""
    try:
        return importlib.metadata.version("triton-ascend")
    except importlib.metadata.PackageNotFoundError:
        return None


def triton_flavour() -> str:
    """Which Triton is installed, in words (``tileport backends`` and ``doctor`` say it)."""
    asc = triton_ascend_version()
    if asc:
        return f"triton-ascend {asc} (Ascend A2/A3; replaces upstream triton here)"
    try:
        return f"upstream triton {importlib.metadata.version('triton')} (GPU, and the CPU interpreter)"
    except importlib.metadata.PackageNotFoundError:
        return "no triton installed"


def bishengir() -> str | None:
    """CANN's ``bishengir-compile`` (the NPU binary's last stage), where found; None without CANN."""
    found = shutil.which("bishengir-compile")
    home = os.environ.get("ASCEND_HOME_PATH")
    if found is None and home:
        candidate = Path(home) / "bin" / "bishengir-compile"
        found = str(candidate) if candidate.is_file() else None
    return found


def missing_for_device() -> list[str]:
    """What an A2/A3 device run still needs here (empty when nothing is missing)."""
    out = []
    if triton_ascend_version() is None:
        out.append(f"triton-ascend ({INSTALL})")
    if bishengir() is None:
        out.append("CANN's bishengir-compile (source <ascend-toolkit>/set_env.sh)")
    try:
        import torch_npu  # noqa: F401
    except Exception:  # noqa: BLE001 - any import failure means no NPU runs here
        out.append("torch_npu matching torch " + torch.__version__.split("+")[0])
    return out


EMULATE = "TILEPORT_TRITON_ASCEND"  # ascend-a2 / ascend-a3: CPU launches (the interpreter) take that chip's forms


def chip_of(device: torch.device | None) -> Chip | None:
    """The chip a launch tiles for: the one being lowered for, an NPU tensor's (the driver's core count), or
    under the interpreter the one ``$TILEPORT_TRITON_ASCEND`` names (the Ascend forms measured on the CPU)."""
    lowering = _LOWERING.get()
    if lowering is not None:
        return lowering
    if device is None or device.type != "npu":
        emulated = os.environ.get(EMULATE) if device is not None and device.type == "cpu" else None
        return CHIPS.get(emulated) if emulated else None
    name = torch.npu.get_device_name(device.index or 0)  # type: ignore[attr-defined]
    chip = CHIPS["ascend-a3" if "910_93" in name else "ascend-a2"]
    try:
        # triton: optional (tileport[triton]), kept out of start-up
        import triton

        props = triton.runtime.driver.active.utils.get_device_properties(device.index or 0)
        return Chip(chip.target, chip.arch, name, int(props.get("num_vectorcore", chip.vector_cores)), chip.ub_bytes)
    except Exception:  # noqa: BLE001 - the table's count where the driver does not say
        return chip


@contextlib.contextmanager
def lowering_for(chip: Chip):
    """Tile launches for ``chip`` inside the block (lowering without the device)."""
    token = _LOWERING.set(chip)
    try:
        yield
    finally:
        _LOWERING.reset(token)
