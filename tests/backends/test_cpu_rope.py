"""The rope kernel modules (the torch composite and the TileLang CPU grid kernel) against the contract's formula
in float64, written here token by token: shapes (one token, GQA, partial and zero rotary width, tables shorter
than the sequence, position_ids, offsets, k None or empty), both pair layouts, strided inputs read in place, the
backward (the conjugate rotation, and autograd of the formula). The CPU kernel's fp32 has the bits of
transformers' ``q * cos + rotate_half(q) * sin``, and the same bits for any thread count and x86 ISA: no FMA in
its disassembly."""

# No `from __future__ import annotations`: it breaks T.prim_func annotations in the modules imported.
import collections
import platform
import shutil

import pytest
import torch

from tileport.backends.registry import REGISTRY
from tileport.backends.torch import rope as torch_rope

pytestmark = pytest.mark.skipif(not REGISTRY.availability("tilelang").ok, reason="tilelang backend unavailable")

DTYPES = [torch.float32, torch.bfloat16, torch.float16]
HALF_ULP = {torch.float32: 0.0, torch.bfloat16: 2.0**-8, torch.float16: 2.0**-11}  # one rounding, relative
TINY = {torch.float32: 2.0**-149, torch.bfloat16: 2.0**-133, torch.float16: 2.0**-25}  # one rounding near 0
U32 = 2.0**-24


def _cpu():
    from tileport.backends.tilelang.cpu import rope

    return rope


def _modules():
    return {"torch": torch_rope, "tilelang": _cpu()}


def golden(q, k, cos, sin, position_ids=None, offsets=None, interleaved=False, offset=0, conjugate=False):
    """The contract in float64, token by token: ((q_out, scale_q), (k_out, scale_k)), each scale the sum of
    the two products' sizes per rotated element (0 elsewhere), what the fp32 rounding errors are relative to."""
    t_ro, r2 = cos.shape

    def one(x):
        if x is None:
            return None, None
        x = x.double()
        out, scale = x.clone(), torch.zeros_like(x)
        first = torch.arange(r2) * 2 if interleaved else torch.arange(r2)
        second = first + 1 if interleaved else first + r2
        for b in range(x.shape[0]):
            for t in range(x.shape[1]):
                if position_ids is not None:
                    p = int(position_ids[b, t])
                else:
                    p = t + offset + (0 if offsets is None else int(offsets[b]))
                c = cos[p].double() if 0 <= p < t_ro else torch.zeros(r2, dtype=torch.float64)
                s = sin[p].double() if 0 <= p < t_ro else torch.zeros(r2, dtype=torch.float64)
                s = -s if conjugate else s
                x1, x2 = x[b, t][:, first], x[b, t][:, second]
                out[b, t][:, first], out[b, t][:, second] = x1 * c - x2 * s, x2 * c + x1 * s
                scale[b, t][:, first] = (x1 * c).abs() + (x2 * s).abs()
                scale[b, t][:, second] = (x2 * c).abs() + (x1 * s).abs()
        return out, scale

    return one(q), one(k)


def assert_rounded_once(out, gold, scale, x, r, dtype, what=""):
    """The rotated columns within the fp32 arithmetic's rounding (each product and the sum: 2 u32 of the
    products' sizes) plus one rounding to the output's dtype; the columns past R copied bit for bit."""
    assert out.dtype == dtype and out.shape == gold.shape, what
    err = (out[..., :r].double() - gold[..., :r]).abs()
    bound = 2.01 * U32 * scale[..., :r] + HALF_ULP[dtype] * 1.001 * gold[..., :r].abs() + TINY[dtype]
    worst = (err - bound).max().item() if err.numel() else 0.0
    assert worst <= 0, f"{what}: error past the bound by {worst}"
    assert torch.equal(out[..., r:], x[..., r:]), f"{what}: the columns past R are not a copy"


