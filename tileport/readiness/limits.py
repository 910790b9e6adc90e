"""The limits triton-ascend does not check without CANN, checked on a captured launch and its Linalg IR: the
grid against 65535 programs and the vector cores, the tiles against the unified buffer, the tail alignment of
the blocks. Each finding names a cause of ``causes.py``."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from ..backends.triton.ascend import Chip

MAX_PROGRAMS = 65535  # programs a launch may have on A2/A3
ALIGN = 32  # bytes: a vector load's alignment
_BYTES = {
    "f64": 8,
    "f32": 4,
    "f16": 2,
    "bf16": 2,
    "i64": 8,
    "i32": 4,
    "i16": 2,
    "i8": 1,
    "i1": 1,
    "f8E4M3FN": 1,
    "f8E5M2": 1,
}
# a tile: the static shape a buffer is allocated (memref.alloc) or a value made (tensor.empty) at
_TILE = re.compile(r"(?:memref\.alloc\(\)|tensor\.empty\(\))\s*:\s*(?:memref|tensor)<((?:\d+x)+)(\w+)>")


@dataclass(frozen=True)
class Tile:
    shape: tuple[int, ...]
    dtype: str

    @property
    def bytes(self) -> int:
        return math.prod(self.shape) * _BYTES.get(self.dtype, 4)

    def __str__(self) -> str:
        return "x".join(map(str, self.shape)) + f" {self.dtype}"


def tiles(linalg: str) -> list[Tile]:
    """The distinct tiles the kernel allocates (each shape and dtype once: at least one buffer each)."""
    found = {Tile(tuple(int(d) for d in m.group(1).rstrip("x").split("x")), m.group(2)) for m in _TILE.finditer(linalg)}
    return sorted(found, key=lambda t: -t.bytes)


@dataclass
class Limits:
    programs: int
    cores: int
    ub_bytes: int  # the tiles' bytes, each distinct tile once
    ub_budget: int
    largest: Tile | None
    tail_bytes: int | None  # the largest tile's last dimension in bytes
    unaligned_rows: dict[str, int]  # a 2-D+ tensor argument whose rows (last dimension) are not 32-byte multiples

    def findings(self) -> list[str]:
        """The keys of the causes these figures meet (``causes.BY_KEY``)."""
        out = []
        if self.programs > MAX_PROGRAMS:
            out.append("grid")
        elif self.programs > self.cores:
            out.append("cores")
        if self.ub_bytes > self.ub_budget:
            out.append("ub")
        elif self.ub_bytes > self.ub_budget // 2:
            out.append("double-buffer")
        if (self.tail_bytes is not None and self.tail_bytes % ALIGN) or self.unaligned_rows:
            out.append("tail")
        return out


_ARG_BYTES = {
    "fp64": 8,
    "fp32": 4,
    "fp16": 2,
    "bf16": 2,
    "i64": 8,
    "i32": 4,
    "i16": 2,
    "u16": 2,
    "i8": 1,
    "u8": 1,
    "i1": 1,
}


def measure(
    programs: int,
    linalg: str,
    chip: Chip,
    shapes: dict[str, tuple],
    signature: dict[str, str],
) -> Limits:
    """The figures of one launch: its programs, its Linalg IR's tiles, its tensors' row bytes."""
    found = tiles(linalg)
    largest = found[0] if found else None
    tail = largest.shape[-1] * _BYTES.get(largest.dtype, 4) if largest and largest.shape[-1] > 1 else None
    rows = {}
    for name, shape in shapes.items():
        size = _ARG_BYTES.get(signature.get(name, "").lstrip("*"))
        if size and len(shape) >= 2 and shape[-1] > 1 and (shape[-1] * size) % ALIGN:
            rows[name] = shape[-1] * size
    return Limits(
        programs,
        chip.vector_cores,
        sum(t.bytes for t in found),
        chip.ub_bytes,
        largest,
        tail,
        rows,
    )
