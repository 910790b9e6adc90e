"""log_softmax in Triton: softmax's kernels with LOG set (``triton/softmax.py``)."""

from __future__ import annotations

import torch

from .softmax import run_backward, run_forward


def forward(x: torch.Tensor) -> torch.Tensor:
    """y for a non-empty 2-D x with unit-stride rows (any row stride)."""
    return run_forward("log_softmax", x, True)


def backward(y: torch.Tensor, dy: torch.Tensor) -> torch.Tensor:
    return run_backward("log_softmax", y, dy, True)
