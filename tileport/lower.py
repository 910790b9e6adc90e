"""``tileport lower OP --target cuda|ascend|ascend-a2|ascend-a3``: write the device source of OP's kernels
without the device, and build what this machine's toolchain can (a cubin with nvcc; Ascend binaries need CANN).
``cuda`` and ``ascend`` (Ascend 950, arch35) lower the TileLang kernels; ``ascend-a2`` and ``ascend-a3`` (arch32)
lower the Triton kernels through triton-ascend (TTIR and Linalg IR; the NPU binary with CANN)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

from .backends.registry import REGISTRY
from .backends.tilelang.targets import CUBE_BUDGET, ON_CHIP_BUDGET, ON_CHIP_NAME
from .backends.triton import ascend, lowering
from .ops.catalog import get

TARGETS = ("cuda", "ascend", "ascend-a2", "ascend-a3")
TRITON_TARGETS = ("ascend-a2", "ascend-a3")
EXT = {"cuda": ".cu", "ascend": ".cpp"}


@dataclass
class Lowered:
    target: str
    sources: list[str] = field(default_factory=list)
    binaries: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    on_chip: dict[str, int] = field(default_factory=dict)  # kernel -> bytes of UB / shared memory it addresses
    cube: dict[str, dict[str, int]] = field(default_factory=dict)  # kernel -> {L1, L0C: bytes} (Ascend products)


class KernelTodo(ValueError):
    """The operator's kernels for the target are still a TODO (a scaffolded operator): the message is the TODO."""


class OverBudget(ValueError):
    """A lowered kernel addresses more on-chip memory than its target has."""


def _check_budget(target: str, name: str, used: int) -> None:

    budget = ON_CHIP_BUDGET[target]
    if used > budget:
        raise OverBudget(
            f"{name} addresses {used / 1024:.1f} KB of {target}'s {budget // 1024} KB {ON_CHIP_NAME[target]}: "
            "narrow its tiles or its rows per block"
        )
    for memory, size in getattr(used, "cube", {}).items():  # an Ascend kernel's cube side: L1, L0C
        cap = CUBE_BUDGET[target][memory]
        if size > cap:
            raise OverBudget(
                f"{name} addresses {size / 1024:.1f} KB of {target}'s {cap // 1024} KB {memory}: narrow its tiles"
            )


def _nvcc(src: Path, arch: str) -> tuple[Path | None, str]:
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        return None, "nvcc not found: stopped at CUDA source"
    # tilelang: seconds to import, kept out of start-up
    import tilelang

    root = Path(tilelang.__file__).parent
    sm = arch.removeprefix("sm_")
    out = src.with_suffix(".cubin")
    cmd = [
        nvcc,
        "-std=c++20",
        f"-gencode=arch=compute_{sm},code=sm_{sm}",
        "-cubin",
        "-w",
        f"-I{root / 'src'}",
        f"-I{root / '3rdparty' / 'cutlass' / 'include'}",
        "-o",
        str(out),
        str(src),
    ]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError(f"nvcc failed on {src.name}:\n{p.stderr[-2000:]}")
    return out, f"{src.name} -> {out.name} with {Path(nvcc).name} (sm_{sm})"


def lower(op: str, target: str, dtype: torch.dtype, dim: int, out: Path, arch: str = "sm_90", **options) -> Lowered:
    """Lower OP's forward and backward for ``target`` at row length ``dim``; write sources (and binaries)."""
    if target not in TARGETS:
        raise ValueError(f"target must be one of {', '.join(TARGETS)}, got {target!r}")
    if dim < 1:
        raise ValueError(f"--dim must be a positive row length, got {dim}")
    if target in TRITON_TARGETS:
        return _lower_triton(op, target, dtype, dim, out)
    backend = REGISTRY.load("tilelang")
    avail = REGISTRY.availability("tilelang")
    if backend is None or not avail.ok:
        raise ValueError(f"lowering needs the tilelang backend: {avail.reason}")
    out.mkdir(parents=True, exist_ok=True)
    result = Lowered(target)
    tag = str(dtype).removeprefix("torch.")
    try:
        kernels = backend.device_kernels(op, target, dtype, dim, arch=arch, **options)
    except NotImplementedError as exc:
        raise KernelTodo(str(exc)) from None
    for name, (source, used) in kernels.items():
        _check_budget(target, name, used)
        result.on_chip[name] = int(used)
        if getattr(used, "cube", None):
            result.cube[name] = dict(used.cube)
        path = out / f"{name}_{tag}_D{dim}{EXT[target]}"
        path.write_text(source)
        result.sources.append(str(path))
        if target == "cuda":
            binary, note = _nvcc(path, arch)
            if binary:
                result.binaries.append(str(binary))
            result.notes.append(note)
    if target == "ascend":
        if shutil.which("bisheng") or os.environ.get("BISHENG_HOME"):
            result.notes.append("bisheng found: compile with tilelang.compile(..., target='ascend') on the NPU host")
        else:
            result.notes.append("bisheng (CANN) not found: stopped at Ascend C source")
    (out / "lower.json").write_text(
        json.dumps(asdict(result) | {"op": op, "dtype": tag, "dim": dim, "options": options}, indent=1)
    )
    return result


def _lower_triton(op: str, target: str, dtype: torch.dtype, dim: int, out: Path) -> Lowered:
    """The Triton kernels of op through triton-ascend for an A2/A3 chip: each kernel's TTIR and Linalg IR, and a
    manifest naming the source kernel, the chip, the block sizes, the grid and the triton-ascend version."""

    result = Lowered(target)
    tag = str(dtype).removeprefix("torch.")
    try:
        done = lowering.lower(get(op), target, dtype, dim)
    except lowering.LoweringError as exc:
        raise RuntimeError(str(exc)) from None
    out.mkdir(parents=True, exist_ok=True)
    kernels = []
    for k in done:
        blocks = "_".join(f"{n}{v}" for n, v in k.launch.constants.items() if n.startswith("BLOCK"))
        stem = f"{k.launch.name.strip('_')}_{tag}_D{dim}_{blocks}"
        for stage, text in k.files.items():
            path = out / f"{stem}.{stage}"
            path.write_text(text)
            result.sources.append(str(path))
        if k.npubin:
            path = out / f"{stem}.npubin"
            path.write_bytes(k.npubin)
            result.binaries.append(str(path))
        kernels.append(
            {
                "kernel": f"{k.launch.module}.{k.launch.name}",
                "files": [f"{stem}.{s}" for s in k.files],
                "constants": k.launch.constants,
                "signature": k.launch.signature,
                "grid": list(k.launch.grid),
                "binary": k.binary,
            }
        )
        result.notes.append(f"{k.launch.module}.{k.launch.name} ({blocks}, grid {k.launch.grid[0]}): {k.binary}")
    chip = ascend.CHIPS[target]
    manifest = {
        "op": op,
        "target": target,
        "chip": chip.name,
        "arch": chip.arch,
        "vector_cores": chip.vector_cores,
        "ub_bytes": chip.ub_bytes,
        "dtype": tag,
        "dim": dim,
        "triton_ascend": ascend.triton_ascend_version(),
        "kernels": kernels,
    }
    (out / "lower.json").write_text(json.dumps(manifest, indent=1, default=str))
    result.notes.append(
        f"triton-ascend {ascend.triton_ascend_version()}, {chip.name}: {len(done)} kernels lowered to TTIR and "
        "Linalg "
        "IR"
    )
    return result
