"""What a benchmark or verify run ran on: machine and versions, as strings for CSV rows and reports."""

from __future__ import annotations

import os
import platform as _py_platform

import torch

from .. import __version__
from ..backends import platform


def machine() -> str:
    return f"{platform.cpu_model()} ({os.cpu_count()} cpus; {platform.cpu_isa()})"


def versions() -> str:
    parts = [
        f"tileport {__version__}",
        f"torch {torch.__version__}",
        f"python {_py_platform.python_version()}",
    ]
    try:
        # tilelang: seconds to import, kept out of start-up
        import tilelang

        parts.append(f"tilelang {tilelang.__version__}")
    except Exception:  # tilelang missing or broken: the run says so through available_backends()
        pass
    return ", ".join(parts)
