"""The TileLang CPU decode step (``fused_recurrent_gated_delta_rule``'s kernel) against the float64 recurrence
(``tileport.ops.chunk_gated_delta_rule.spec.recurrence``): batched and packed sequences (segments of one token and
of none), grouped value heads, K != V with column tails, g / beta / initial state absent, 16-bit q/k/v beside fp32
or 16-bit g, beta and states, non-contiguous inputs; infinities and nans where the recurrence has them; the
K-reductions' precision against the fp32 benchmark on the case that failed L0 with an fp32 dot product; the same
bits for any thread count; packed fp64 FMAs in the row loops (disassembly)."""

# No `from __future__ import annotations`: it breaks T.prim_func annotations in the modules imported.
import platform
import shutil

import pytest
import torch

from tileport.backends.registry import REGISTRY
from tileport.backends.torch import fused_recurrent_gated_delta_rule as benchmark
from tileport.ops.chunk_gated_delta_rule.spec import recurrence

pytestmark = pytest.mark.skipif(not REGISTRY.availability("tilelang").ok, reason="tilelang backend unavailable")

F64 = torch.float64
HALF_ULP = {torch.float32: 2.0**-24, torch.bfloat16: 2.0**-8, torch.float16: 2.0**-11}
# (B, T, H, HV, K, V, cu_seqlens): one decode token, a few tokens, grouped heads with K != V and column tails
# (V % 16), packed sequences with an empty and a one-token segment
SHAPES = {
    "decode": (3, 1, 2, 4, 32, 32, None),
    "tokens": (2, 5, 1, 1, 16, 16, None),
    "grouped-k-ne-v": (2, 3, 2, 6, 24, 40, None),
    "tails": (1, 2, 1, 2, 7, 5, None),
    "packed": (1, 9, 2, 4, 16, 20, [0, 1, 1, 6, 9]),
}


def _cpu():
    from tileport.backends.tilelang.cpu import fused_recurrent_gated_delta_rule

    return fused_recurrent_gated_delta_rule


def _inputs(B, T, H, HV, K, V, cu, dtype=torch.float32, seed=0, gate=True, beta=True, state=True):
    gen = torch.Generator().manual_seed(seed)

    def rand(*shape):
        return torch.randn(*shape, generator=gen)

    n = B if cu is None else len(cu) - 1
    g = -torch.rand(B, T, HV, generator=gen) * 2
    g[:, ::3] = 0.0
    return dict(
        q=rand(B, T, H, K).to(dtype),
        k=torch.nn.functional.normalize(rand(B, T, H, K), dim=-1).to(dtype),
        v=rand(B, T, HV, V).to(dtype),
        g=g if gate else None,
        beta=torch.rand(B, T, HV, generator=gen) if beta else None,
        initial_state=rand(n, HV, K, V) if state else None,
        cu_seqlens=None if cu is None else torch.tensor(cu),
    )


def _golden(inp, scale):
    """(o, final state) of the recurrence in float64 (g None: no decay; beta None: 1; no state: zeros)."""
    q, v = inp["q"].to(F64), inp["v"].to(F64)
    g = torch.zeros(v.shape[:3], dtype=F64) if inp["g"] is None else inp["g"].to(F64)
    beta = torch.ones(v.shape[:3], dtype=F64) if inp["beta"] is None else inp["beta"].to(F64)
    h0 = None if inp["initial_state"] is None else inp["initial_state"].to(F64)
    return recurrence(q, inp["k"].to(F64), v, g, beta, h0, inp["cu_seqlens"], scale)


def _run(inp, scale):
    names = ("q", "k", "v", "g", "beta", "initial_state", "cu_seqlens")
    return _cpu().forward(*(inp[n] for n in names), scale)


def _check(inp, scale, where):
    """o and the final state against the golden: o within its dtype's rounding of the golden plus fp32 errors of
    the state's size, the fp32 final state within a few fp32 roundings of the largest element."""
    o, final = _run(inp, scale)
    go, gfinal = _golden(inp, scale)
    dtype = inp["q"].dtype
    assert o.dtype == dtype and o.shape == inp["v"].shape, where
    big = go.abs().max().item()
    bound = 1.001 * HALF_ULP[dtype] * go.abs() + 2e-6 * big
    err = (o.to(F64) - go).abs()
    assert (err <= bound).all(), f"{where}: o past the bound by {(err - bound).max().item():.3g}"
    if inp["initial_state"] is None:
        assert final is None, where
        return
    assert final.dtype == torch.float32 and final.shape == gfinal.shape, where
    ferr = (final.to(F64) - gfinal).abs().max().item()
    assert ferr <= 2e-6 * gfinal.abs().max().item(), f"{where}: final state off by {ferr:.3g}"


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("name", list(SHAPES))
def test_against_the_float64_recurrence(name, dtype):
    inp = _inputs(*SHAPES[name], dtype=dtype, seed=len(name))
    _check(inp, 0.4, f"{name} {dtype}")


