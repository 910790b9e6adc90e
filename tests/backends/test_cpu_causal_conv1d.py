"""The causal_conv1d kernel modules (the torch composite and the TileLang CPU kernels) against the contract's formula
in float64, written here position by position: widths 1 to 8 (and one past the CPU backward's ring), channel
tails, T shorter than W - 1, initial states, seq_idx with padding, silu, the models' channel-last x, contiguous
and strided ones; the backward against autograd of that formula, dfinal_states included. The CPU kernels give
the same bits for any thread count, and their hot loops are packed (read from the disassembly)."""

# No `from __future__ import annotations`: it breaks T.prim_func annotations in the modules imported.
import platform
import shutil

import pytest
import torch

from tileport.backends.registry import REGISTRY
from tileport.backends.torch import causal_conv1d as torch_conv

pytestmark = pytest.mark.skipif(not REGISTRY.availability("tilelang").ok, reason="tilelang backend unavailable")

DTYPES = [torch.float32, torch.bfloat16, torch.float16]
U32 = 2.0**-24
HALF_ULP = {torch.float32: U32, torch.bfloat16: 2.0**-8, torch.float16: 2.0**-11}
TINY = {torch.float32: 2.0**-126, torch.bfloat16: 2.0**-126, torch.float16: 2.0**-24}


def _cpu():
    from tileport.backends.tilelang.cpu import causal_conv1d

    return causal_conv1d


def golden(x, weight, bias=None, init=None, seq=None, silu=False):
    """(out, final, scale) in float64, token by token and tap by tap: z = bias + the terms that enter (all, or
    those of the token's sequence: others left out), silu, 0 at padding; ``scale`` the sum of the terms' sizes (what
    fp32 rounding errors are relative to). Differentiable in every float input."""
    B, D, T = x.shape
    W = weight.shape[1]
    head = init.double() if init is not None else torch.zeros(B, D, W - 1, dtype=torch.float64)
    xe = torch.cat((head, x.double()), -1)
    w = weight.double()
    base = bias.double().expand(B, D) if bias is not None else torch.zeros(B, D, dtype=torch.float64)
    outs, scales = [], []
    for t in range(T):
        z, scale = base, base.abs()
        for k in range(W):
            s = t - (W - 1) + k
            term = w[:, k] * xe[:, :, s + W - 1]
            if seq is not None:
                keep = torch.tensor([s >= 0 and int(seq[b, s]) == int(seq[b, t]) for b in range(B)])[:, None]
                term = torch.where(keep, term, 0.0)
            z, scale = z + term, scale + term.detach().abs()
        if silu:
            z = z * torch.sigmoid(z)
        if seq is not None:
            z = torch.where((seq[:, t] >= 0)[:, None], z, 0.0)
        outs.append(z)
        scales.append(scale)
    out = torch.stack(outs, -1) if T else torch.zeros(B, D, 0, dtype=torch.float64)
    scale = torch.stack(scales, -1) if T else out
    return out, xe[..., T:], scale


