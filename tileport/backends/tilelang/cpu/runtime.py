"""The TileLang CPU runtime shared by every row-wise operator.

What each op's kernel module gets from here, written once:
- compile flags and a disk cache per CPU model (``settings.py``)
  (kernels built with -march=native are only valid on the CPU that built them);
- dtype bridges: fp16/bf16 tensors are uint16 storage in the kernel, converted 8 lanes at a time by the
  C helpers in ``bridges.h`` (the C codegen cannot print bf16, and rejects vectorized half casts);
- an OpenMP driver, generated per kernel, that splits the rows among threads (the row count M is a
  dynamic symbol, so the kernel can be called on any row range) and handles row-strided inputs;
- a ctypes launcher (1-2 us per call, releases the GIL) in place of TileLang's 30-60 us Cython wrapper;
- a process-wide kernel cache keyed by (op, D, dtypes), with counters for ``kernel_cache_info()``.
"""

# No `from __future__ import annotations` here or in kernel modules: it breaks T.prim_func annotations.
import contextlib
import ctypes
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import tilelang
import tilelang.cpu.language as T
import torch
from tilelang.env import env as _tl_env

from ..cache import KernelCache
from . import settings
from .settings import COMPILE_FLAGS

LANES = 8  # fp32 lanes of one AVX2 register; bridges convert this many elements per call
GRAIN = 1 << 15  # elements per thread below which a second thread costs more than it saves
MAX_ROWS = 2**31 - 1  # the generated kernel counts rows in int32

_PRELUDE = (Path(__file__).with_name("bridges.h")).read_text()

logging.getLogger("tilelang").setLevel(logging.WARNING)  # one INFO line per compile otherwise


@dataclass(frozen=True)
class Storage:
    """How a torch dtype is held inside a kernel."""

    tl: str  # TileLang storage dtype
    ctype: str  # C type of a pointer to it
    tag: str  # suffix of the bridge helpers in bridges.h


STORAGE = {
    torch.float32: Storage("float32", "float", "f32"),
    torch.float16: Storage("uint16", "uint16_t", "f16"),
    torch.bfloat16: Storage("uint16", "uint16_t", "bf16"),
}
DTYPES = frozenset(STORAGE)


def storage_view(t: torch.Tensor) -> torch.Tensor:
    """The tensor as its kernel storage dtype (fp16/bf16 reinterpreted as uint16, no copy)."""
    return t.view(torch.uint16) if t.dtype in (torch.float16, torch.bfloat16) else t


class Bridge:
    """Loads and stores between a storage dtype and fp32 locals, usable inside ``T.prim_func`` bodies."""

    def __init__(self, dtype: torch.dtype, streaming: bool = False):
        s = STORAGE[dtype]
        self.dtype = dtype
        self.tl = s.tl
        tag = s.tag

        @T.macro
        def load8(buf, r, c, dst):
            T.call_extern("handle", f"tp_load8_{tag}", T.address_of(buf[r, c]), T.address_of(dst[0]))

        @T.macro
        def store8(src, buf, r, c):
            T.call_extern("handle", f"tp_store8_{tag}{'_nt' if streaming else ''}", T.address_of(src[0]), T.address_of(buf[r, c]))

        if tag == "f32":
            self.load1 = lambda buf, r, c: buf[r, c]
            self.store1_value = lambda v: v
        else:
            self.load1 = lambda buf, r, c: T.call_extern("float32", f"tp_load1_{tag}", buf[r, c])
            self.store1_value = lambda v: T.call_extern("uint16", f"tp_store1_{tag}", v)
        self.load8 = load8
        self.store8 = store8


@dataclass(frozen=True)
class Param:
    name: str
    ctype: str


