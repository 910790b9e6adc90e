"""The TileLang backend: CPU kernels that run here (C target); device targets lower to source.

Importing this package does not import TileLang; ``available()`` does, once, and says why it failed.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import os
import shutil

import torch

from .. import platform
from ..registry import REGISTRY, Availability, declared_support, kernel_modules
from . import lowered
from .cpu import settings
from .targets import RUNNERS, cuda_target

_CPU_DTYPES = frozenset({torch.float32, torch.float16, torch.bfloat16})
_HERE = os.path.dirname(__file__)


@functools.lru_cache(maxsize=1)
def _probe() -> Availability:
    cxx = os.environ.get("CXX", "g++")
    if shutil.which(cxx) is None:
        return Availability(False, f"no C++ compiler: {cxx!r} not on PATH (TileLang's C target builds with it)")
    try:
        # tilelang: seconds to import, kept out of start-up
        import tilelang

        from .cpu import runtime  # noqa: F401 - the probe itself: does the CPU runtime (tilelang) import
    except Exception as exc:
        return Availability(False, f"tilelang does not import: {type(exc).__name__}: {exc}")

    return Availability(True, f"tilelang {tilelang.__version__}, C target via {cxx} for {settings.isa().summary()}")


# cpu/ modules that are not ops
_CPU_SUPPORT = (
    "chunked",
    "disasm",
    "foreign",
    "interface",
    "norm_stats",
    "pairs",
    "rowwise",
    "runtime",
    "settings",
    "wy",
)
_TARGET_PACKAGE = {platform.CUDA: "cuda", platform.NPU_ARCH35: "ascend", platform.CPU: "cpu"}


class TileLangBackend:
    name = "tilelang"
    # CPU kernels run here; CUDA and Ascend arch35 kernels lower here and run where the device is
    device_kinds = frozenset({platform.CPU, platform.CUDA, platform.NPU_ARCH35})
    # the op kernel modules of each target package, listed once at import (the folders do not change)
    _ops = {
        kind: kernel_modules(os.path.join(_HERE, pkg, "__init__.py"), _CPU_SUPPORT)
        for kind, pkg in _TARGET_PACKAGE.items()
    }
    dtypes = {op: _CPU_DTYPES for op in _ops[platform.CPU]}

    def available(self) -> Availability:
        return _probe()

    def supports(self, op, device_kind, dtypes):
        why = declared_support(self, op, device_kind, dtypes)
        if why is None and device_kind not in self.targets(op):
            return f"backend 'tilelang' has no {_TARGET_PACKAGE[device_kind]} kernel for {op!r}"
        return why

    def targets(self, op: str) -> dict[str, str]:
        """{device kind: target package} of the targets with a kernel module for op."""
        return {kind: pkg for kind, pkg in _TARGET_PACKAGE.items() if op in self._ops[kind]}

    def kernels(self, op, device_kind=platform.CPU):
        return importlib.import_module(f"{__name__}.{_TARGET_PACKAGE[device_kind]}.{op}")

    def device_sources(
        self, op: str, target: str, dtype: torch.dtype, dim: int, arch: str = "sm_90", only=None, **options
    ):
        """{kernel name: generated source} of op's kernels for a device target, lowered without the device
        (``device_kernels`` with their on-chip bytes)."""
        return {name: k[0] for name, k in self.device_kernels(op, target, dtype, dim, arch, only, **options).items()}

    def device_kernels(
        self, op: str, target: str, dtype: torch.dtype, dim: int, arch: str = "sm_90", only=None, **options
    ):
        """{kernel name: (generated source, on-chip bytes)} of op's kernels for a device target, lowered without
        the device.

        Each target's kernel module gives ``lowered(dtype, dim, **options)``: its prim_funcs for rows of ``dim``
        columns. Options: CUDA ``rsqrt="exact"|"approx"``; Ascend ``nr_steps`` (Newton-Raphson steps after the
        hardware rsqrt, default 1). ``only``: the kernel names to lower (all by default). A kernel is lowered once
        per process for its op, target, dtype, width bucket and options (an Ascend lowering is slow).
        """

        kind = {"cuda": platform.CUDA, "ascend": platform.NPU_ARCH35}[target]
        if op in REGISTRY.plugin:  # an operator outside tileport: the module its package names
            name = REGISTRY.plugin_module(self.name, op, kind)
            if name is None:
                raise ValueError(
                    f"no {target} kernels for {op!r} (its package names: {', '.join(REGISTRY.plugin[op][0])})"
                )
            module = importlib.import_module(name)
        elif kind not in self.targets(op):
            raise ValueError(f"no {target} kernels for {op!r}")
        else:
            module = self.kernels(op, kind)
        takes = inspect.signature(module.lowered).parameters
        unknown = [k for k in options if k not in takes and not any(p.kind == p.VAR_KEYWORD for p in takes.values())]
        if unknown:
            named = ", ".join(n for n in takes if n not in ("dtype", "dim")) or "none"
            raise ValueError(f"{op}'s {target} kernels take no option {unknown[0]!r} (their options: {named})")
        funcs = module.lowered(dtype, dim, **options)
        if only is not None:
            unknown = set(only) - set(funcs)
            if unknown:
                raise ValueError(
                    f"no {target} kernel named {', '.join(sorted(unknown))} for {op!r}; it has {', '.join(funcs)}"
                )
        # one kernel per width bucket; a module whose tiles are the dim itself (a head dimension) gives its own bucket
        width = getattr(module, "bucket", importlib.import_module(f"{__name__}.{target}._common").bucket)(dim)
        key = (op, target, dtype, width, arch if target == "cuda" else None, tuple(sorted(options.items())))
        return {name: _lowered_kernel(key, name, f) for name, f in funcs.items() if only is None or name in only}

    def cache_info(self):
        if not _probe().ok:
            return []
        from .cpu.runtime import CACHE  # tilelang: kept out of start-up

        return CACHE.info() + [row for runner in RUNNERS.values() for row in runner.cache.info()]


_LOWERED: dict[tuple, tuple[str, int]] = {}  # (op, target, dtype, width bucket, arch, options, kernel) -> source, bytes


def _lowered_kernel(key: tuple, name: str, func) -> tuple[str, int]:
    """The device source of ``func`` and its on-chip bytes, lowered once per process for its key (and read from
    the disk cache where this kernel was lowered before: ``lowered.py``)."""

    found = _LOWERED.get(key + (name,))
    if found is None:
        tgt = cuda_target(key[4]) if key[1] == "cuda" else "ascend"
        found = _LOWERED[key + (name,)] = lowered.lower(func, tgt)
    return found


BACKEND = TileLangBackend()
