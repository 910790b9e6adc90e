"""The approximate-rsqrt model and its Newton-Raphson refinement in the TileLang CPU forward kernel."""

import pytest
import torch

from tileport.backends.registry import REGISTRY
from tileport.precision import compare

CPU = torch.device("cpu")


@pytest.fixture(scope="module")
def kernels():
    if not REGISTRY.availability("tilelang").ok:
        pytest.skip(REGISTRY.availability("tilelang").reason)
    return REGISTRY.kernels("l2norm", CPU, (torch.float32,), "tilelang")


def rel_errors(kernels, steps, x):
    _, r = kernels.forward(x, 1e-6, x.dtype, rsqrt_steps=steps)
    rg = torch.rsqrt((x.double() ** 2).sum(-1) + 1e-6)
    rel = (r.double() - rg).abs() / rg
    return float(rel.max()), r


def test_error_falls_as_the_field_reports(kernels, randn):
    x = randn(512, 1000)
    e0, _ = rel_errors(kernels, 0, x)
    e1, _ = rel_errors(kernels, 1, x)
    e2, _ = rel_errors(kernels, 2, x)
    assert 1e-3 < e0 < 2**-8  # the model: below 3.9e-3, like a ~3e-3 hardware rsqrt
    assert 3e-6 < e1 < 5e-5  # about 1.5 e0^2 (field: about 1e-5)
    assert e2 < 3e-7  # fp32 rounding (field: about 2e-7)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
def test_two_steps_pass_L0_and_zero_steps_fail(kernels, dtype, randn):
    x = randn(256, 512, dtype=dtype)
    ref = REGISTRY.kernels("l2norm", CPU, (torch.float32,), "torch")
    yg, rg = ref.forward(x.double(), 1e-6, torch.float64)
    yb, rb = ref.forward(x, 1e-6, dtype)
    _, r0 = rel_errors(kernels, 0, x)
    y2, r2 = kernels.forward(x, 1e-6, dtype, rsqrt_steps=2)
    assert not compare(r0, rg, rb, dtype=torch.float32).passed
    assert compare(r2, rg, rb, dtype=torch.float32).passed
    assert compare(y2, yg, yb, dtype=dtype).passed


def test_exact_default_is_untouched(kernels, randn):
    x = randn(64, 100)
    y, r = kernels.forward(x, 1e-6, torch.float32)
    ye, re = kernels.forward(x, 1e-6, torch.float32, rsqrt_steps=None)
    assert torch.equal(r, re) and torch.equal(y, ye)