@dataclass(frozen=True)
class RowKernelSpec:
    """The C interface of a row-wise kernel: (M, D) matrices, per-row vectors and scalars.

    ``prototype()`` reproduces the declaration TileLang 0.1.15's C codegen prints for ``<name>_kernel``
    (buffers sorted by name, then the row count M, then scalars sorted by name); the prelude declares it
    first so the driver can call the kernel, and a mismatch fails the build instead of misbehaving.
    """

    name: str
    D: int
    matrices: tuple[Param, ...]  # (M, D) buffers, row stride passed to the driver
    vectors: tuple[Param, ...] = ()  # (M,) buffers
    scalars: tuple[Param, ...] = ()

    def prototype(self) -> str:
        bufs = sorted(self.matrices + self.vectors, key=lambda p: p.name)
        args = [f"{p.ctype}* {p.name}" for p in bufs] + ["int32_t M"]
        args += [f"{p.ctype} {p.name}" for p in sorted(self.scalars, key=lambda p: p.name)]
        return f"int32_t {self.name}_kernel({', '.join(args)})"

    def driver_params(self) -> list[tuple[str, str]]:
        """(C declaration, ctypes type name) of the driver's parameters, in call order."""
        out = []
        for p in self.matrices:
            out += [(f"{p.ctype}* {p.name}", "p"), (f"int64_t ld_{p.name}", "i64")]
        out += [(f"{p.ctype}* {p.name}", "p") for p in self.vectors]
        out += [("int64_t M", "i64")]
        out += [(f"{p.ctype} {p.name}", "f32" if p.ctype == "float" else "i64") for p in self.scalars]
        out += [("int32_t nthreads", "i32")]
        return out

    def prelude(self) -> str:
        """Bridges, the kernel's declaration and the OpenMP driver over row ranges."""
        bufs = sorted(self.matrices + self.vectors, key=lambda p: p.name)
        mats = {p.name for p in self.matrices}

        def call(row: str, rows: str) -> str:
            ptrs = [f"{p.name} + {row} * ld_{p.name}" if p.name in mats else f"{p.name} + {row}" for p in bufs]
            scal = [p.name for p in sorted(self.scalars, key=lambda p: p.name)]
            return f"{self.name}_kernel({', '.join(ptrs + [rows] + scal)});"

        contiguous = " && ".join(f"ld_{p.name} == {self.D}" for p in self.matrices) or "1"
        params = ", ".join(decl for decl, _ in self.driver_params())
        return f"""{_PRELUDE}
extern "C" {self.prototype()};
// Rows are split evenly among threads; strided rows (ld != D) are handed to the kernel one at a time.
extern "C" int32_t {self.name}_drive({params}) {{
  const bool contiguous = {contiguous};
  #pragma omp parallel num_threads(nthreads) if (nthreads > 1)
  {{
    const int64_t t = omp_get_thread_num(), n = omp_get_num_threads();
    const int64_t lo = M * t / n, hi = M * (t + 1) / n;
    if (contiguous) {{
      if (hi > lo) {call("lo", "(int32_t)(hi - lo)")}
    }} else {{
      for (int64_t r = lo; r < hi; ++r) {call("r", "1")}
    }}
  }}
  tp_store_fence();  // streamed stores, where a kernel uses them, are ordered before the return
  return 0;
}}
"""


_CTYPES = {"p": ctypes.c_void_p, "i64": ctypes.c_int64, "i32": ctypes.c_int32, "f32": ctypes.c_float}


class Launcher:
    """Calls a compiled kernel's OpenMP driver through ctypes."""

    def __init__(self, jit_kernel, spec: RowKernelSpec):
        self.jit_kernel = jit_kernel  # keeps the shared library loaded
        self.spec = spec
        fn = getattr(jit_kernel.adapter.lib, f"{spec.name}_drive")
        fn.argtypes = [_CTYPES[t] for _, t in spec.driver_params()]
        fn.restype = ctypes.c_int32
        self._fn = fn

    def __call__(self, *args) -> None:
        self._fn(*args)

    def source(self) -> str:
        return self.jit_kernel.get_kernel_source()


