"""The torch reference backend: small-operator composites, as users write them today.

It runs on every device torch runs on and serves float64 (the dtype the TileLang CPU kernels leave out).
It is also the "benchmark" side of the dual-benchmark precision standard: an independent same-precision
implementation measured against the float64 golden.
"""

from __future__ import annotations

import importlib

import torch

from ...dtypes import stat_dtype
from .. import platform
from ..registry import Availability, declared_support, kernel_modules

_FLOATS = frozenset({torch.float16, torch.bfloat16, torch.float32, torch.float64})


compute_dtype = stat_dtype  # the composites compute in fp32 (the benchmark), fp64 for fp64 (the golden)


class TorchBackend:
    name = "torch"
    device_kinds = frozenset({platform.CPU, platform.CUDA, platform.NPU_ARCH35, platform.NPU_ARCH32})
    dtypes = {op: _FLOATS for op in kernel_modules(__file__)}  # one module per op in this folder

    def available(self) -> Availability:
        return Availability(True, f"torch {torch.__version__}")

    def supports(self, op, device_kind, dtypes):
        return declared_support(self, op, device_kind, dtypes)

    def kernels(self, op, device_kind="cpu"):
        return importlib.import_module(f"{__name__}.{op}")

    def cache_info(self):
        return []  # eager composites compile nothing


BACKEND = TorchBackend()