def _tables(t_ro, r2, dtype, seed=1):
    angle = 3 * torch.randn(t_ro, r2, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    return angle.cos().to(dtype), angle.sin().to(dtype)


def _heads(b, t, h, d, dtype, seed):
    return torch.randn(b, t, h, d, generator=torch.Generator().manual_seed(seed)).to(dtype)


# (B, T, Hq, Hk, D, R, T_ro, position_ids, offsets, offset): position_ids / offsets as lists (their dtype apart)
CASES = {
    "one-token": (1, 1, 1, 1, 8, 8, 1, None, None, 0),
    "gqa-partial-tail": (2, 7, 4, 2, 40, 24, 9, None, None, 0),
    "full-chunks": (1, 3, 2, 1, 128, 128, 4, None, None, 1),
    "chunks-and-tail": (2, 3, 3, 1, 100, 70, 5, None, None, 0),
    "r-zero": (2, 3, 2, 2, 16, 0, 4, None, None, 0),
    "short-table-offsets": (3, 6, 2, 1, 34, 34, 4, None, [-3, 2, 0], 1),
    "negative-offset": (1, 5, 1, 1, 32, 16, 6, None, None, -2),
    "position-ids": (2, 4, 2, 1, 48, 32, 6, [[5, 0, -1, 6], [2, 2, 100, -7]], None, 0),
    "empty-table": (1, 3, 2, 1, 20, 12, 0, None, None, 0),
    "far-offset": (2, 2, 1, 1, 16, 16, 3, None, [2**40, -(2**40)], 0),
}


def _case(name, dtype, index_dtype=torch.int64, k_kind="k"):
    B, T, Hq, Hk, D, R, t_ro, pos, offs, offset = CASES[name]
    q = _heads(B, T, Hq, D, dtype, seed=2)
    k = {"k": _heads(B, T, Hk, D, dtype, seed=3), "none": None, "empty": _heads(B, T, 0, D, dtype, seed=3)}[k_kind]
    cos, sin = _tables(t_ro, R // 2, dtype)
    pos = None if pos is None else torch.tensor(pos, dtype=index_dtype)
    offs = None if offs is None else torch.tensor(offs, dtype=index_dtype)
    return q, k, cos, sin, pos, offs, offset


def _check(module, dtype, q, k, cos, sin, pos, offs, offset, interleaved, what):
    r = 2 * cos.shape[1]
    fwd = module.forward(q, k, cos, sin, pos, offs, interleaved, offset)
    bwd = module.backward(q, k, cos, sin, pos, offs, interleaved, offset)  # q and k as the output gradients
    for out, conj in ((fwd, False), (bwd, True)):
        (gq, sq), (gk, sk) = golden(q, k, cos, sin, pos, offs, interleaved, offset, conj)
        assert_rounded_once(out[0], gq, sq, q, r, dtype, f"{what} conjugate={conj} q")
        if k is None:
            assert out[1] is None
        else:
            assert_rounded_once(out[1], gk, sk, k, r, dtype, f"{what} conjugate={conj} k")
    return fwd, bwd


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("interleaved", [False, True], ids=["halves", "interleaved"])
@pytest.mark.parametrize("name", list(CASES))
def test_both_modules_against_the_float64_formula_and_each_other(name, interleaved, dtype):
    """Forward and backward of each module within one rounding of the float64 formula; the CPU kernel has the
    bits of the torch composite (the same fp32 products and sums, rounded once)."""
    args = _case(name, dtype)
    results = {m: _check(mod, dtype, *args, interleaved, f"{m} {name}") for m, mod in _modules().items()}
    for a, b in zip(results["torch"], results["tilelang"]):
        for x, y in zip(a, b):
            assert torch.equal(x, y), f"{name}: the CPU kernel and the torch composite differ"


@pytest.mark.parametrize("index_dtype", [torch.int32, torch.int64], ids=str)
@pytest.mark.parametrize("name", ["position-ids", "short-table-offsets"])
def test_integer_inputs_of_either_width(name, index_dtype):
    args = _case(name, torch.float32, index_dtype)
    for m, mod in _modules().items():
        _check(mod, torch.float32, *args, False, f"{m} {name} {index_dtype}")


@pytest.mark.parametrize("k_kind", ["none", "empty"])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_k_none_or_empty(k_kind, dtype):
    q, k, cos, sin, pos, offs, offset = _case("gqa-partial-tail", dtype, k_kind=k_kind)
    for m, mod in _modules().items():
        fwd, bwd = _check(mod, dtype, q, k, cos, sin, pos, offs, offset, True, f"{m} k {k_kind}")
        if k is not None:
            assert fwd[1].shape == k.shape and bwd[1].shape == k.shape


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("interleaved", [False, True], ids=["halves", "interleaved"])
def test_strided_inputs_are_read_in_place_and_keep_their_layout(interleaved, dtype):
    """q and k transposed views of [B, H, T, D] tensors, cos and sin column slices of wider tables, position_ids
    a broadcast row (stride 0): the same bits as contiguous copies, outputs laid out as torch.empty_like's."""
    B, T, Hq, Hk, D, R, t_ro = 2, 5, 3, 2, 48, 40, 8
    q = _heads(B, Hq, T, D, dtype, seed=4).transpose(1, 2)
    k = _heads(B, Hk, T, D, dtype, seed=5).transpose(1, 2)
    cos_full, sin_full = _tables(t_ro, 32, dtype)
    cos, sin = cos_full[:, : R // 2], sin_full[:, : R // 2]
    pos = torch.tensor([[7, 1, 0, 3, 2]]).expand(B, T)
    assert not q.is_contiguous() and not cos.is_contiguous() and pos.stride(0) == 0
    for m, mod in _modules().items():
        fwd, _ = _check(mod, dtype, q, k, cos, sin, pos, None, 0, interleaved, f"{m} strided")
        copies = (q.contiguous(), k.contiguous(), cos.contiguous(), sin.contiguous(), pos.contiguous(), None)
        want = mod.forward(*copies, interleaved, 0)
        for got, ref, x in zip(fwd, want, (q, k)):
            assert torch.equal(got, ref), f"{m}: strided inputs give other bits than contiguous copies"
            assert got.stride() == torch.empty_like(x).stride(), f"{m}: output layout {got.stride()}"


def rotate_half(x):
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


@pytest.mark.parametrize("d", [8, 64, 100, 128])
def test_fp32_is_bit_for_bit_transformers_formula(d):
    """fp32, R = D, halves: torch.equal with ``q * cos + rotate_half(q) * sin`` in torch fp32, cos and sin
    expanded to full width (halves repeated) and gathered per token: no FMA, each product rounded."""
    B, T, Hq, Hk, t_ro = 2, 9, 4, 2, 16
    q, k = _heads(B, T, Hq, d, torch.float32, 6), _heads(B, T, Hk, d, torch.float32, 7)
    cos, sin = _tables(t_ro, d // 2, torch.float32)
    pos = torch.randint(0, t_ro, (B, T), generator=torch.Generator().manual_seed(8))
    c = torch.cat((cos, cos), -1)[pos][:, :, None]  # [B, T, 1, D]
    s = torch.cat((sin, sin), -1)[pos][:, :, None]
    q_out, k_out = _cpu().forward(q, k, cos, sin, pos, None, False, 0)
    assert torch.equal(q_out, q * c + rotate_half(q) * s)
    assert torch.equal(k_out, k * c + rotate_half(k) * s)


def test_backward_is_autograd_of_the_float64_formula():
    """dq and dk of the kernel within rounding of autograd through the float64 formula (the vector-Jacobian
    product of the rotation is the conjugate rotation; out-of-table tokens get zeros)."""
    q, k, cos, sin, pos, offs, offset = _case("short-table-offsets", torch.float32)
    gq, gk = _heads(*q.shape, torch.float32, 9), _heads(*k.shape, torch.float32, 10)
    q64, k64 = q.double().requires_grad_(), k.double().requires_grad_()
    (oq, _), (ok, _) = golden(q64, k64, cos, sin, pos, offs, True, offset)
    dq64, dk64 = torch.autograd.grad((oq * gq.double()).sum() + (ok * gk.double()).sum(), (q64, k64))
    (cq, sq), (ck, sk) = golden(gq, gk, cos, sin, pos, offs, True, offset, conjugate=True)
    torch.testing.assert_close(dq64, cq, rtol=1e-14, atol=1e-14)
    torch.testing.assert_close(dk64, ck, rtol=1e-14, atol=1e-14)
    for m, mod in _modules().items():
        dq, dk = mod.backward(gq, gk, cos, sin, pos, offs, True, offset)
        assert_rounded_once(dq, dq64, sq, gq, cos.shape[1] * 2, torch.float32, f"{m} dq")
        assert_rounded_once(dk, dk64, sk, gk, cos.shape[1] * 2, torch.float32, f"{m} dk")


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_thread_count_does_not_change_bits(dtype):
    """Tokens are cut into ranges that threads claim; each token's result is computed alone, so one, two or
    three threads (through torch's setting, and the launcher's count) give the same bits."""
    from tileport.backends.tilelang.cpu import rope
    from tileport.backends.tilelang.cpu.runtime import CACHE

    B, T, Hq, Hk, D = 2, 64, 8, 2, 64  # 81920 elements: two threads by runtime.threads_for
    q, k = _heads(B, T, Hq, D, dtype, 11), _heads(B, T, Hk, D, dtype, 12)
    cos, sin = _tables(100, 24, dtype)
    offs = torch.tensor([-5, 40])
    before = torch.get_num_threads()
    outs = []
    try:
        for n in (1, 2):
            torch.set_num_threads(n)
            outs.append(rope.forward(q, k, cos, sin, None, offs, True, 3))
    finally:
        torch.set_num_threads(before)
    kernel = CACHE.kernel("rope", rope.build, dtype, dtype, "int64", "int64")
    for n in (1, 2, 3):
        q_out, k_out = torch.empty_like(q), torch.empty_like(k)
        kernel(
            n,
            q=q,
            k=k,
            q_out=q_out,
            k_out=k_out,
            cos=cos,
            sin=sin,
            position_ids=None,
            offsets=offs,
            offset=3,
            interleaved=1,
            conjugate=0,
        )
        outs.append((q_out, k_out))
    for got in outs[1:]:
        assert torch.equal(got[0], outs[0][0]) and torch.equal(got[1], outs[0][1])


def test_launcher_refuses_tensors_that_do_not_fit_the_declaration():
    from tileport.backends.tilelang.cpu import rope
    from tileport.backends.tilelang.cpu.runtime import CACHE

    kernel = CACHE.kernel("rope", rope.build, torch.float32, torch.float32, "int64", "int64")
    q, cos = torch.randn(1, 2, 3, 8), torch.randn(4, 4)
    args = dict(
        q=q,
        k=None,
        q_out=torch.empty_like(q),
        k_out=None,
        cos=cos,
        sin=cos,
        position_ids=None,
        offsets=None,
        offset=0,
        interleaved=0,
        conjugate=0,
    )
    kernel(1, **args)
    for bad, match in [
        (dict(q_out=torch.empty(1, 2, 3, 9)), r"q_out must be a tensor of shape \(B, T, Hq, D\)"),
        (dict(sin=torch.randn(5, 4)), r"sin must be a tensor of shape \(T_ro, R2\)"),
        (dict(cos=torch.randn(4, 8)[:, ::2]), r"cos must be a tensor .* unit stride"),
        (dict(position_ids=torch.zeros(1, 2, dtype=torch.int32)), r"position_ids .* dtype \['torch.int64'\]"),
        (dict(offsets=torch.zeros(2, dtype=torch.int64)), r"offsets must be a tensor of shape \(B,\)"),
        (dict(q_out=None), r"q_out must be .*, got None"),
        (dict(k=torch.randn(1, 2, 1, 8), k_out=torch.empty(1, 2, 2, 8)), r"k_out must be a tensor of shape"),
    ]:
        with pytest.raises(ValueError, match=match):
            kernel(1, **{**args, **bad})
    kernel(1, **{**args, "k": torch.randn(1, 2, 1, 8)})  # k without k_out: its heads are skipped (has_k_out = 0)
    with pytest.raises(TypeError, match="unexpected keyword argument 'has_k'"):
        kernel(1, **args, has_k=1)  # flags come from the tensors given


X86 = platform.machine() in ("x86_64", "AMD64")
FMA = ("vfmadd", "vfmsub", "vfnmadd", "vfnmsub")


@pytest.mark.skipif(shutil.which("objdump") is None or not X86, reason="objdump and x86 mnemonics")
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_disassembly_has_packed_products_and_no_fma(dtype):
    """The build contracts a * b - c * d into FMAs (-ffp-contract=fast); pairs.h keeps each product apart, so
    the kernel holds packed multiplies, subtractions and additions and not one fused multiply-add."""
    from tileport.backends.tilelang.cpu import disasm, rope, settings
    from tileport.backends.tilelang.cpu.runtime import CACHE

    assert "-ffp-contract=fast" in settings.compile_flags()  # what the kernel must withstand
    kernel = CACHE.kernel("rope", rope.build, dtype, dtype, "int64", "int64")
    insns = disasm.function(kernel.lib._name, "rope_kernel")
    mnemonics = collections.Counter(m for _, m, _ in insns)
    assert not [m for m in mnemonics if m.startswith(FMA)], mnemonics
    width = disasm.register_of(settings.isa().lanes)
    loops = [lp for lp in disasm.innermost_loops(insns) if lp.fp_arith()]
    assert loops and all(not lp.scalar_fp() for lp in loops)
    packed = collections.Counter(m[:4] for lp in loops for m in lp.packed(width))
    assert packed["vmul"] >= 4 and packed["vsub"] and packed["vadd"], packed


@pytest.mark.slow
@pytest.mark.skipif(not X86, reason="x86 -march targets that run on any x86-64")
@pytest.mark.parametrize("arch", ["x86-64", "x86-64-v3"], ids=["sse2", "avx2"])
def test_other_isas_give_the_same_bits(arch, monkeypatch, tmp_path):
    """The 4- and 8-lane paths of pairs.h (SSE2, AVX2 registers: other splits of the interleaved pairs) run here
    and give the native build's bits: with no FMA every ISA rounds the same products and sums."""
    from tileport.backends.tilelang.cpu import settings

    args = [(dt, _case(name, dt)) for dt in DTYPES for name in ("chunks-and-tail", "short-table-offsets")]
    native = [_cpu().forward(*a[:6], inter, a[6]) for _, a in args for inter in (False, True)]
    monkeypatch.setenv(settings.ARCH_ENV, arch)
    monkeypatch.setenv("TILEPORT_CACHE_DIR", str(tmp_path))
    from tileport.backends.tilelang.cpu import rope

    kernels = {dt: rope.build(dt, dt) for dt in DTYPES}
    from tileport.backends.tilelang.cpu.runtime import compile_kernel

    built = {dt: compile_kernel(f) for dt, f in kernels.items()}
    i = 0
    for dt, (q, k, cos, sin, pos, offs, offset) in args:
        for inter in (False, True):
            q_out, k_out = torch.empty_like(q), torch.empty_like(k)
            built[dt](
                1,
                q=q,
                k=k,
                q_out=q_out,
                k_out=k_out,
                cos=cos,
                sin=sin,
                position_ids=pos,
                offsets=offs,
                offset=offset,
                interleaved=int(inter),
                conjugate=0,
            )
            assert torch.equal(q_out, native[i][0]) and torch.equal(k_out, native[i][1]), f"{arch} {dt} {inter}"
            i += 1


def _grid_kernel():
    """A grid kernel using what rope does not: a size given as an int, a float scalar, an optional integer input."""
    import tilelang.cpu.language as T

    from tileport.backends.tilelang.cpu.interface import GRID
    from tileport.backends.tilelang.cpu.runtime import compile_kernel

    N, D = T.dynamic("N"), T.dynamic("D")

    @T.prim_func
    def tp_test_grid(
        x: T.StridedTensor((N, D), (T.dynamic("x_s0", "int64"), 1), "float32"),
        y: T.StridedTensor((N, D), (T.dynamic("y_s0", "int64"), 1), "float32"),
        ab: T.StridedTensor((2,), (1,), "float32"),
        idx: T.StridedTensor((N,), (1,), "int32"),
        has_idx: T.int32,
        bias: T.float32,
        first: T.int64,
        count: T.int64,
    ):
        T.func_attr({GRID: ["N"]})
        with T.Kernel(count) as i:
            for d in T.serial(D):
                extra = T.if_then_else(has_idx != 0, T.cast(idx[first + i], "float32"), T.float32(0))
                y[first + i, d] = x[first + i, d] * ab[0] + ab[1] + bias + extra

    return compile_kernel(tp_test_grid)


def test_grid_interface_sizes_scalars_and_optional_integer_inputs():
    kernel = _grid_kernel()
    base = torch.randn(6, 9)
    x, ab, idx = base[:, 2:7], torch.tensor([2.0, 0.5]), torch.arange(6, dtype=torch.int32)
    for given, nthreads in ((None, 1), (idx, 2)):
        y = torch.empty(6, 5)
        kernel(nthreads, x=x, y=y, ab=ab, idx=given, bias=0.25)
        want = x * 2.0 + 0.5 + 0.25 + (0 if given is None else given.float()[:, None])
        torch.testing.assert_close(y, want)
    with pytest.raises(ValueError, match=r"ab must be a tensor of shape \(2,\)"):
        kernel(1, x=x, y=torch.empty(6, 5), ab=torch.ones(3), idx=None, bias=0.0)
    with pytest.raises(ValueError, match=r"idx must be a tensor of shape \(N,\) .* dtype \['torch.int32'\]"):
        kernel(1, x=x, y=torch.empty(6, 5), ab=ab, idx=torch.arange(6), bias=0.0)


def test_inputs_whose_last_dimension_is_not_unit_stride():
    """An expanded gradient (stride 0 everywhere, as autograd gives for a sum) and a table of every other column:
    the same bits as contiguous copies."""
    q, k = torch.ones(1, 1, 1, 32).expand(2, 3, 4, 32), _heads(2, 3, 1, 32, torch.float32, 13)
    cos_full, sin_full = _tables(5, 32, torch.float32)
    cos, sin = cos_full[:, ::2], sin_full[:, ::2]
    for m, mod in _modules().items():
        got = mod.backward(q, k, cos, sin, None, None, False, 1)
        want = mod.backward(q.contiguous(), k, cos.contiguous(), sin.contiguous(), None, None, False, 1)
        assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1]), m


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("interleaved", [False, True])
def test_streamed_outputs_have_the_bits_of_plain_stores(dtype, interleaved, monkeypatch):
    """Caller-provided outputs past STREAM_BYTES are written with streaming stores (no read-for-ownership of their
    lines), head by head: the same bits as the plain stores, tails and unaligned heads included (D = 80: heads
    320 bytes apart)."""
    from tileport.backends.tilelang.cpu import rope

    g = torch.Generator().manual_seed(5)
    q, k = torch.randn(2, 9, 4, 80, generator=g).to(dtype), torch.randn(2, 9, 2, 80, generator=g).to(dtype)
    cos, sin = torch.randn(12, 40, generator=g).to(dtype)[:, :27], torch.randn(12, 40, generator=g).to(dtype)[:, :27]
    plain = rope.forward(q, k, cos, sin, None, None, interleaved, 1)
    monkeypatch.setattr(rope, "STREAM_BYTES", 0)
    outs = (torch.empty_like(q), torch.empty_like(k))
    streamed = rope.forward(q, k, cos, sin, None, None, interleaved, 1, out=outs)
    assert streamed[0] is outs[0] and torch.equal(streamed[0], plain[0]) and torch.equal(streamed[1], plain[1])


@pytest.mark.skipif(shutil.which("objdump") is None or not X86, reason="objdump and x86 mnemonics")
def test_the_streaming_build_streams():
    from tileport.backends.tilelang.cpu import disasm, rope
    from tileport.backends.tilelang.cpu.runtime import CACHE

    mnemonics = {
        streaming: collections.Counter(
            m
            for _, m, _ in disasm.function(
                CACHE.kernel("rope", rope.build, torch.float32, torch.float32, "int64", "int64", streaming).lib._name,
                "rope_kernel",
            )
        )
        for streaming in (False, True)
    }
    assert not [m for m in mnemonics[False] if m.startswith("vmovnt")]
    assert [m for m in mnemonics[True] if m.startswith("vmovnt")], mnemonics[True]
