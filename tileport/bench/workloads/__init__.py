"""Per-operator benchmark specs: named workloads, a sweep, providers per mode, and the minimum traffic.

Each module provides ``WORKLOADS`` (name -> shape), ``SWEEP`` (shapes), ``MODES``, ``bytes_moved(shape,
dtype, mode)`` and ``providers(shape, dtype, mode, backends) -> {provider: callable}``.
"""

import importlib

OPS = ("l2norm",)


def spec(op: str):
    if op not in OPS:
        raise ValueError(f"no benchmark spec for operator {op!r}; available: {', '.join(OPS)}")
    return importlib.import_module(f"{__name__}.{op}")
