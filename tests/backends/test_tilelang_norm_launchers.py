"""The norms' device launchers (``l2norm_device``, ``rms_norm_device``, ``layer_norm_device``, shared by the CUDA
and Ascend targets), host side, with a stand-in runner: rows made contiguous, outputs allocated in the asked
dtypes (or the caller's ``out`` used), a missing weight made ones with no offset in the fp32 form, a missing bias
zeros, and the kernel picked by (bucket, dtypes, casting, the target's option)."""

import importlib

import pytest
import torch

pytest.importorskip("tilelang")


class _Stand:
    """RUNNER.kernel's stand-in: records the kernel asked for and the arguments it was launched with."""

    def __init__(self):
        self.asked = []

    def kernel(self, name, build, *key):
        return lambda *args: self.asked.append((name, key, args))


@pytest.fixture(params=["cuda", "ascend"])
def target(request, monkeypatch):
    mods = {
        op: importlib.import_module(f"tileport.backends.tilelang.{request.param}.{op}")
        for op in ("l2norm", "rms_norm", "layer_norm")
    }
    stand = _Stand()
    for m in mods.values():
        monkeypatch.setattr(m, "RUNNER", stand)
    option = () if request.param == "cuda" else (mods["l2norm"].NR_STEPS,)  # CUDA's rms/layer_norm take none
    return request.param, mods, stand, option


def test_l2norm(target):
    name, mods, stand, option = target
    m = mods["l2norm"]
    x = torch.randn(6, 10, dtype=torch.float16).t()  # (10, 6), not contiguous
    y, rstd = m.forward(x, 1e-6, torch.float32)
    kernel, key, (xc, y_, r_, eps) = stand.asked.pop()
    assert (
        kernel == "l2norm_fwd" and xc.is_contiguous() and torch.equal(xc, x) and y_ is y and r_ is rstd and eps == 1e-6
    )
    assert key == (m.bucket(6), torch.float16, torch.float32, "exact" if name == "cuda" else option[0])
    assert (y.shape, y.dtype, rstd.shape, rstd.dtype) == ((10, 6), torch.float32, (10,), torch.float32)
    given = (torch.empty(10, 6), torch.empty(10))
    assert all(a is b for a, b in zip(m.forward(x, 1e-6, torch.float32, out=given), given))
    assert stand.asked.pop()[2][1] is given[0]
    dx = m.backward(x, rstd.half(), x.float())
    kernel, key, (xc, r_, dy, dx_) = stand.asked.pop()
    assert kernel == "l2norm_bwd" and key == (m.bucket(6), torch.float16, torch.float32) and dx_ is dx
    assert r_.dtype == torch.float32 and r_.is_contiguous() and dx.dtype == torch.float16


def test_rms_norm(target):
    name, mods, stand, option = target
    m = mods["rms_norm"]
    x = torch.randn(4, 8, dtype=torch.bfloat16)
    y, rstd = m.forward(x, None, 1e-6, 1.0, "llama", torch.bfloat16)
    kernel, key, (xc, w, y_, r_, eps, off) = stand.asked.pop()
    assert kernel == "rms_norm_fwd" and key == (
        m.bucket(8),
        torch.bfloat16,
        torch.bfloat16,
        torch.bfloat16,
        "fp32",
        *option,
    )
    assert torch.equal(w, torch.ones(8, dtype=torch.bfloat16)) and off == 0.0 and y_ is y and r_ is rstd
    weight = torch.randn(8, dtype=torch.float32)
    m.forward(x, weight, 1e-6, 1.0, "llama", torch.float32)
    kernel, key, (xc, w, y_, r_, eps, off) = stand.asked.pop()
    assert key == (m.bucket(8), torch.bfloat16, torch.float32, torch.float32, "llama", *option)
    assert w is weight and off == 1.0 and y_.dtype == torch.float32


def test_layer_norm(target):
    name, mods, stand, option = target
    m = mods["layer_norm"]
    x = torch.randn(5, 3, dtype=torch.float32)
    y, mean, rstd = m.forward(x, None, None, 1e-5, torch.float16)
    kernel, key, (xc, w, b, y_, mu, r_, eps) = stand.asked.pop()
    assert kernel == "layer_norm_fwd" and key == (m.bucket(3), torch.float32, torch.float32, torch.float16, *option)
    assert torch.equal(w, torch.ones(3)) and torch.equal(b, torch.zeros(3)) and y_ is y and mu is mean and r_ is rstd
    assert (y.dtype, mean.shape, rstd.shape) == (torch.float16, (5,), (5,))
