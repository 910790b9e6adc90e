"""cross_entropy's TileLang CPU row kernels against a float64 golden written here: torch's ``F.cross_entropy``
(reduction "none", weight, label smoothing, ignore_index) on the capped logits ``softcap * tanh(x / softcap)``,
the z-loss ``scale * logsumexp^2`` of the counted rows, and the gradients by fp64 autograd of ``a * sum(loss) +
b * sum(z_loss)`` (the fused forward's ``scales``) or of ``sum(dloss * loss + dz_loss * z_loss)`` (backward).

Covers every dtype, vocabularies from 1 to 262144 (tails, odd chunk counts, several blocks), each option alone
and together, ignored rows, in-place gradients, int32 targets, row-strided views, bf16 logits of magnitude 1e4 to
6e4, -inf and nan logits, non-finite weights and scales as the torch reference's, thread counts, and the softcap's
packed tanh against fp64 (a C harness). Tolerances:
fp32 within 1e-5 of the golden (relative, plus a few fp32 ulps of the row's scale); 16-bit gradients within the
dtype's rounding of that."""

# No `from __future__ import annotations`: it breaks T.prim_func annotations in the modules imported.
import os
import platform
import shutil
import subprocess
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from tileport.backends.registry import REGISTRY

pytestmark = pytest.mark.skipif(not REGISTRY.availability("tilelang").ok, reason="tilelang backend unavailable")

DTYPES = [torch.float32, torch.bfloat16, torch.float16]
HALF_ULP = {torch.float32: 0.0, torch.bfloat16: 2.0**-8, torch.float16: 2.0**-11}  # one rounding, relative
TINY = {torch.float32: 0.0, torch.bfloat16: 2.0**-133, torch.float16: 2.0**-25}  # one rounding near 0
RTOL = 1e-5  # fp32 results (and the fp32 value a 16-bit gradient is rounded from) against the golden
IGNORE = -100
SCALES = (0.37, 1.3)
# (weight, label_smoothing, lse_square_scale, softcap): each option alone, then together
OPTIONS = [
    (False, 0.0, 0.0, 0.0),
    (True, 0.0, 0.0, 0.0),
    (False, 0.1, 0.0, 0.0),
    (True, 0.2, 0.0, 0.0),
    (False, 0.0, 1e-3, 0.0),
    (False, 0.0, 0.0, 30.0),
    (True, 0.1, 1e-4, 20.0),
]


def _ce():
    from tileport.backends.tilelang.cpu import cross_entropy

    return cross_entropy


def golden(x, target, weight=None, eps=0.0, zs=0.0, softcap=0.0, scales=SCALES, dloss=None, dz_loss=None):
    """(loss, z_loss, lse, grad) in float64: grad of ``a sum(loss) + b sum(z_loss)``, or with ``dloss`` (and
    ``dz_loss``) of ``sum(dloss * loss + dz_loss * z_loss)``."""
    xd = x.detach().double().requires_grad_(True)
    z = softcap * torch.tanh(xd / softcap) if softcap else xd
    t = target.long()
    w = None if weight is None else weight.double()
    loss = F.cross_entropy(z, t, weight=w, ignore_index=IGNORE, reduction="none", label_smoothing=eps)
    lse = torch.logsumexp(z, 1)
    z_loss = torch.where(t != IGNORE, zs * lse * lse, 0.0)
    if dloss is None:
        total = scales[0] * loss.sum() + scales[1] * z_loss.sum()
    else:
        total = (dloss.double() * loss).sum() + (0 if dz_loss is None else (dz_loss.double() * z_loss).sum())
    (grad,) = torch.autograd.grad(total, xd)
    return loss.detach(), z_loss.detach(), lse.detach(), grad


