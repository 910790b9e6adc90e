"""causal_conv1d's Triton kernels (``tileport/backends/triton/causal_conv1d.py``) under the CPU interpreter, called
through the kernel module's interface (``tileport.ops.causal_conv1d``'s contract), against a float64 formula
written here position by position, and the backward against autograd of it; the Ascend forms (the chip's grid,
fp32 partial sums) too. Small shapes: the interpreter costs milliseconds per program."""

import pytest
import torch

pytest.importorskip("triton", reason="triton is an optional extra: pip install tileport[triton]")
from tileport.backends.registry import REGISTRY

if not REGISTRY.availability("triton").ok:
    pytest.skip(REGISTRY.availability("triton").reason, allow_module_level=True)

from tileport.backends import outputs
from tileport.backends.triton import ascend
from tileport.backends.triton import causal_conv1d as conv

DTYPES = (torch.float32, torch.float16, torch.bfloat16)
TOL = {torch.float32: 3e-6, torch.bfloat16: 8e-3, torch.float16: 1e-3}  # relative to the largest value


def golden(x, weight, bias=None, init=None, seq=None, silu=False):
    """(out, final) in float64, token by token: z = bias + the terms that enter (every one, zeros or the initial
    states before the start; with seq_idx the token's own sequence's only), silu, 0 at padding."""
    B, D, T = x.shape
    W = weight.shape[1]
    head = init.double() if init is not None else torch.zeros(B, D, W - 1, dtype=torch.float64)
    xe = torch.cat((head, x.double()), -1)
    outs = []
    for t in range(T):
        z = bias.double().expand(B, D) if bias is not None else torch.zeros(B, D, dtype=torch.float64)
        for k in range(W):
            s = t - (W - 1) + k
            term = weight.double()[:, k] * xe[:, :, s + W - 1]
            if seq is not None:
                keep = torch.tensor([s >= 0 and int(seq[b, s]) == int(seq[b, t]) for b in range(B)])[:, None]
                term = torch.where(keep, term, 0.0)
            z = z + term
        z = z * torch.sigmoid(z) if silu else z
        outs.append(z if seq is None else torch.where((seq[:, t] >= 0)[:, None], z, 0.0))
    return torch.stack(outs, -1), xe[..., T:]


def _close(got, want, dtype, what):
    assert got.dtype == dtype and got.shape == want.shape, what
    peak = want.abs().max().item() if want.numel() else 0.0
    torch.testing.assert_close(got.double(), want, rtol=0, atol=TOL[dtype] * max(peak, 1e-30), msg=what)


CASES = {  # (B, D, T, W, initial states, seq_idx, layout)
    "prefill-channel-last": (2, 37, 11, 4, False, False, "channel-last"),
    "states-contiguous": (2, 20, 2, 4, True, False, "contiguous"),  # T < W - 1
    "packed-batch": (2, 24, 10, 4, False, True, "channel-last"),
    "width-2-sliced": (1, 18, 9, 2, True, False, "sliced"),
    "width-1": (3, 5, 4, 1, False, False, "contiguous"),
}


def _case(name, dtype):
    B, D, T, W, init, seq, layout = CASES[name]
    g = torch.Generator().manual_seed(len(name))
    base = torch.randn(B, T, 2 * D, generator=g).to(dtype)
    x = {"channel-last": base[..., :D], "contiguous": base[..., :D].contiguous(), "sliced": base[..., ::2]}[layout]
    x = x.transpose(1, 2) if layout != "contiguous" else x.transpose(1, 2).contiguous()
    weight, bias = torch.randn(D, W, generator=g).to(dtype), torch.randn(D, generator=g).to(dtype)
    h = torch.randn(B, D, W - 1, generator=g).to(dtype) if init else None
    ids = None
    if seq:
        ids = torch.tensor([[0, 0, 0, 1, 1, 1, 1, 1, -1, -1], [5, 5, 2, 2, 5, 5, 5, 2, 2, 2]], dtype=torch.int32)
    return x, weight, bias, h, ids


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("silu", [False, True], ids=["none", "silu"])
@pytest.mark.parametrize("name", list(CASES))
def test_forward_and_backward_against_the_formula(name, silu, dtype):
    x, weight, bias, h, ids = _case(name, dtype)
    act = "silu" if silu else "none"
    with outputs.poisoned():  # an element the kernels never write shows up as nan
        out, final = conv.forward(x, weight, bias, h, ids, act)
    want, want_final = golden(x, weight, bias, h, ids, silu)
    _close(out, want, dtype, f"{name} out")
    assert (final is None) == (h is None) and (final is None or torch.equal(final.double(), want_final))
    g = torch.Generator().manual_seed(3)
    dout = torch.randn(x.shape, generator=g).to(dtype)
    dfinal = torch.randn(h.shape, generator=g).to(dtype) if h is not None else None
    leaves = [t.double().requires_grad_() if t is not None else None for t in (x, weight, bias, h)]
    o, f = golden(*leaves, ids, silu)
    loss = (o * dout.double()).sum() + ((f * dfinal.double()).sum() if dfinal is not None else 0)
    wants = torch.autograd.grad(loss, [t for t in leaves if t is not None])
    with outputs.poisoned():
        got = conv.backward(x, weight, bias, h, ids, dout, dfinal, act)
    assert (got[3] is None) == (h is None)
    for what, a, b in zip(("dx", "dweight", "dbias", "dinitial_states"), [t for t in got if t is not None], wants):
        _close(a, b, dtype, f"{name} {what}")


def test_the_ascend_forms_run_on_the_interpreter(monkeypatch):
    """$TILEPORT_TRITON_ASCEND tiles the launches for an A2 (its vector cores as the grid, each program looping
    over blocks; the partials summed in fp32): the same numbers against the golden."""
    monkeypatch.setenv(ascend.EMULATE, "ascend-a2")
    B, D, T = 3, 600, 40  # more blocks than the chip's 40 programs
    g = torch.Generator().manual_seed(1)
    x = torch.randn(B, T, D, generator=g).transpose(1, 2)
    weight, bias = torch.randn(D, 4, generator=g), torch.randn(D, generator=g)
    tiles = conv._tiles(B, T + 3, D, x.device, conv.LIVE["bwd"])
    assert tiles[4] == (ascend.CHIPS["ascend-a2"].vector_cores,) and B * tiles[2] * tiles[3] > tiles[4][0]
    out, _ = conv.forward(x, weight, bias, None, None, "silu")
    _close(out, golden(x, weight, bias, silu=True)[0], torch.float32, "out")
    dout = torch.randn(B, D, T, generator=g)
    leaves = [t.double().requires_grad_() for t in (x, weight, bias)]
    wants = torch.autograd.grad((golden(*leaves, silu=True)[0] * dout.double()).sum(), leaves)
    dx, dw, db, _ = conv.backward(x, weight, bias, None, None, dout, None, "silu")
    for what, a, b in zip(("dx", "dweight", "dbias"), (dx, dw, db), wants):
        torch.testing.assert_close(a.double(), b, rtol=0, atol=2e-5 * b.abs().max().item(), msg=what)
