"""tileport: fused operators ported across accelerators, each port proven correct and fast.

Public API (stable): the operators re-exported from ``tileport.ops``, model patching (``patch``, ``unpatch``),
the backend queries and the outputs' huge-page switch.
"""

import types as _types

from . import ops as _ops
from .backends.outputs import set_huge_page_outputs
from .backends.registry import BackendUnavailableError, available_backends, kernel_cache_info
from .transformers import patch, unpatch

__version__ = "0.1.0"

# Every operator's public names, as tileport/ops/__init__.py imports them (one line per operator, the line
# `tileport scaffold` adds): functions and module classes, not the operator packages themselves.
_OPS_API = sorted(
    n for n, v in vars(_ops).items() if not n.startswith("_") and callable(v) and not isinstance(v, _types.ModuleType)
)
globals().update({n: getattr(_ops, n) for n in _OPS_API})

__all__ = [
    "BackendUnavailableError",
    "available_backends",
    "kernel_cache_info",
    "patch",
    "set_huge_page_outputs",
    "unpatch",
    *_OPS_API,
]