def check_stats(out, gold, where=""):
    """loss, z_loss, lse (fp32) within RTOL of the golden, plus a few fp32 ulps of each value's scale."""
    for name, a, g in zip(("loss", "z_loss", "lse"), out, gold):
        assert a.dtype == torch.float32, f"{where} {name} {a.dtype}"
        scale = 1.0 + (gold[2].abs() if name != "z_loss" else g.abs())  # a loss is log S + (M - z_t): lse's ulps
        err = (a.double() - g).abs()
        bad = ~(err <= RTOL * g.abs() + 4 * 2.0**-24 * scale) & ~(a.double().isnan() & g.isnan())
        assert not bad.any(), f"{where} {name}: {a[bad][:4].tolist()} vs {g[bad][:4].tolist()}"


def check_grad(a, g, dtype, where=""):
    """A gradient of ``dtype`` within its rounding of a value RTOL (of the row's largest) from the golden."""
    assert a.dtype == dtype, f"{where} {a.dtype}"
    scale = g.abs().amax(1, keepdim=True)
    tol = HALF_ULP[dtype] * g.abs() + TINY[dtype] + RTOL * (g.abs() + scale)
    err = (a.double() - g).abs()
    bad = ~(err <= tol * 1.001)
    assert not bad.any(), f"{where}: {bad.sum().item()} elements, e.g. {a[bad][:4].tolist()} vs {g[bad][:4].tolist()}"


def case(n, c, dtype, weighted=False, seed=0, scale=3.0, ignored=(1,)):
    gen = torch.Generator().manual_seed(seed)
    x = (torch.randn(n, c, generator=gen) * scale).to(dtype)
    t = torch.randint(0, c, (n,), generator=gen)
    for r in ignored:
        if r < n:
            t[r] = IGNORE
    w = (torch.rand(c, generator=gen) + 0.5).to(dtype) if weighted else None
    return x, t, w


def run_forward(x, t, w, eps, zs, cap, grad="new", scales=SCALES):
    g = torch.full(x.shape, float("nan"), dtype=x.dtype) if grad == "new" else grad
    out = _ce().forward(x, t, w, IGNORE, eps, zs, cap, grad=g, scales=scales)
    return out, g


@pytest.mark.parametrize("options", OPTIONS, ids=lambda o: "w{}-eps{}-z{}-cap{}".format(*o))
@pytest.mark.parametrize("c", [1, 7, 50, 100, 4097])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_forward_and_backward_match_the_golden(dtype, c, options):
    weighted, eps, zs, cap = options
    x, t, w = case(9, c, dtype, weighted, seed=c)
    where = f"{dtype} C={c} {options}"
    lse, dloss = _check_both_passes(x, t, w, eps, zs, cap, where)
    dx = _ce().backward(dloss, None, x, t, w, lse, IGNORE, eps, zs, cap)
    check_grad(dx, golden(x, t, w, eps, zs, cap, dloss=dloss)[3], dtype, where + " backward, no dz_loss")


@pytest.mark.parametrize("options", [o for o in OPTIONS if o[0]], ids=lambda o: "eps{1}-z{2}-cap{3}".format(*o))
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
def test_an_fp32_weight_beside_16_bit_logits_is_read_as_it_is(dtype, options):
    """Liger-Kernel's users pass an fp32 weight with bf16 logits: the kernels read it in fp32, its results within
    RTOL of the golden of that weight (rounded to the logits' dtype, a weight is up to 2^-9 off, losses with it)."""
    _, eps, zs, cap = options
    x, t, _ = case(9, 4097, dtype, seed=11)
    w = torch.rand(4097, generator=torch.Generator().manual_seed(12)) + 0.5
    _check_both_passes(x, t, w, eps, zs, cap, f"{dtype} fp32 weight {options}")


def _check_both_passes(x, t, w, eps, zs, cap, where):
    """The fused forward's statistics and gradient, and the backward given dloss and dz_loss, against the golden;
    (lse, dloss) for more backward checks."""
    (loss, z_loss, lse), g = run_forward(x, t, w, eps, zs, cap)
    gold = golden(x, t, w, eps, zs, cap)
    check_stats((loss, z_loss, lse), gold[:3], where)
    check_grad(g, gold[3], x.dtype, where + " fused grad")
    dloss, dz = torch.randn(9), torch.randn(9)
    dx = _ce().backward(dloss, dz, x, t, w, lse, IGNORE, eps, zs, cap)
    check_grad(dx, golden(x, t, w, eps, zs, cap, dloss=dloss, dz_loss=dz)[3], x.dtype, where + " backward")
    return lse, dloss