def _inputs(B, D, T, W, dtype, seed, init=False, seq=False, layout="channel-last", bias=True):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(B, T, D, generator=g).to(dtype).transpose(1, 2)  # the models' view of a [B, T, D] activation
    if layout == "contiguous":
        x = x.contiguous()
    elif layout == "strided":  # every other channel of a wider channel-last activation
        x = torch.randn(B, T, 2 * D, generator=g).to(dtype)[..., ::2].transpose(1, 2)
    weight = torch.randn(D, W, generator=g).to(dtype)
    b = torch.randn(D, generator=g).to(dtype) if bias else None
    h = torch.randn(B, D, W - 1, generator=g).to(dtype) if init else None
    ids = None
    if seq:  # two or three sequences per row, unsorted ids, a padding token
        ids = torch.randint(0, 3, (B, T), generator=g, dtype=torch.int32)
        ids[:, T // 2 :] = ids[:, T // 2 :].sort(-1).values
        if T > 2:
            ids[0, -1] = -1
    return x, weight, b, h, ids


def assert_within_rounding(out, ref, scale, dtype, W, silu, what):
    """fp32 arithmetic's rounding (each of the W + 1 sums, the silu's few roundings) relative to the terms' sizes,
    plus one rounding to the output's dtype."""
    assert out.dtype == dtype and out.shape == ref.shape, what
    err = (out.double() - ref).abs()
    bound = (W + 2 + (6 if silu else 0)) * U32 * scale + HALF_ULP[dtype] * 1.001 * ref.abs() + TINY[dtype]
    worst = (err - bound).max().item() if err.numel() else 0.0
    assert worst <= 0, f"{what}: error past the bound by {worst}"


CASES = {  # (B, D, T, W)
    "one-token": (1, 3, 1, 4),
    "decode-batch": (4, 40, 1, 4),
    "short-sequence": (2, 17, 2, 4),  # T < W - 1: the final states reach into the initial ones
    "prefill-tail": (2, 37, 29, 4),  # two whole 16-channel groups and a tail of 5
    "width-1": (2, 16, 7, 1),
    "width-2": (1, 33, 9, 2),
    "width-8": (2, 20, 13, 8),
}


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("silu", [False, True], ids=["none", "silu"])
@pytest.mark.parametrize("layout", ["channel-last", "contiguous", "strided"])
@pytest.mark.parametrize("name", list(CASES))
def test_forward_of_both_modules_against_the_float64_formula(name, layout, silu, dtype):
    B, D, T, W = CASES[name]
    for init, seq in ((False, False), (True, False), (False, True)):
        x, weight, bias, h, ids = _inputs(B, D, T, W, dtype, seed=len(name), init=init, seq=seq, layout=layout)
        ref, final, scale = golden(x, weight, bias, h, ids, silu)
        for m, mod in (("torch", torch_conv), ("tilelang", _cpu())):
            out, got_final = mod.forward(x, weight, bias, h, ids, "silu" if silu else "none")
            assert_within_rounding(out, ref, scale, dtype, W, silu, f"{m} {name} init={init} seq={seq}")
            if h is None:
                assert got_final is None
            else:
                assert torch.equal(got_final.double(), final), f"{m} {name}: final states are a copy"
            if m == "tilelang" and layout != "strided":
                assert out.stride() == x.stride() or D == 1, "out keeps x's layout"


def _grads(x, weight, bias, h, ids, silu, dout, dfinal):
    leaves = [t.double().requires_grad_() if t is not None else None for t in (x, weight, bias, h)]
    out, final, _ = golden(*leaves, ids, silu)
    loss = (out * dout.double()).sum() + ((final * dfinal.double()).sum() if dfinal is not None else 0)
    wanted = [t for t in leaves if t is not None]
    got = dict(
        zip(
            [n for n, t in zip(("dx", "dweight", "dbias", "dh"), leaves) if t is not None],
            torch.autograd.grad(loss, wanted),
        )
    )
    return got


TOL = {torch.float32: 2e-6, torch.bfloat16: 8e-3, torch.float16: 1e-3}  # relative to the largest gradient


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("silu", [False, True], ids=["none", "silu"])
@pytest.mark.parametrize("name", list(CASES))
def test_backward_of_both_modules_against_autograd_of_the_formula(name, silu, dtype):
    B, D, T, W = CASES[name]
    for init, seq, layout in ((False, False, "channel-last"), (True, False, "contiguous"), (False, True, "strided")):
        x, weight, bias, h, ids = _inputs(B, D, T, W, dtype, seed=7 + len(name), init=init, seq=seq, layout=layout)
        g = torch.Generator().manual_seed(3)
        dout = torch.randn(B, T, D, generator=g).to(dtype).transpose(1, 2)
        dfinal = torch.randn(B, D, W - 1, generator=g).to(dtype) if init else None
        want = _grads(x, weight, bias, h, ids, silu, dout, dfinal)
        for m, mod in (("torch", torch_conv), ("tilelang", _cpu())):
            dx, dw, db, dh = mod.backward(x, weight, bias, h, ids, dout, dfinal, "silu" if silu else "none")
            assert (dh is None) == (h is None)
            for key, got in (("dx", dx), ("dweight", dw), ("dbias", db), ("dh", dh)):
                if key not in want:
                    continue
                ref = want[key]
                assert got.dtype == dtype and got.shape == ref.shape, (m, key)
                peak = ref.abs().max().item() if ref.numel() else 0.0
                torch.testing.assert_close(
                    got.double(), ref, rtol=0, atol=TOL[dtype] * max(peak, 1e-30), msg=f"{m} {name} {key} {layout}"
                )


def test_padding_tokens_give_zero_and_pass_no_gradient():
    """A token whose id is negative outputs 0 whatever its inputs (inf included); dout there reaches nothing."""
    x, weight, bias, _, _ = _inputs(1, 20, 6, 4, torch.float32, seed=1)
    x[0, :, 3] = float("inf")
    ids = torch.tensor([[0, 0, 0, -1, 1, 1]], dtype=torch.int32)
    dout = torch.zeros(1, 20, 6)
    dout[0, :, 3] = 1e30
    for m, mod in (("torch", torch_conv), ("tilelang", _cpu())):
        out, _ = mod.forward(x, weight, bias, None, ids, "silu")
        assert torch.count_nonzero(out[0, :, 3]) == 0 and torch.isfinite(out).all(), m
        dx, dw, db, _ = mod.backward(x, weight, bias, None, ids, dout, None, "silu")
        assert torch.count_nonzero(dx) == 0 and torch.count_nonzero(dw) == 0 and torch.count_nonzero(db) == 0, m


def test_an_inf_weight_meets_the_padding_zeros_without_seq_idx_only():
    """Without seq_idx the W - 1 positions before the start are zeros that multiply (F.conv1d's padding): an inf
    weight gives nan at the first tokens; with seq_idx those terms are left out, so the outputs stay finite."""
    x, weight, bias, _, _ = _inputs(1, 4, 5, 3, torch.float32, seed=2)
    weight[:, 0] = float("inf")
    for m, mod in (("torch", torch_conv), ("tilelang", _cpu())):
        out, _ = mod.forward(x, weight, bias, None, None, "none")
        assert out[..., :2].isnan().all() and not out[..., 2:].isnan().any(), m
        ids = torch.zeros(1, 5, dtype=torch.int64)
        out, _ = mod.forward(x, weight, bias, None, ids, "none")
        assert out[..., :2].isfinite().all(), m


def test_a_width_past_the_ring_runs_on_the_reference():
    from tileport.backends.tilelang.cpu import causal_conv1d as cpu

    W = cpu.RING + 1
    x, weight, bias, h, _ = _inputs(1, 18, 20, W, torch.float32, seed=4, init=True)
    dout = torch.randn(1, 18, 20)
    got = cpu.backward(x, weight, bias, h, None, dout, None, "silu")
    want = torch_conv.backward(x, weight, bias, h, None, dout, None, "silu")
    for a, b in zip(got, want):
        assert torch.equal(a, b)
    out, _ = cpu.forward(x, weight, bias, h, None, "silu")  # the forward has no ring: any width
    ref, _, scale = golden(x, weight, bias, h, None, True)
    assert_within_rounding(out, ref, scale, torch.float32, W, True, "W = 17")


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_thread_count_does_not_change_bits(dtype):
    """Tokens (forward) and (batch, channel group) items (backward) are cut into ranges that threads claim; each
    result is computed alone and the weight gradient's partials are summed in batch order afterwards: one, two or
    three threads give the same bits."""
    from tileport.backends.tilelang.cpu.runtime import threads_for

    cpu = _cpu()
    x, weight, bias, h, _ = _inputs(3, 96, 200, 4, dtype, seed=5, init=True)  # 57600 elements x 4 taps
    dout = torch.randn(3, 96, 200).to(dtype)
    before = torch.get_num_threads()
    results = []
    try:
        for n in (1, 2):
            torch.set_num_threads(n)
            assert threads_for(x.numel() * 4) == n  # the split really happens
            results.append(
                (
                    *cpu.forward(x, weight, bias, h, None, "silu"),
                    *cpu.backward(x, weight, bias, h, None, dout, None, "silu"),
                )
            )
    finally:
        torch.set_num_threads(before)
    for got in results[1:]:
        for a, b in zip(got, results[0]):
            assert torch.equal(a, b)


X86 = platform.machine() in ("x86_64", "AMD64")


@pytest.mark.skipif(shutil.which("objdump") is None or not X86, reason="objdump and x86 mnemonics")
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_disassembly_is_packed(dtype):
    """Every innermost loop with floating-point arithmetic is packed on the ISA's registers (the taps' FMAs, the
    backward's fp64 sums), and each kernel holds packed multiplies (silu's exp) somewhere: 16 channels a step."""
    from tileport.backends.tilelang.cpu import disasm, settings
    from tileport.backends.tilelang.cpu.runtime import compile_kernel

    cpu = _cpu()
    width = disasm.register_of(settings.isa().lanes)
    for name, build in (("causal_conv1d_fwd", cpu.build_forward), ("causal_conv1d_bwd", cpu.build_backward)):
        lib = compile_kernel(build(dtype)).lib._name
        insns = disasm.function(lib, f"{name}_kernel")
        loops = [lp for lp in disasm.innermost_loops(insns) if lp.fp_arith()]
        assert loops, name
        for lp in loops:
            assert len(lp.scalar_fp()) <= len(lp.packed(width)), f"{name} {dtype}: {lp.fp_arith()}"
        packed = [m for lp in loops for m in lp.packed(width)]
        assert any("fmadd" in m or "vadd" in m for m in packed), f"{name}: no packed sum in its loops"
        everywhere = [m for _, m, ops in insns if width in ops]
        assert any(m.startswith(("vmulps", "vscalefps")) for m in everywhere), f"{name}: no packed multiply"
