"""Backends: a registry (dispatch by device and architecture) over one package per backend."""

from .registry import (  # noqa: F401
    REGISTRY,
    BackendInfo,
    BackendUnavailableError,
    available_backends,
    kernel_cache_info,
)