@pytest.mark.parametrize(
    "absent", [("g",), ("beta",), ("g", "beta"), ("initial_state",), ("g", "beta", "initial_state")]
)
@pytest.mark.parametrize("name", ["tokens", "packed"])
def test_optional_inputs_absent(name, absent):
    """g None: no decay; beta None: 1; no initial state: zeros (and no final state)."""
    inp = _inputs(*SHAPES[name], seed=3)
    inp.update({a: None for a in absent})
    _check(inp, 0.4, f"{name} without {absent}")


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
def test_gate_beta_and_state_in_their_own_dtypes(dtype):
    """g and beta of q's 16-bit dtype, the initial state in 16 bits or fp64, read as they are."""
    inp = _inputs(*SHAPES["grouped-k-ne-v"], dtype=dtype, seed=5)
    for state_dtype in (dtype, torch.float64):
        case = dict(inp, g=inp["g"].to(dtype), beta=inp["beta"].to(dtype))
        case["initial_state"] = inp["initial_state"].to(state_dtype)
        _check(case, 0.4, f"{dtype} g/beta, {state_dtype} state")


def test_non_contiguous_inputs():
    """q and k as [B, H, T, K] transposes, v a slice of wider heads, g with a non-unit last stride, the state a
    strided slice of a larger cache: the same results as contiguous copies."""
    B, T, H, HV, K, V = 2, 3, 2, 4, 20, 24
    inp = _inputs(B, T, H, HV, K, V, None, seed=7)
    strided = dict(inp)
    strided["q"] = inp["q"].transpose(1, 2).contiguous().transpose(1, 2)
    strided["k"] = inp["k"].transpose(1, 2).contiguous().transpose(1, 2)
    wide = torch.zeros(B, T, HV, 2 * V)
    wide[..., 1 : V + 1] = inp["v"]
    strided["v"] = wide[..., 1 : V + 1]
    strided["g"] = inp["g"].transpose(1, 2).contiguous().transpose(1, 2)
    cache = torch.zeros(2 * B, HV, K, V + 3)
    cache[::2, :, :, :V] = inp["initial_state"]
    strided["initial_state"] = cache[::2, :, :, :V]
    assert not any(strided[n].is_contiguous() for n in ("q", "k", "v", "g", "initial_state"))
    o, final = _run(strided, 0.3)
    want_o, want_final = _run(inp, 0.3)
    assert torch.equal(o, want_o) and torch.equal(final, want_final)
    assert torch.equal(cache[::2, :, :, :V], inp["initial_state"]), "the initial state is left alone"
    _check(strided, 0.3, "strided")


def test_infinities_and_nans_where_the_recurrence_has_them():
    """An inf in v spreads through the state as the recurrence's does: o is read from the new state (as
    e S_old^T q + (k.q) v' it would not be nan where the state's column holds infinities of both signs)."""
    inp = _inputs(*SHAPES["tokens"], seed=11)
    inp["v"][0, 1, 0, 3] = float("inf")
    inp["v"][1, 2, 0, 5] = float("nan")
    o, final = _run(inp, 0.5)
    go, gfinal = _golden(inp, 0.5)
    for got, want in ((o, go), (final, gfinal)):
        assert torch.equal(got.isnan(), want.isnan()) and torch.equal(got.isinf(), want.isinf())
        assert torch.equal(got[want.isinf()].sign(), want[want.isinf()].sign().float())
        finite = want.isfinite()
        assert torch.allclose(got[finite].to(F64), want[finite], rtol=1e-5, atol=1e-5)
    assert go[1, 2:, 0, 5].isnan().all() and go[0, 1:, 0, 3].isnan().any()


def _mere(o, golden) -> float:
    """The mean relative error against the golden."""
    return ((o.to(F64) - golden).abs() / golden.abs()).mean().item()


