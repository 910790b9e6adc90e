"""Build settings of the TileLang CPU kernels, importable without TileLang (the doctor and bench read them).

The target ISA is ``-march=native`` unless ``TILEPORT_CPU_ARCH`` names another (``x86-64-v3`` builds the AVX2
code on an AVX-512 machine, as the packed-SIMD tests do). What the build really depends on is read from the
compiler (its predefined ISA macros, which select the paths of ``simd.h``), and that goes into the disk-cache
folder: two CPUs, or two flag sets, never share a binary.
"""

from __future__ import annotations

import functools
import hashlib
import os
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

from ... import platform

# TileLang builds the generated C++ with no -O flag (g++ -O0: 14-58x slower). -ffp-contract=fast makes the
# a + b * c of every kernel one FMA whatever the language mode; -fno-trapping-math lets g++ vectorize
# selects; -fopenmp for the row driver; -Wno-psabi: without AVX-512 g++ notes that the 64-byte vectors of the fp64
# helpers (simd.h's tp_nd) pass by another ABI, on every build (the helpers are inline: no ABI is crossed).
BASE_FLAGS = ("-O3", "-ffp-contract=fast", "-fno-trapping-math", "-fopenmp", "-Wno-psabi")
ARCH_ENV = "TILEPORT_CPU_ARCH"

# The macros simd.h and the kernels branch on: the ISA a build is specialized for.
_ISA_MACROS = re.compile(r"#define (__(?:AVX\w*|SSE\w*|FMA|F16C|ARM_NEON|ARM_FEATURE_\w+|aarch64|x86_64)__) ")


def march(environ=os.environ) -> str:
    """The target: ``native``, or ``$TILEPORT_CPU_ARCH`` (an -march value, optionally followed by -m flags,
    e.g. ``znver3 -mavx512f -mavx512bw -mavx512vl``: what g++ 12 makes of a Zen 4 with -march=native)."""
    return (environ.get(ARCH_ENV) or "native").strip()


def arch_flags(environ=os.environ) -> tuple[str, ...]:
    first, *extra = march(environ).split()
    return (f"-march={first}", *extra)


def compile_flags(environ=os.environ) -> tuple[str, ...]:
    return (*BASE_FLAGS[:1], *arch_flags(environ), *BASE_FLAGS[1:])


COMPILE_FLAGS = compile_flags()


@dataclass(frozen=True)
class Isa:
    """The instruction set a kernel build targets, as the compiler defines it."""

    macros: tuple[str, ...]
    compiler: str

    @property
    def lanes(self) -> int:
        """fp32 lanes of one native register in ``simd.h``."""
        if "__AVX512F__" in self.macros:
            return 16
        return 8 if "__AVX__" in self.macros else 4

    def summary(self) -> str:
        """A short name: the widest vector ISA and the conversion extensions the bridges use."""
        m = set(self.macros)
        base = (
            "AVX-512"
            if "__AVX512F__" in m
            else "AVX2"
            if "__AVX2__" in m
            else "AVX"
            if "__AVX__" in m
            else ("NEON" if "__ARM_NEON__" in m or "__aarch64__" in m else "SSE2" if "__SSE2__" in m else "scalar")
        )
        extras = [
            name
            for macro, name in (("__FMA__", "FMA"), ("__F16C__", "F16C"), ("__AVX512BF16__", "AVX512-BF16"))
            if macro in m
        ]
        return f"{base} ({self.lanes} fp32 lanes)" + (", " + ", ".join(extras) if extras else "")

    def digest(self) -> str:
        return hashlib.sha1((" ".join(self.macros) + "|" + self.compiler).encode()).hexdigest()[:10]


@functools.lru_cache(maxsize=8)
def _isa(cxx: str, arch: tuple[str, ...]) -> Isa:
    try:
        out = subprocess.run(
            [cxx, *arch, "-dM", "-E", "-x", "c++", os.devnull], capture_output=True, text=True, timeout=60
        )
        version = subprocess.run([cxx, "-dumpfullversion"], capture_output=True, text=True, timeout=60).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return Isa((), "unknown")
    return Isa(
        tuple(sorted(set(_ISA_MACROS.findall(out.stdout)))), f"{os.path.basename(cxx)}-{version} {' '.join(arch)}"
    )


def isa(environ=os.environ) -> Isa:
    """The ISA of kernels built with the current flags (``-march=native``: this CPU's)."""
    return _isa(environ.get("CXX", "g++"), arch_flags(environ))


def cache_root(environ=os.environ) -> Path:
    """``$TILEPORT_CACHE_DIR``, default ``~/.cache/tileport``: tileport's disk caches."""
    return Path(environ.get("TILEPORT_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "tileport"))


def cache_dir(tilelang_version: str, environ=os.environ) -> Path:
    """The compiled CPU kernels' cache, per TileLang version, CPU model and target ISA: TileLang's own cache key
    holds the flag text ``-march=native``, not what it means on this CPU."""
    return cache_root(environ) / f"tilelang-{tilelang_version}" / f"{platform.cpu_tag()}-isa-{isa(environ).digest()}"
