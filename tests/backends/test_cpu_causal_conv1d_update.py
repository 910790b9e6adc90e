"""The causal_conv1d_update kernel modules (the torch composite and the TileLang CPU kernel) against the contract's
formula in float64, written here token by token: state lengths W - 1, W and longer, more tokens than the state
holds, width 1 (no state), channel tails, a strided state and a channel-last x; the new state bit for bit a copy;
the same bits for any thread count; the taps' loops packed (read from the disassembly)."""

# No `from __future__ import annotations`: it breaks T.prim_func annotations in the modules imported.
import platform
import shutil

import pytest
import torch

from tileport.backends.registry import REGISTRY
from tileport.backends.torch import causal_conv1d_update as torch_update

pytestmark = pytest.mark.skipif(not REGISTRY.availability("tilelang").ok, reason="tilelang backend unavailable")

DTYPES = [torch.float32, torch.bfloat16, torch.float16]
U32 = 2.0**-24
HALF_ULP = {torch.float32: U32, torch.bfloat16: 2.0**-8, torch.float16: 2.0**-11}


def _cpu():
    from tileport.backends.tilelang.cpu import causal_conv1d_update

    return causal_conv1d_update


def golden(x, state, weight, bias, silu):
    """(out, new_state, scale) in float64: xs = [state, x]; out[t] = act(bias + the W taps ending at S + t);
    ``scale`` the sum of the terms' sizes."""
    xs = torch.cat((state.double(), x.double()), -1)
    s, t, width = state.shape[2], x.shape[2], weight.shape[1]
    outs, scales = [], []
    for ti in range(t):
        z = bias.double().expand(x.shape[0], -1) if bias is not None else torch.zeros(x.shape[:2], dtype=torch.float64)
        scale = z.abs()
        for w in range(width):
            term = weight.double()[:, w] * xs[:, :, s + ti - (width - 1) + w]
            z, scale = z + term, scale + term.abs()
        outs.append(z * torch.sigmoid(z) if silu else z)
        scales.append(scale)
    return torch.stack(outs, -1), xs[..., t:], torch.stack(scales, -1)


CASES = {  # (B, D, T, S, W)
    "decode": (4, 40, 1, 4, 4),
    "state-w-minus-1": (2, 16, 1, 3, 4),
    "a-few-tokens": (2, 33, 3, 4, 4),
    "more-tokens-than-state": (1, 20, 7, 4, 4),
    "long-state": (3, 17, 2, 9, 3),
    "width-1": (2, 5, 2, 0, 1),
}


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("silu", [False, True], ids=["none", "silu"])
@pytest.mark.parametrize("name", list(CASES))
def test_both_modules_against_the_float64_formula(name, silu, dtype):
    B, D, T, S, W = CASES[name]
    g = torch.Generator().manual_seed(len(name))
    for layout in ("contiguous", "strided"):
        x = torch.randn(B, D, T, generator=g).to(dtype)
        state = torch.randn(B, D, S, generator=g).to(dtype)
        if layout == "strided":  # x channel-last, the state a slice of a wider cache
            x = torch.randn(B, T, D, generator=g).to(dtype).transpose(1, 2)
            state = torch.randn(B, 2 * D, S + 2, generator=g).to(dtype)[:, ::2, 1 : S + 1]
        weight, bias = torch.randn(D, W, generator=g).to(dtype), torch.randn(D, generator=g).to(dtype)
        ref, ref_state, scale = golden(x, state, weight, bias, silu)
        for m, mod in (("torch", torch_update), ("tilelang", _cpu())):
            kept = state.clone()
            out, new = mod.forward(x, state, weight, bias, "silu" if silu else "none")
            assert torch.equal(state, kept), f"{m}: the kernel module leaves conv_state alone"
            assert out.is_contiguous() and new.is_contiguous() and out.dtype == dtype
            err = (out.double() - ref).abs()
            bound = (W + 2 + (6 if silu else 0)) * U32 * scale + 1.001 * HALF_ULP[dtype] * ref.abs() + 2.0**-126
            assert (err <= bound).all(), f"{m} {name} {layout}: past the bound by {(err - bound).max().item()}"
            assert torch.equal(new.double(), ref_state), f"{m} {name} {layout}: the new state is a copy"


def test_thread_count_does_not_change_bits():
    cpu = _cpu()
    g = torch.Generator().manual_seed(1)
    x, state = torch.randn(64, 1024, 1, generator=g), torch.randn(64, 1024, 4, generator=g)
    weight, bias = torch.randn(1024, 4, generator=g), torch.randn(1024, generator=g)
    before = torch.get_num_threads()
    results = []
    try:
        for n in (1, 2):
            torch.set_num_threads(n)
            results.append(cpu.forward(x, state, weight, bias, "silu"))
    finally:
        torch.set_num_threads(before)
    assert all(torch.equal(a, b) for a, b in zip(results[0], results[1]))


X86 = platform.machine() in ("x86_64", "AMD64")


@pytest.mark.skipif(shutil.which("objdump") is None or not X86, reason="objdump and x86 mnemonics")
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_the_taps_are_packed(dtype):
    """16 channels a step: the taps' sums are packed FMAs on the ISA's registers, silu's exp packed multiplies."""
    from tileport.backends.tilelang.cpu import disasm, settings
    from tileport.backends.tilelang.cpu.runtime import compile_kernel

    lib = compile_kernel(_cpu().build(dtype)).lib._name
    insns = disasm.function(lib, "causal_conv1d_update_kernel")
    width = disasm.register_of(settings.isa().lanes)
    packed = [m for _, m, ops in insns if width in ops]
    assert any("fmadd" in m for m in packed) and any(m.startswith(("vmulps", "vscalefps")) for m in packed), packed