def test_k_reductions_beat_the_fp32_benchmark_on_a_large_offset_state():
    """verify's L0 case that an fp32 dot product failed (MERE 2-3x the benchmark's): one token, K = V = 96, a state
    ~N(-5.7, 6.6). The fp64 sums leave the state's own rounding: below the fp32 benchmark's error."""
    ratios = []
    for seed in range(16):
        gen = torch.Generator().manual_seed(seed)
        q, k = torch.randn(1, 1, 1, 96, generator=gen), torch.randn(1, 1, 1, 96, generator=gen)
        inp = dict(
            q=q,
            k=torch.nn.functional.normalize(k, dim=-1),
            v=torch.randn(1, 1, 1, 96, generator=gen),
            g=-torch.rand(1, 1, 1, generator=gen),
            beta=torch.rand(1, 1, 1, generator=gen),
            initial_state=torch.randn(1, 1, 96, 96, generator=gen) * 6.6 - 5.7,
            cu_seqlens=None,
        )
        go, _ = _golden(inp, 1.0)
        names = ("q", "k", "v", "g", "beta", "initial_state", "cu_seqlens")
        bench, _ = benchmark.forward(*(inp[n] for n in names), 1.0)
        ours, _ = _run(inp, 1.0)

        ratios.append(_mere(ours, go) / _mere(bench, go))
    ratios = torch.tensor(ratios)
    assert ratios.max() < 2 and ratios.median() < 0.8, ratios


def test_same_bits_for_any_thread_count():
    from tileport.backends.tilelang.cpu.runtime import CACHE

    inp = _inputs(*SHAPES["packed"], seed=13)
    mod = _cpu()
    kernel = CACHE.kernel("fused_recurrent_gated_delta_rule", mod.build, *[torch.float32] * 4)
    results = []
    for threads in (1, 2, 3):
        o, final = torch.empty_like(inp["v"]), torch.empty_like(inp["initial_state"])
        kernel(threads, o=o, final_state=final, scale=0.4, **{n: x for n, x in inp.items()})
        results.append((o, final))
    for o, final in results[1:]:
        assert torch.equal(o, results[0][0]) and torch.equal(final, results[0][1])


@pytest.mark.skipif(shutil.which("objdump") is None, reason="objdump (binutils) is not installed")
@pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="x86 register names")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_row_loops_are_packed_fp64_sums(dtype):
    """Every row loop of the kernel sums in packed fp64 FMAs on the native registers with no scalar arithmetic, and
    the second walk's state update is a packed fp32 FMA (read from the disassembly)."""
    from tileport.backends.tilelang.cpu import disasm, settings
    from tileport.backends.tilelang.cpu.runtime import compile_kernel

    lib = compile_kernel(_cpu().build(dtype, torch.float32, dtype, torch.float32)).lib._name
    width = disasm.register_of(settings.isa().lanes)
    loops = [lp for lp in disasm.kernel_loops(lib, "gated_delta_step") if lp.fp_arith()]
    assert loops
    for lp in loops:
        arith = [m for m, _ in lp.fp_arith()]
        assert lp.scalar_fp() == [] and any(m.endswith("pd") for m in lp.packed(width)), arith
        assert all(width in ops for m, ops in lp.fp_arith() if "fmadd" in m), lp.fp_arith()
    assert any(any(m.startswith("vfmadd") and m.endswith("ps") for m in lp.packed(width)) for lp in loops)


# ---------------------------------------------------------------- the chunk algorithm's WY preparation (wy.py)