def threads_for(elements: int) -> int:
    """Threads for a call: torch's setting, capped so each thread gets at least GRAIN elements."""
    return max(1, min(torch.get_num_threads(), elements // GRAIN))


def cache_dir() -> Path:
    """Disk cache of compiled kernels (see ``settings.cache_dir``)."""
    return settings.cache_dir(tilelang.__version__)


@contextlib.contextmanager
def _tilelang_cache_at(path: Path):
    """Point TileLang's disk cache at ``path`` for one compile (its runtime override), then restore."""
    path.mkdir(parents=True, exist_ok=True)
    descriptor = type(_tl_env).__dict__["TILELANG_CACHE_DIR"]
    previous = descriptor._forced_value
    _tl_env.TILELANG_CACHE_DIR = str(path)
    try:
        yield
    finally:
        descriptor._forced_value = previous


class CpuKernelCache(KernelCache):
    """Kernels built for the C target into the per-CPU disk cache, launched through ctypes."""

    def compile(self, op: str, key: tuple, build: Callable[[], tuple[object, RowKernelSpec]]) -> Launcher:
        func, spec = build()
        try:
            with _tilelang_cache_at(cache_dir()):
                jit = tilelang.compile(func, target="c", execution_backend="cython", compile_flags=list(COMPILE_FLAGS))
        except Exception as exc:
            raise RuntimeError(f"tileport: building the TileLang CPU kernel {op}{key} failed: {exc}") from exc
        return Launcher(jit, spec)


CACHE = CpuKernelCache("tilelang")


def check_rows(m: int) -> None:
    if m > MAX_ROWS:
        raise ValueError(f"tilelang CPU kernels take at most {MAX_ROWS} rows, got {m}")


def lanes(n: int):
    """A loop over n fp32 lanes of a local buffer, for g++ to vectorize.

    Deliberately a plain serial loop: ``T.vectorized`` prints TileLang's 128-bit ``vec_type`` structs, which
    g++ -O3 breaks into scalars (the hot loop of the first l2norm kernel was all ``vfmadd231ss``); a plain loop
    over fp32 locals becomes full-width ``vfmadd231ps`` with the accumulators held in registers.
    """
    return T.serial(n)


ACC = 4 * LANES  # independent fp32 accumulator lanes of a row sum: four 8-lane chains hide FMA latency
BLOCK = 16  # ACC-wide steps per inner block of a row sum (512 elements)


def blocked_row_sum(D: int, step8, term1):
    """A macro summing D per-element terms of a row in fp32: 32 lanes, blocked in three levels.

    A single running sum per lane over a long row (D / 8 additions per lane) loses to torch's cascade sum
    by 10-18x in max relative error at D = 65536, and two levels still lose by about 1.4x on the backward's
    cancelling sum there. Here each block of BLOCK steps (BLOCK * 32 elements) is summed into a fresh
    32-lane accumulator, BLOCK block totals into a second, and those into a third, so no lane's chain exceeds
    2 * BLOCK + D / (32 * BLOCK^2) additions (as torch's cascade does with levels of 16), at no extra memory
    traffic; the 32 lanes are then added as a tree. ``acc`` holds the three levels: [0:32) the block,
    [32:64) the group of blocks, [64:96) the row.
    ``step8(a, b, row, col, acc, k, va, vb, out)`` adds the 8 terms at ``col`` into ``acc[k:k+8]``
    (``va``/``vb`` are 8-lane scratch; ``out`` is the result buffer, whose other slots may hold per-row
    constants such as rstd); ``term1(a, b, row, col, out)`` is one tail term.
    """
    nacc, rest = divmod(D, ACC)
    n8, tail = divmod(rest, LANES)
    nb, rem = divmod(nacc, BLOCK)
    ngroups, nb_rem = divmod(nb, BLOCK)
    MID, TOP = ACC, 2 * ACC

    @T.macro
    def block(a, b, row, va, vb, acc, out, first_step, steps):
        for i in lanes(ACC):
            acc[i] = 0.0
        for j in T.serial(steps):
            for u in T.unroll(ACC // LANES):
                step8(a, b, row, (first_step + j) * ACC + u * LANES, acc, u * LANES, va, vb, out)

    @T.macro
    def row_sum(a, b, row, va, vb, acc, out):
        for i in lanes(ACC):
            acc[TOP + i] = 0.0
        for g in T.serial(ngroups):
            for i in lanes(ACC):
                acc[MID + i] = 0.0
            for blk in T.serial(BLOCK):
                block(a, b, row, va, vb, acc, out, (g * BLOCK + blk) * BLOCK, BLOCK)
                for i in lanes(ACC):
                    acc[MID + i] += acc[i]
            for i in lanes(ACC):
                acc[TOP + i] += acc[MID + i]
        for i in lanes(ACC):
            acc[MID + i] = 0.0
        for blk in T.serial(nb_rem):
            block(a, b, row, va, vb, acc, out, (ngroups * BLOCK + blk) * BLOCK, BLOCK)
            for i in lanes(ACC):
                acc[MID + i] += acc[i]
        block(a, b, row, va, vb, acc, out, nb * BLOCK, rem)
        for u in T.serial(n8):
            step8(a, b, row, nacc * ACC + u * LANES, acc, u * LANES, va, vb, out)
        for i in lanes(ACC):
            acc[TOP + i] += acc[MID + i] + acc[i]
        for t in T.serial(tail):  # the last D % 8 terms join lanes of their own before the tree, not after it
            acc[TOP + t] += term1(a, b, row, nacc * ACC + n8 * LANES + t, out)
        # 32 -> 1 lanes, pairwise (ACC is fixed at 32: five halvings)
        for i in lanes(16):
            acc[TOP + i] = acc[TOP + i] + acc[TOP + i + 16]
        for i in lanes(8):
            acc[TOP + i] = acc[TOP + i] + acc[TOP + i + 8]
        for i in lanes(4):
            acc[TOP + i] = acc[TOP + i] + acc[TOP + i + 4]
        for i in T.serial(2):
            acc[TOP + i] = acc[TOP + i] + acc[TOP + i + 2]
        out[0] = acc[TOP] + acc[TOP + 1]

    return row_sum
