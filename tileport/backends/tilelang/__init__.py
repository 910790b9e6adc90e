"""The TileLang backend: CPU kernels that run here (C target); device targets lower to source.

Importing this package does not import TileLang; ``available()`` does, once, and says why it failed.
"""

from __future__ import annotations

import functools
import shutil
import os

from ..registry import Availability, declared_support
from .. import platform
import torch

_CPU_DTYPES = frozenset({torch.float32, torch.float16, torch.bfloat16})


@functools.lru_cache(maxsize=1)
def _probe() -> Availability:
    cxx = os.environ.get("CXX", "g++")
    if shutil.which(cxx) is None:
        return Availability(False, f"no C++ compiler: {cxx!r} not on PATH (TileLang's C target builds with it)")
    try:
        import tilelang
        from .cpu import runtime  # noqa: F401
    except Exception as exc:
        return Availability(False, f"tilelang does not import: {type(exc).__name__}: {exc}")
    return Availability(True, f"tilelang {tilelang.__version__}, C target via {cxx}")


class TileLangBackend:
    name = "tilelang"
    device_kinds = frozenset({platform.CPU})
    dtypes = {"l2norm": _CPU_DTYPES}

    def available(self) -> Availability:
        return _probe()

    def supports(self, op, device_kind, dtypes):
        return declared_support(self, op, device_kind, dtypes)

    def kernels(self, op):
        from .cpu import l2norm

        return {"l2norm": l2norm}[op]

    def cache_info(self):
        if not _probe().ok:
            return []
        from .cpu.runtime import CACHE

        return CACHE.info()


BACKEND = TileLangBackend()
