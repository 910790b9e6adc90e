"""causal_conv1d_update's Triton kernel (``tileport/backends/triton/causal_conv1d_update.py``) under the CPU
interpreter, against the float64 formula written here token by token: state lengths, more tokens than the state
holds, strided tensors; the new state bit for bit a copy; the Ascend forms (the chip's grid) too."""

import pytest
import torch

pytest.importorskip("triton", reason="triton is an optional extra: pip install tileport[triton]")
from tileport.backends.registry import REGISTRY

if not REGISTRY.availability("triton").ok:
    pytest.skip(REGISTRY.availability("triton").reason, allow_module_level=True)

from tileport.backends import outputs
from tileport.backends.triton import ascend
from tileport.backends.triton import causal_conv1d_update as step

TOL = {torch.float32: 3e-6, torch.bfloat16: 8e-3, torch.float16: 1e-3}


def golden(x, state, weight, bias, silu):
    xs = torch.cat((state.double(), x.double()), -1)
    s, t, width = state.shape[2], x.shape[2], weight.shape[1]
    outs = []
    for ti in range(t):
        z = bias.double().expand(x.shape[0], -1) if bias is not None else torch.zeros(x.shape[:2], dtype=torch.float64)
        for w in range(width):
            z = z + weight.double()[:, w] * xs[:, :, s + ti - (width - 1) + w]
        outs.append(z * torch.sigmoid(z) if silu else z)
    return torch.stack(outs, -1), xs[..., t:]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("shape", [(4, 40, 1, 4, 4), (2, 33, 3, 3, 4), (1, 20, 7, 4, 4), (2, 5, 2, 0, 1)])
def test_against_the_formula(shape, dtype):
    B, D, T, S, W = shape
    g = torch.Generator().manual_seed(D)
    x = torch.randn(B, T, D, generator=g).to(dtype).transpose(1, 2)  # channel-last: strides of its own
    state = torch.randn(B, 2 * D, S, generator=g).to(dtype)[:, ::2]  # a slice of a wider cache
    weight, bias = torch.randn(D, W, generator=g).to(dtype), torch.randn(D, generator=g).to(dtype)
    with outputs.poisoned():
        out, new = step.forward(x, state, weight, bias, "silu")
    want, want_state = golden(x, state, weight, bias, True)
    peak = max(want.abs().max().item(), 1.0)
    torch.testing.assert_close(out.double(), want, rtol=0, atol=TOL[dtype] * peak)
    assert torch.equal(new.double(), want_state)


def test_the_ascend_forms_run_on_the_interpreter(monkeypatch):
    monkeypatch.setenv(ascend.EMULATE, "ascend-a2")
    g = torch.Generator().manual_seed(2)
    x, state = torch.randn(48, 100, 1, generator=g), torch.randn(48, 100, 4, generator=g)
    weight, bias = torch.randn(100, 4, generator=g), torch.randn(100, generator=g)
    out, new = step.forward(x, state, weight, bias, "none")
    want, want_state = golden(x, state, weight, bias, False)
    torch.testing.assert_close(out.double(), want, rtol=0, atol=3e-6 * want.abs().max().item())
    assert torch.equal(new, want_state.float())
