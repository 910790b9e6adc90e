"""log_softmax as TileLang CUDA kernels: softmax's with ``log`` set (``cuda/softmax.py``)."""

import torch

from . import softmax as _softmax


def lowered(dtype: torch.dtype, dim: int) -> dict:
    """{kernel name: prim_func} serving rows of ``dim`` columns, for ``tileport lower``."""
    return _softmax.lowered(dtype, dim, log=True)


def forward(x):
    """y on the GPU for a non-empty 2-D x."""
    return _softmax.run_forward(x, log=True)


def backward(y, dy):
    return _softmax.run_backward(y, dy, log=True)
