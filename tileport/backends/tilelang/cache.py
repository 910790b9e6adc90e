"""A process-wide cache of compiled TileLang kernels, one per key (op, D, dtypes, options), never per row
count: M is a dynamic symbol. Counters feed ``kernel_cache_info()``. Each target subclasses ``compile``."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass
class _Stats:
    kernels: int = 0
    hits: int = 0
    compile_seconds: float = 0.0


@dataclass
class KernelCache:
    backend: str = "tilelang"
    _kernels: dict = field(default_factory=dict)
    _stats: dict = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def compile(self, op: str, key: tuple, build: Callable[[], object]):
        """Turn what ``build()`` returns into a callable kernel (per target)."""
        raise NotImplementedError

    def get(self, op: str, key: tuple, build: Callable[[], object]):
        launcher = self._kernels.get((op, key))
        if launcher is not None:  # hot path, no lock: entries are only ever added (hit counts are best-effort
            self._stats[op].hits += 1  # under concurrent threads)
            return launcher
        with self._lock:
            stats = self._stats.setdefault(op, _Stats())
            launcher = self._kernels.get((op, key))
            if launcher is not None:
                stats.hits += 1
                return launcher
            t0 = time.perf_counter()
            launcher = self.compile(op, key, build)
            stats.compile_seconds += time.perf_counter() - t0
            stats.kernels += 1
            self._kernels[(op, key)] = launcher
            return launcher

    def info(self) -> list[dict]:
        with self._lock:
            return [
                {
                    "op": op,
                    "backend": self.backend,
                    "kernels": s.kernels,
                    "hits": s.hits,
                    "compile_seconds": round(s.compile_seconds, 3),
                    "keys": sorted(str(k) for (o, k) in self._kernels if o == op),
                }
                for op, s in sorted(self._stats.items())
            ]
