"""tileport: fused operators ported across accelerators, each port proven correct and fast.

Public API (stable): the operators re-exported from ``tileport.ops`` and the backend queries.
"""

from .backends.registry import BackendUnavailableError, available_backends, kernel_cache_info
from .ops import L2Norm, RMSNorm, l2norm, l2norm_bwd, l2norm_fwd, rms_norm, rms_norm_bwd, rms_norm_fwd

__version__ = "0.1.0"

__all__ = [
    "BackendUnavailableError",
    "L2Norm",
    "RMSNorm",
    "available_backends",
    "kernel_cache_info",
    "l2norm",
    "l2norm_bwd",
    "l2norm_fwd",
    "rms_norm",
    "rms_norm_bwd",
    "rms_norm_fwd",
]
