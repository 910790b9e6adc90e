"""tileport: fused operators ported across accelerators, each port proven correct and fast.

Public API (stable): the operators re-exported from ``tileport.ops`` and the backend queries.
"""

from .backends.registry import BackendUnavailableError, available_backends, kernel_cache_info
from .ops import L2Norm, l2norm, l2norm_bwd, l2norm_fwd

__version__ = "0.1.0"

__all__ = [
    "BackendUnavailableError",
    "L2Norm",
    "available_backends",
    "kernel_cache_info",
    "l2norm",
    "l2norm_bwd",
    "l2norm_fwd",
]
