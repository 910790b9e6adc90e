"""Build settings of the TileLang CPU kernels, importable without TileLang (the doctor reads them)."""

from __future__ import annotations

import os
from pathlib import Path

from ... import platform

# TileLang builds the generated C++ with no -O flag (g++ -O0: 14-58x slower). -fno-trapping-math lets g++
# vectorize selects; -fopenmp for the row driver.
COMPILE_FLAGS = ("-O3", "-march=native", "-fno-trapping-math", "-fopenmp")


def cache_dir(tilelang_version: str, environ=os.environ) -> Path:
    """``$TILEPORT_CACHE_DIR`` (default ``~/.cache/tileport``) per TileLang version and CPU model: TileLang's
    cache key holds the flag text ``-march=native``, not the CPU, so one folder must not serve two CPUs."""
    root = environ.get("TILEPORT_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "tileport")
    return Path(root) / f"tilelang-{tilelang_version}" / platform.cpu_tag()
