import os

import pytest
import torch

# Triton runs on the CPU only under its interpreter, which must be chosen before triton is imported.
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

import tileport


@pytest.fixture
def golden():
    """float64 golden of l2norm: (y, rstd) and dx, from the torch composite in float64."""

    def fwd(x, eps=1e-6):
        return tileport.l2norm_fwd(x.double(), eps, backend="torch")

    def bwd(x, dy, eps=1e-6):
        _, r = fwd(x, eps)
        return tileport.l2norm_bwd(x.double(), r, dy.double(), backend="torch")

    return fwd, bwd


@pytest.fixture
def randn():
    """Seeded normal samples in fp32, then cast: the same values for every dtype of a test."""

    def make(*shape, dtype=torch.float32, seed=0, scale=1.0):
        g = torch.Generator().manual_seed(seed)
        return (torch.randn(*shape, generator=g, dtype=torch.float32) * scale).to(dtype)

    return make
