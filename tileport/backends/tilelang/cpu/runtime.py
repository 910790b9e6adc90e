"""The TileLang CPU runtime shared by every row-wise operator: build, cache and launch.

What each op's kernel module gets from here, written once:
- compile flags and a disk cache per CPU model and target ISA (``settings.py``);
- the prelude: ``threads.h`` (the parallel loop and its backoff), ``simd.h`` (the packed 16-lane vector type and the
dtype
  bridges) and the driver derived from the kernel's own declaration (``interface.py``);
- a process-wide kernel cache keyed by the build arguments (dtypes and options, never M or D: both are
  runtime values), with counters for ``kernel_cache_info()``;
- ``threads_for``: how many threads a call gets.
"""

# No `from __future__ import annotations` here or in kernel modules: it breaks T.prim_func annotations.
import contextlib
import inspect
import logging
from collections.abc import Callable
from pathlib import Path

import tilelang
import torch
from tilelang import tvm
from tilelang.env import env as _tl_env

from ..cache import KernelCache
from . import settings
from .interface import Interface, launcher, pass_configs

GRAIN = 1 << 15  # elements per thread below which a second thread costs more than it saves
MAX_ROWS = 2**31 - 1  # the generated kernel counts rows and columns in int32

# the prelude of every kernel: the parallel loop, then the vector type and the helpers that use it
HEADER = "".join((Path(__file__).with_name(name)).read_text() for name in ("threads.h", "simd.h"))

logging.getLogger("tilelang").setLevel(logging.WARNING)  # one INFO line per compile otherwise


def _wrapper_passes_symbolic_strides() -> None:
    """TileLang's C wrapper (the ``call`` function it adds to a kernel's source) passes the symbolic sizes of
    the buffers but not their symbolic strides, so a kernel declaring ``T.StridedTensor``s (a grid kernel,
    ``interface.py``) failed to build: too few arguments to ``<name>_kernel``. The strides are added after the
    sizes; a kernel without symbolic strides gets the same wrapper as before."""
    # tilelang: seconds to import, kept out of start-up
    from tilelang.jit.adapter.wrapper import TLCPUSourceWrapper

    sizes = TLCPUSourceWrapper.get_dynamic_symbolic_set
    if getattr(sizes, "with_strides", False):
        return

    def get_dynamic_symbolic_set(self, prim_func):
        out = list(sizes(self, prim_func))
        for p in prim_func.params:
            buf = prim_func.buffer_map.get(p)
            for s in buf.strides if buf is not None else ():
                if isinstance(s, tvm.tirx.Var) and s.name not in {n for n, _ in out}:
                    out.append((s.name, str(s.dtype)))
        return out

    get_dynamic_symbolic_set.with_strides = True
    TLCPUSourceWrapper.get_dynamic_symbolic_set = get_dynamic_symbolic_set


_wrapper_passes_symbolic_strides()


def with_prelude(func, text: str, after: str = ""):
    """``func`` with ``text`` as its C prelude (what ``T.Kernel(..., prelude=)`` sets, set after parsing so
    the driver can be derived from the parsed function); a prelude the kernel sets itself (helpers of its
    family, using ``text``'s) is kept between ``text`` and ``after``."""

    def visit(stmt):
        if isinstance(stmt, tvm.tirx.SBlock) and stmt.name_hint == "tilelang_root":
            notes = dict(stmt.annotations)
            notes["pragma_import_c"] = text + str(notes.get("pragma_import_c", "")) + after
            return tvm.tirx.SBlock(
                stmt.iter_vars,
                stmt.reads,
                stmt.writes,
                stmt.name_hint,
                stmt.body,
                stmt.init,
                stmt.alloc_buffers,
                stmt.match_buffers,
                notes,
            )
        return None

    body = tvm.tirx.stmt_functor.ir_transform(func.body, None, visit, ["tirx.SBlock"])
    return func.with_body(body)


def threads_for(elements: int) -> int:
    """Threads for a call: torch's setting, capped so each thread gets at least GRAIN elements."""
    if elements < 2 * GRAIN:  # the common small call, without asking torch
        return 1
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


def compile_kernel(func):
    """Build a prim_func for the C target with its derived driver; a launcher by argument name."""
    configs = pass_configs(func)  # a grid kernel's (interface.py); none for row-wise kernels
    with tvm.transform.PassContext(config=configs) if configs else contextlib.nullcontext():
        iface = Interface.of(func, tilelang.lower(func, target="c").kernel_source)
    with _tilelang_cache_at(cache_dir()):
        jit = tilelang.compile(
            with_prelude(func, HEADER, iface.driver()),
            target="c",
            execution_backend="cython",
            compile_flags=list(settings.compile_flags()),
            pass_configs=configs or None,
        )
    return launcher(jit.adapter.lib, iface, jit.get_kernel_source())


def _key_part(value) -> str:
    return str(value).removeprefix("torch.")


class CpuKernelCache(KernelCache):
    """Kernels built for the C target into the per-CPU disk cache, launched through ctypes."""

    def __init__(self, backend: str):
        super().__init__(backend)
        self._by_call: dict = {}

    def compile(self, op: str, key: tuple, build: Callable[[], object]):
        try:
            return compile_kernel(build())
        except Exception as exc:
            raise RuntimeError(f"tileport: building the TileLang CPU kernel {op}{key} failed: {exc}") from exc

    def kernel(self, op: str, builder: Callable, *args):
        """The compiled ``builder(*args)``, keyed by op, the named build arguments and the target ISA.

        The per-call lookup is by the call's own arguments (no sorting, formatting or environment read: each
        costs a microsecond, a tenth of a one-row call); ``$TILEPORT_CPU_ARCH`` is read when a kernel is first
        built in a process.
        """
        launch = self._by_call.get((op, builder, args))
        if launch is not None:
            self._stats[op].hits += 1
            return launch
        march = settings.march()
        named = inspect.signature(builder).bind(*args).arguments
        key = tuple(f"{k}={_key_part(v)}" for k, v in sorted(named.items()) if v is not None and v is not False)
        if march != "native":
            key += (f"march={march}",)
        launch = self._by_call[(op, builder, args)] = self.get(op, key, lambda: builder(*args))
        return launch


CACHE = CpuKernelCache("tilelang")


def check_shape(m: int, d: int) -> None:
    if m > MAX_ROWS or d > MAX_ROWS:
        raise ValueError(f"tilelang CPU kernels take at most {MAX_ROWS} rows and columns, got ({m}, {d})")
