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
    from .cpu import settings

    return Availability(True, f"tilelang {tilelang.__version__}, C target via {cxx} for {settings.isa().summary()}")


class TileLangBackend:
    name = "tilelang"
    # CPU kernels run here; CUDA and Ascend arch35 kernels lower here and run where the device is
    device_kinds = frozenset({platform.CPU, platform.CUDA, platform.NPU_ARCH35})
    dtypes = {"l2norm": _CPU_DTYPES}

    def available(self) -> Availability:
        return _probe()

    def supports(self, op, device_kind, dtypes):
        return declared_support(self, op, device_kind, dtypes)

    def kernels(self, op, device_kind=platform.CPU):
        if op != "l2norm":
            raise KeyError(op)
        if device_kind == platform.CUDA:
            from .cuda import l2norm
        elif device_kind == platform.NPU_ARCH35:
            from .ascend import l2norm
        else:
            from .cpu import l2norm
        return l2norm

    def device_sources(self, op: str, target: str, dtype: torch.dtype, dim: int, arch: str = "sm_90", **options):
        """{kernel name: generated source} of op's kernels for a device target, lowered without the device.

        Options: CUDA ``rsqrt="exact"|"approx"``; Ascend ``nr_steps`` (Newton-Raphson steps after the
        hardware rsqrt, default 1).
        """
        from .targets import cuda_target, lower_source

        if op != "l2norm":
            raise ValueError(f"no {target} kernels for {op!r}")
        if target == "cuda":
            from .cuda import l2norm as k

            fwd = k.build_forward(k.bucket(dim), dtype, dtype, options.get("rsqrt", "exact"))
            tgt = cuda_target(arch)
        else:
            from .ascend import l2norm as k

            fwd = k.build_forward(k.bucket(dim), dtype, dtype, options.get("nr_steps", k.NR_STEPS))
            tgt = "ascend"
        bwd = k.build_backward(k.bucket(dim), dtype, dtype)
        return {"l2norm_fwd": lower_source(fwd, tgt), "l2norm_bwd": lower_source(bwd, tgt)}

    def cache_info(self):
        if not _probe().ok:
            return []
        import sys

        from .cpu.runtime import CACHE

        rows = CACHE.info()
        for name in ("cuda", "ascend"):  # device caches, where a device kernel was built in this process
            mod = sys.modules.get(f"{__name__}.{name}.l2norm")
            if mod is not None:
                rows += mod.RUNNER.cache.info()
        return rows


BACKEND = TileLangBackend()
