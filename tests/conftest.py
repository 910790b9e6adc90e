import os

import pytest
import torch

# Triton runs on the CPU only under its interpreter, which must be chosen before triton is imported.
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")



@pytest.fixture
def golden():
    """The float64 golden of any operator: ``golden(op, **inputs)`` -> {output name: tensor}, its forward (and
    its backward when ``dy`` is given) on the inputs upcast to float64: the spec's golden (the torch reference
    unless the spec states its own), as verify's."""
    from tileport.ops.spec import get

    def run(op: str, **inputs):
        up = {k: v.double() if isinstance(v, torch.Tensor) else v for k, v in inputs.items()}
        return get(op).run_golden(up, "dy" in inputs)

    return run


@pytest.fixture
def randn():
    """Seeded normal samples in fp32, then cast: the same values for every dtype of a test."""

    def make(*shape, dtype=torch.float32, seed=0, scale=1.0):
        g = torch.Generator().manual_seed(seed)
        return (torch.randn(*shape, generator=g, dtype=torch.float32) * scale).to(dtype)

    return make