@pytest.mark.slow
@pytest.mark.parametrize("c,n", [(32000, 3), (128256, 2), (262144, 2)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_large_vocabularies(dtype, c, n):
    """Rows of many blocks: plain, then every option at once (weight, smoothing, z-loss, softcap)."""
    x, t, w = case(n, c, dtype, weighted=True, seed=c, scale=4.0, ignored=())
    for w_, eps, zs, cap in ((None, 0.0, 0.0, 0.0), (w, 0.1, 1e-4, 30.0)):
        (loss, z_loss, lse), g = run_forward(x, t, w_, eps, zs, cap)
        gold = golden(x, t, w_, eps, zs, cap)
        check_stats((loss, z_loss, lse), gold[:3], f"{dtype} C={c}")
        check_grad(g, gold[3], dtype, f"{dtype} C={c} grad")


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_gradient_in_place_over_the_input(dtype):
    """grad is input: each chunk read before it is written; the same bits as a separate gradient."""
    x, t, w = case(12, 2100, dtype, weighted=True, seed=5)
    for eps, zs, cap in ((0.0, 0.0, 0.0), (0.1, 1e-3, 25.0)):
        (_, _, lse), g = run_forward(x, t, w, eps, zs, cap)
        inplace = x.clone()
        out = _ce().forward(inplace, t, w, IGNORE, eps, zs, cap, grad=inplace, scales=SCALES)
        assert torch.equal(inplace, g)
        assert torch.equal(out[2], lse)
        check_grad(inplace, golden(x, t, w, eps, zs, cap)[3], dtype, f"{dtype} in place")


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_int32_targets_give_the_int64_results(dtype):
    x, t, w = case(10, 333, dtype, weighted=True, seed=7, ignored=(0, 4))
    a, ga = run_forward(x, t, w, 0.1, 1e-3, 0.0)
    b, gb = run_forward(x, t.int(), w, 0.1, 1e-3, 0.0)
    assert all(torch.equal(u, v) for u, v in zip(a, b)) and torch.equal(ga, gb)
    dloss = torch.randn(10)
    assert torch.equal(
        _ce().backward(dloss, None, x, t, w, a[2], IGNORE, 0.1, 1e-3, 0.0),
        _ce().backward(dloss, None, x, t.int(), w, a[2], IGNORE, 0.1, 1e-3, 0.0),
    )


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=str)
def test_row_strided_views_are_read_and_written_in_place(dtype):
    """input and grad as column slices of wider tensors (row stride > C), targets a strided view too."""
    x, t, _ = case(8, 1500, dtype, seed=9)
    view = x[:, 100:1100]
    tt = torch.stack([t, t], 1)[:, 0] % 1000
    tt[2] = IGNORE
    wide = torch.full((8, 1300), 7.0, dtype=dtype)
    g = wide[:, 200:1200]
    out = _ce().forward(view, tt, None, IGNORE, 0.0, 1e-3, 0.0, grad=g, scales=SCALES)
    (ref_out, ref_g) = run_forward(view.contiguous(), tt.contiguous(), None, 0.0, 1e-3, 0.0)
    assert all(torch.equal(u, v) for u, v in zip(out, ref_out)) and torch.equal(g, ref_g)
    assert (wide[:, :200] == 7).all() and (wide[:, 1200:] == 7).all()  # nothing written past the view
    check_grad(g, golden(view, tt, None, 0.0, 1e-3, 0.0)[3], dtype, "strided")
    dx = _ce().backward(torch.ones(8), None, view, tt, None, out[2], IGNORE, 0.0, 1e-3, 0.0)
    check_grad(dx, golden(view, tt, None, 0.0, 1e-3, 0.0, dloss=torch.ones(8))[3], dtype, "strided backward")


@pytest.mark.parametrize("center", [0.0, 1e4, 3e4, 6e4])
def test_bf16_logits_of_large_magnitude(center):
    """bf16 logits of magnitude 1e4..6e4 (ulp 64-256): finite losses and gradients, as the golden's; some rows'
    targets are their max (the loss then log S, tiny), some far below it (a loss of thousands)."""
    gen = torch.Generator().manual_seed(int(center) + 1)
    c = 5000
    x = (center + (torch.rand(6, c, generator=gen) * 2 - 1) * 3e4).bfloat16()
    t = torch.randint(0, c, (6,), generator=gen)
    t[:3] = x[:3].float().argmax(1)
    for eps in (0.0, 0.1):
        (loss, z_loss, lse), g = run_forward(x, t, None, eps, 1e-4, 0.0)
        gold = golden(x, t, None, eps, 1e-4, 0.0)
        assert all(v.isfinite().all() for v in (loss, z_loss, lse, g))
        check_stats((loss, z_loss, lse), gold[:3], f"center {center} eps {eps}")
        check_grad(g, gold[3], torch.bfloat16, f"center {center} eps {eps}")


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_ignored_rows_are_zero_and_keep_their_lse(dtype):
    x, t, w = case(5, 40, dtype, weighted=True, seed=11, ignored=range(5))
    (loss, z_loss, lse), g = run_forward(x, t, w, 0.1, 1e-3, 10.0)
    assert (loss == 0).all() and (z_loss == 0).all() and (g == 0).all()
    check_stats((loss, z_loss, lse), golden(x, t, w, 0.1, 1e-3, 10.0)[:3], "all ignored")
    dx = _ce().backward(torch.ones(5), torch.ones(5), x, t, w, lse, IGNORE, 0.1, 1e-3, 10.0)
    assert (dx == 0).all()


def test_other_ignore_index_and_a_target_equal_to_minus_100():
    """ignore_index is a runtime value: with ignore_index = 3, a row of target 3 is ignored; -100 is not a class
    here and the interface would reject it, so only ignore_index's rows are checked."""
    x, t, _ = case(6, 10, torch.float32, seed=13, ignored=())
    t[2] = 3
    out = _ce().forward(x, t, None, 3, 0.0, 0.0, 0.0)
    gold = F.cross_entropy(x.double(), t, ignore_index=3, reduction="none")
    assert out[0][2] == 0 and torch.allclose(out[0].double(), gold, rtol=RTOL, atol=1e-6)


def test_minus_inf_and_nan_logits():
    """-inf logits (masked classes, a whole first block of them too) give finite losses and zero gradients
    there, as torch's; a row holding nan gives nan, as torch's. The running max starts finite, not at -inf."""
    c = 5000
    x, t, _ = case(4, c, torch.float32, seed=17, ignored=())
    x[0, :3000] = -float("inf")  # the first block, and part of the second, masked
    t[0] = 4000
    x[1, ::3] = -float("inf")
    t[1] = 1
    x[2, 123] = float("nan")
    (loss, z_loss, lse), g = run_forward(x, t, None, 0.0, 1e-4, 0.0)
    gold = golden(x, t, None, 0.0, 1e-4, 0.0)
    check_stats((loss[:2], z_loss[:2], lse[:2]), [v[:2] for v in gold[:3]], "-inf")
    check_grad(g[:2], gold[3][:2], torch.float32, "-inf grad")
    assert (g[0, :3000] == 0).all()
    assert loss[2].isnan() and lse[2].isnan() and g[2].isnan().all()
    assert loss[3].isfinite()


def _same_or_both_nonfinite(a, b):
    """Equal non-finite values where b has one (nan with nan, inf with inf of its sign), close elsewhere."""
    a = a.double()
    finite = b.isfinite()
    same = (a == b) | (a.isnan() & b.isnan())
    return bool(same[~finite].all()) and bool(torch.allclose(a[finite], b[finite], rtol=1e-2, atol=1e-5))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_non_finite_values_as_the_torch_reference(dtype):
    """Rows of +inf, -inf, both, nan; infinite or nan weights and scales (dloss, dz_loss): inf and nan where the
    torch reference has them (its logsumexp: a row holding +inf has lse = +inf), a term whose scale is 0 absent."""
    from tileport.backends.torch import cross_entropy as reference

    inf, nan = float("inf"), float("nan")
    rows = [[inf, 1, -inf, 2], [inf] * 4, [-inf] * 4, [inf, -inf, inf, -inf], [1, 2, nan, inf], [1, 2, 3, 4]]
    x, t = torch.tensor(rows).to(dtype), torch.tensor([1, 0, 2, 1, 0, 2])
    xd = x.double()
    for eps, zs, cap in ((0.0, 0.0, 0.0), (0.1, 1e-3, 0.0), (0.0, 0.0, 5.0)):
        for w in (None, torch.tensor([1.0, inf, 2.0, 1.0]), torch.tensor([nan, 1.0, 1.0, 1.0])):
            w = None if w is None else w.to(dtype)
            wd = None if w is None else w.double()
            for scales in ((1.0, 1.0), (inf, nan), (nan, inf), (-inf, 0.5)):
                g, gd = torch.empty_like(x), torch.empty_like(xd)
                out = _ce().forward(x, t, w, IGNORE, eps, zs, cap, grad=g, scales=scales)
                gold = reference.forward(xd, t, wd, IGNORE, eps, zs, cap, grad=gd, scales=scales)
                for name, a, b in zip(("loss", "z_loss", "lse", "grad"), (*out, g), (*gold, gd)):
                    assert _same_or_both_nonfinite(a, b), f"{dtype} {eps} {zs} {cap} {w} {scales} {name}: {a} vs {b}"
        lse = reference.forward(xd, t, None, IGNORE, eps, zs, cap)[2]
        for dloss, dz in ((inf, nan), (nan, 1.0), (1.0, -inf)):
            dl, dzl = torch.full((6,), dloss), torch.full((6,), dz)
            a = _ce().backward(dl, dzl, x, t, None, lse.float(), IGNORE, eps, zs, cap)
            b = reference.backward(dl.double(), dzl.double(), xd, t, None, lse, IGNORE, eps, zs, cap)
            assert _same_or_both_nonfinite(a, b), f"backward {dtype} {eps} {zs} {cap} {dloss} {dz}: {a} vs {b}"


def test_same_bits_for_any_thread_count():
    x, t, w = case(64, 3000, torch.bfloat16, weighted=True, seed=19)
    launch = _ce().CACHE.kernel("cross_entropy_fwd", _ce().build_forward, x.dtype, "int64", False, "weighted")
    outs = []
    for threads in (1, 2, 3):
        o = [torch.empty(64) for _ in range(3)]
        g = torch.empty_like(x)
        launch(
            threads,
            input=x,
            target=t,
            weight=w,
            grad=g,
            loss=o[0],
            z_loss=o[1],
            lse=o[2],
            ignore_index=IGNORE,
            label_smoothing=0.1,
            lse_square_scale=1e-3,
            softcap=0.0,
            scale_loss=1.0,
            scale_z_loss=1.0,
        )
        outs.append((*o, g))
    for other in outs[1:]:
        assert all(torch.equal(u, v) for u, v in zip(outs[0], other))


def test_unsupported_dtypes_are_refused_by_name():
    x = torch.randn(2, 5, dtype=torch.float64)
    with pytest.raises(TypeError, match="float64"):
        _ce().forward(x, torch.zeros(2, dtype=torch.long), None, IGNORE, 0.0, 0.0, 0.0)
    with pytest.raises(TypeError, match="int64 or int32"):
        _ce().forward(x.float(), torch.zeros(2, dtype=torch.int16), None, IGNORE, 0.0, 0.0, 0.0)
    h, t = x.half(), torch.zeros(2, dtype=torch.long)
    with pytest.raises(TypeError, match="input's dtype"):  # one storage type for fp16 and bf16 in the kernel
        _ce().forward(h, t, torch.ones(5, dtype=torch.bfloat16), IGNORE, 0.0, 0.0, 0.0)
    with pytest.raises(TypeError, match="input's dtype"):
        _ce().forward(h, t, None, IGNORE, 0.0, 0.0, 0.0, grad=torch.empty(2, 5, dtype=torch.bfloat16))


@pytest.mark.skipif(
    shutil.which("objdump") is None or platform.machine() not in ("x86_64", "AMD64"), reason="x86 objdump"
)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_every_variant_runs_packed_exp_loops_without_calls(dtype):
    """Every build variant's loops that compute an exp (fp32's, or the softcap's fp64 exp) are packed on the
    native registers, and the kernel calls nothing but libm's scalar exp, log and tanh (per block and per row; no
    memcpy or memset, the tails being masked moves, with AVX-512 or AVX2, and the fp64 accumulators moved as
    vectors: a 256-byte memset became a call on AVX2): a kernel holding all variants' loops grew past g++'s
    inlining budget and called the exp and the softcap per chunk. (The module's PACKED_CHECKS is empty:
    tests/backends/test_cpu_simd.py reads the row epilogue's out-of-line code, jumping back, as scalar loops.)"""
    from tileport.backends.tilelang.cpu import disasm, runtime, settings

    width = disasm.register_of(settings.isa().lanes)
    builds = [("cross_entropy_fwd", _ce().build_forward, (c, s)) for c in (False, True) for s in _ce().SMOOTHING]
    builds += [("cross_entropy_bwd", _ce().build_backward, (c, w)) for c in (False, True) for w in (False, True)]
    if dtype != torch.float32:  # an fp32 weight beside 16-bit logits: its own loads in the weighted loops
        builds.append(("cross_entropy_fwd", _ce().build_forward, (False, "weighted", "float32", torch.float32)))
        builds.append(("cross_entropy_bwd", _ce().build_backward, (False, True, torch.float32)))
    for name, build, variant in builds:
        lib = runtime.compile_kernel(build(dtype, "int64", *variant)).lib._name
        insns = disasm.function(lib, f"{name}_kernel")
        assert set(disasm.calls(insns)) <= {"exp@plt", "log@plt", "tanh@plt"}, (
            f"{name} {variant}: {disasm.calls(insns)}"
        )
        # a loop's back edge is a conditional jump; an unconditional one is out-of-line code (a tail, the row's
        # epilogue) jumping back into the row's body
        loops = [lp for lp in disasm.innermost_loops(insns) if lp.instructions[-1][0] != "jmp"]
        # pass 1's sums and pass 2's gradient; the backward pass 2 alone, or both with a softcap (its fp64
        # logits against the fp32 saved lse). A loop counts where its range, or its part before its first exit
        # (g++ lays the row's epilogue there), holds the exp and packed fp arithmetic only; g++ may also make a
        # row loop innermost (rows of one chunk: the pass's loop is gone there), with the row's scalar set-up.
        want = 2 if name.endswith("fwd") or variant[0] else 1
        clean = [lp for lp in loops if _packed_exp(lp, width) or _packed_exp(_body(lp), width)]
        assert len(clean) >= want, f"{name} {variant} {dtype}: {len(clean)} packed loops with the exp, not {want}"


def _packed_exp(loop, width: str) -> bool:
    """A loop holding an exp (fp32's ``vscalefps`` with AVX-512, its exponent shift ``vpslld`` without; the fp64
    exp's ``vpsllq``: the softcap's pass 1), packed on ``width`` registers with no scalar fp arithmetic."""
    exp = any(m.startswith("vscalef") or m in ("vpslld", "vpsllq") for m, _ in loop.instructions)
    return exp and not loop.scalar_fp() and loop.packed(width)


def _body(loop):
    """The loop's instructions up to its first jump out of it: g++ lays out-of-line code (the row's epilogue, its
    scalar fp64 and libm calls) between a loop's first exit and its back edge."""
    import dataclasses

    for i, (m, o) in enumerate(loop.instructions[:-1]):
        target = o.split()[0] if m.startswith("j") else ""
        if target and all(c in "0123456789abcdef" for c in target) and not loop.start <= int(target, 16) <= loop.end:
            return dataclasses.replace(loop, instructions=loop.instructions[: i + 1])
    return loop


_TANH_HARNESS = r"""
#include <cmath>
#include <cstdio>
#include <random>
template <typename T, int N> struct vec_type;
#include "threads.h"  // the prelude's order (runtime.HEADER), then the kernel module's own
#include "simd.h"
#include "cross_entropy.h"
int main() {  // worst errors of the softcap's fp64 tanh and slope (relative), against libm's fp64, in units of
  std::mt19937 g(0);  // 2^-24 (fp32's ulp at 1 over 2): the lanes' values before their one rounding to fp32
  std::uniform_real_distribution<float> wide(-60.f, 60.f), near(-1.f, 1.f), tiny(-1e-3f, 1e-3f);
  double worst_t = 0, worst_s = 0;
  int zero_slopes_below = 0, nonzero_slopes_beyond = 0;
  for (int it = 0; it < 300000; ++it) {
    float xs[16];
    for (int i = 0; i < 16; ++i) xs[i] = it % 3 == 0 ? wide(g) : it % 3 == 1 ? near(g) : tiny(g);
    tp_v16 x;
    memcpy(&x, xs, 64);
    tp_nd t[2], s[2];
    tp_ce_tanh64(&x, 1.0, t, s);
    for (int i = 0; i < 16; ++i) {
      const double ti = t[i / 8][i % 8], si = s[i / 8][i % 8], tr = tanh((double)xs[i]);
      const double sr = 1 / (cosh((double)xs[i]) * cosh((double)xs[i]));
      if (xs[i] != 0) worst_t = fmax(worst_t, fabs(ti - tr) / fabs(tr) * 16777216.0);
      if ((float)tr == (float)copysign(1.0, tr)) {  // fp32's t rounds to +-1: slope 0, as torch's fp32 composite
        nonzero_slopes_beyond += si != 0;
      } else {
        zero_slopes_below += si == 0;
        worst_s = fmax(worst_s, fabs(si - sr) / sr * 16777216.0);
      }
    }
  }
  float xs[16] = {-INFINITY, INFINITY, NAN, 0.f, 100.f, -1e-30f};
  tp_v16 x;
  memcpy(&x, xs, 64);
  tp_nd t[2], s[2];
  tp_ce_tanh64(&x, 1.0, t, s);
  printf("%.5f %.5f %d %d", worst_t, worst_s, zero_slopes_below, nonzero_slopes_beyond);
  for (int i = 0; i < 6; ++i) printf(" %g/%g", t[0][i], s[0][i]);
  printf("\n");
}
"""


def test_softcap_tanh_and_slope_against_fp64(tmp_path):
    """The packed fp64 tanh (a fitted polynomial below 1, the fp64 exp form above) and its slope ((1 - t)(1 + t)
    below 1, q (2 - q) above) against libm's fp64 over 4.8e6 inputs, built with the kernels' flags: tanh within a
    tenth of fp32's half ulp before its one rounding (the polynomial's fit), the slope within a quarter, and the
    slope 0 exactly where fp32's tanh rounds to +-1."""
    from tileport.backends.tilelang.cpu import runtime, settings

    src = tmp_path / "tanh.cpp"
    src.write_text(_TANH_HARNESS)
    here = Path(runtime.__file__).parent
    exe = tmp_path / "tanh"
    cmd = [os.environ.get("CXX", "g++"), *settings.COMPILE_FLAGS, "-std=c++17", f"-I{here}", str(src), "-o", str(exe)]
    subprocess.run(cmd, check=True, capture_output=True)
    out = subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout.split()
    worst_t, worst_s, zero_below, nonzero_beyond, special = (
        float(out[0]),
        float(out[1]),
        int(out[2]),
        int(out[3]),
        out[4:],
    )
    assert worst_t < 0.1 and worst_s < 0.25, (worst_t, worst_s)
    assert zero_below == 0 and nonzero_beyond == 0, (zero_below, nonzero_beyond)
    assert special == ["-1/0", "1/0", "nan/nan", "0/1", "1/0", "-1e-30/1"]