def _torch_decay_and_inverse(kk, gc, beta):
    """chunked.prepare's torch ops (its path off the CPU): decays masked to -inf before the exp, A, LAPACK's solve."""
    from tileport.backends.tilelang.cpu import chunked

    C, (NCH, H), HV = chunked.C, kk.shape[:2], gc.shape[1]
    lower, strict = chunked._masks("cpu")
    decay = (gc[..., :, None] - gc[..., None, :]).masked_fill_(~lower, -torch.inf).exp_()
    a = (kk.unsqueeze(2) * decay.view(NCH, H, HV // H, C, C)).view(NCH, HV, C, C)
    a.mul_(beta[..., :, None]).masked_fill_(~strict, 0.0)
    a.diagonal(dim1=-2, dim2=-1).fill_(1.0)
    eye = torch.eye(C).expand_as(a)
    return decay, torch.linalg.solve_triangular(a, eye, upper=False, unitriangular=True), a


def _prepared(B, T, H, HV, K, cu, g_low, seed):
    from tileport.backends.tilelang.cpu import chunked

    inp = _inputs(B, T, H, HV, K, 8, cu, seed=seed)
    inp["g"] = -torch.rand(B, T, HV, generator=torch.Generator().manual_seed(seed)) * -g_low
    inp["g"][:, ::7] = 0.0
    lay = chunked.layout(B, T, inp["cu_seqlens"], "cpu")
    return chunked.prepare(lay, inp["q"], inp["k"], inp["v"], inp["g"], inp["beta"])


# (B, T, H, HV, K, cu_seqlens, lowest g): a chunk's tail, grouped heads, packed with an empty and a one-token segment,
# decays to exp(-20 * 64)
PREPARED = {
    "tail": (2, 70, 2, 4, 16, None, -2.0),
    "packed": (1, 150, 2, 2, 8, [0, 1, 65, 65, 66, 150], -1.0),
    "long-decays": (1, 128, 1, 3, 32, None, -20.0),
    "no-decay": (1, 64, 1, 1, 64, None, 0.0),
}


@pytest.mark.parametrize("name", list(PREPARED))
def test_prepare_gives_the_torch_ops_decays_and_inverse(name):
    """prepare()'s decays and Tinv from the wy kernel: the decays within an fp32 ulp or so of torch's exp, Tinv within
    1e-6 of each row's largest element of LAPACK's, exact zeros above the diagonal."""
    ch = _prepared(*PREPARED[name], seed=len(name))
    decay, tinv, _ = _torch_decay_and_inverse(ch.kk, ch.gc, ch.beta)
    assert torch.equal(ch.decay == 0, decay == 0) and torch.equal(ch.tinv.triu(1), torch.zeros_like(tinv).triu(1))
    assert ((ch.decay - decay).abs() <= 3e-7 * decay.abs() + 1e-44).all(), name
    row = (ch.tinv - tinv).abs().amax(-1) / tinv.abs().amax(-1)
    assert row.max() <= 1e-6, f"{name}: Tinv off LAPACK's by {row.max().item():.3g} of a row's largest element"


@pytest.mark.parametrize("name", ["tail", "long-decays"])
def test_inverse_against_float64(name):
    """Tinv against the float64 inverse of the same A (from the kernel's own decays): errors of fp32 rounding, on
    average no larger than LAPACK's fp32 solve's (within 1.5x: the sums' order differs)."""
    ch = _prepared(*PREPARED[name], seed=3)
    _, lapack, a = _torch_decay_and_inverse(ch.kk, ch.gc, ch.beta)
    NCH, H, HV = ch.kk.shape[0], ch.kk.shape[1], ch.gc.shape[1]
    own = (ch.kk.unsqueeze(2) * ch.decay.view(NCH, H, HV // H, 64, 64)).view(NCH, HV, 64, 64) * ch.beta[..., None]
    own = own.tril(-1).to(F64) + torch.eye(64, dtype=F64)
    exact = torch.linalg.inv(own)
    lap_exact = torch.linalg.inv(a.to(F64))
    assert ((ch.tinv.to(F64) - exact).abs().amax((-1, -2)) <= 1e-6 * exact.abs().amax((-1, -2))).all()
    nz = exact != 0
    ours = ((ch.tinv.to(F64) - exact).abs()[nz] / exact.abs()[nz]).mean()
    theirs = ((lapack.to(F64) - lap_exact).abs()[nz] / lap_exact.abs()[nz]).mean()
    assert ours <= 1.5 * theirs, (ours.item(), theirs.item())


def test_upper_decays_are_never_exps_of_their_positive_arguments():
    """With g = -50 a token, gc_r - gc_s above the diagonal reaches +3150: its exp (inf) times the mask's 0 would be
    nan. The kernel never forms it: decays above the diagonal are exact zeros and Tinv is finite."""
    from tileport.backends.tilelang.cpu import wy

    gc = torch.full((2, 3, 64), -50.0).cumsum(-1)
    k = torch.nn.functional.normalize(torch.randn(2, 1, 64, 16), dim=-1)
    decay, tinv = wy.decay_and_inverse(k @ k.transpose(-1, -2), gc, torch.rand(2, 3, 64))
    assert decay.isfinite().all() and tinv.isfinite().all() and (decay.triu(1) == 0).all()
    assert (decay.diagonal(dim1=-2, dim2=-1) == 1).all() and (decay.diagonal(-3, -2, -1) == 0).all()
    torch.testing.assert_close(decay.diagonal(-1, -2, -1), torch.full((2, 3, 63), torch.tensor(-50.0).exp().item()))
