"""What a built CPU kernel's hot loops really execute, read from its disassembly (``objdump``).

A speed regression on one CPU shows here before any timing: the arithmetic of every innermost loop of a
kernel should be packed (``...ps`` on ymm/zmm registers on x86), never scalar (``...ss``). Used by the
packed-SIMD tests and by ``tileport doctor``.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import dataclass, field

_LINE = re.compile(r"^\s*([0-9a-f]+):\s+(\S+)\s*(.*)$")
_JUMP = re.compile(r"^j[a-z]+$")
_TARGET = re.compile(r"^([0-9a-f]+)\b")
# x86 floating-point arithmetic (SSE/AVX encodings): add, sub, mul, div, min, max, sqrt, fused multiply-adds,
# AVX-512's scalef (x * 2^n: tp_exp's scaling)
_FP_ARITH = re.compile(r"^v?(?:add|sub|mul|div|min|max|sqrt|scalef|f(?:n?m(?:add|sub))(?:132|213|231))(ss|sd|ps|pd)$")


@dataclass
class Loop:
    """An innermost loop: the instructions between a backward jump's target and the jump."""

    start: int
    end: int
    instructions: list[tuple[str, str]] = field(default_factory=list)  # (mnemonic, operands)

    def fp_arith(self) -> list[tuple[str, str]]:
        return [(m, o) for m, o in self.instructions if _FP_ARITH.match(m)]

    def scalar_fp(self) -> list[str]:
        return [m for m, _ in self.fp_arith() if _FP_ARITH.match(m).group(1) in ("ss", "sd")]

    def packed(self, width: str) -> list[str]:
        """Packed fp arithmetic on registers of ``width`` ("xmm", "ymm" or "zmm")."""
        return [m for m, o in self.fp_arith() if _FP_ARITH.match(m).group(1) in ("ps", "pd") and width in o]


def objdump() -> str | None:
    return shutil.which("objdump")


def function(lib_path: str, symbol: str) -> list[tuple[int, str, str]]:
    """(address, mnemonic, operands) of ``symbol`` in a shared library."""
    tool = objdump()
    if tool is None:
        raise RuntimeError("objdump (binutils) is not installed")
    out = subprocess.run(
        [tool, "-d", "--no-show-raw-insn", f"--disassemble={symbol}", lib_path],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    insns = []
    for line in out.splitlines():
        m = _LINE.match(line)
        if m:
            insns.append((int(m.group(1), 16), m.group(2), m.group(3)))
    if not insns:
        raise RuntimeError(f"{symbol} not found in {lib_path}")
    return insns


def calls(insns: list[tuple[int, str, str]]) -> list[str]:
    """The functions a disassembled body calls (``memcpy@plt``, ...), in order."""
    return [o.split("<", 1)[1].rstrip(">") for _, m, o in insns if m.startswith("call") and "<" in o]


def innermost_loops(insns: list[tuple[int, str, str]]) -> list[Loop]:
    """Loops (backward jumps inside the function) that contain no other loop. A backward jump whose range holds
    a return is not a loop: it is out-of-line code g++ placed after the return (a rarely taken branch of a
    row's scalar epilogue) jumping back into the body."""
    rets = [a for a, m, _ in insns if m.startswith("ret")]
    spans = []
    for addr, mnem, ops in insns:
        t = _TARGET.match(ops)
        if _JUMP.match(mnem) and t and int(t.group(1), 16) <= addr:
            start = int(t.group(1), 16)
            if not any(start <= r <= addr for r in rets):
                spans.append((start, addr))
    inner = [s for s in spans if not any(o != s and s[0] <= o[0] and o[1] <= s[1] for o in spans)]
    loops = []
    for start, end in sorted(set(inner)):
        loops.append(Loop(start, end, [(m, o) for a, m, o in insns if start <= a <= end]))
    return loops


def kernel_loops(lib_path: str, kernel_name: str) -> list[Loop]:
    """The innermost loops of a row-wise kernel (``<name>_kernel``, the per-row body TileLang generated)."""
    return innermost_loops(function(lib_path, f"{kernel_name}_kernel"))


def register_of(lanes: int) -> str:
    """The x86 register name of a native vector of ``lanes`` fp32 lanes."""
    return {16: "zmm", 8: "ymm", 4: "xmm"}[lanes]


def unpacked(loops: list[Loop], width: str) -> list[str]:
    """What is not packed in a kernel's innermost loops on ``width`` registers (empty when all is well).

    A column loop left scalar is all ``...ss``; a row loop may hold the few scalar adds of the final lane tree,
    so a loop fails when its scalar arithmetic outnumbers its packed arithmetic. The kernel also needs a packed
    FMA (its row sums) and a packed multiply (its scales; a ``vscalefps`` is one) somewhere.
    """
    arith = [lp for lp in loops if lp.fp_arith()]
    problems = [
        f"loop at {lp.start:#x} is scalar: {' '.join(m for m, _ in lp.fp_arith())}"
        for lp in arith
        if len(lp.scalar_fp()) > len(lp.packed(width))
    ]
    packed = [m for lp in arith for m in lp.packed(width)]
    if not any("fmadd" in m or "fnmadd" in m for m in packed):
        problems.append(f"no packed FMA on {width} registers in any loop")
    if not any(m.startswith(("vmulp", "vscalefp")) for m in packed):
        problems.append(f"no packed multiply on {width} registers in any loop")
    return problems
