"""cross_entropy's Triton row kernels (``tileport/backends/triton/cross_entropy.py``) under the CPU interpreter,
called through the kernel module's contract, against a float64 golden written here: ``F.cross_entropy``
(reduction "none") of the fp64 logits (capped by fp64 tanh), the z-loss as scale * logsumexp^2, and the
gradients by fp64 autograd. Rows in several blocks (the block width lowered where a test says so), ignored rows,
weights, smoothing, softcap, z-loss, the in-place gradient, int32 targets; the Ascend forms (compensated fp32
sums) too. Small shapes: the interpreter costs milliseconds per program."""

import os
import subprocess
import sys
import textwrap

import pytest
import torch
import torch.nn.functional as F

pytest.importorskip("triton", reason="triton is an optional extra: pip install tileport[triton]")
from tileport.backends.registry import REGISTRY

if not REGISTRY.availability("triton").ok:
    pytest.skip(REGISTRY.availability("triton").reason, allow_module_level=True)

from tileport.backends.triton import ascend, common
from tileport.backends.triton import cross_entropy as ce

DTYPES = (torch.float32, torch.float16, torch.bfloat16)
ULP = {torch.float32: 2.0**-23, torch.float16: 2.0**-10, torch.bfloat16: 2.0**-7}
U32 = 2.0**-24
IGNORE = -100
OPTIONS = {  # name: (weight, label_smoothing, lse_square_scale, softcap)
    "plain": (False, 0.0, 0.0, 0.0),
    "weight": (True, 0.0, 0.0, 0.0),
    "smoothing": (False, 0.1, 0.0, 0.0),
    "weight+smoothing": (True, 0.25, 0.0, 0.0),
    "softcap": (False, 0.0, 0.0, 5.0),
    "z-loss": (False, 0.0, 1e-2, 0.0),
    "all": (True, 0.1, 1e-3, 3.0),
}


def case(n, c, dtype, scale=3.0, seed=0, ignored=(1,), weight=False):
    gen = torch.Generator().manual_seed(seed)
    x = (torch.randn(n, c, generator=gen, dtype=torch.float64) * scale).to(dtype)
    t = torch.randint(0, c, (n,), generator=gen)
    for r in ignored:
        if r < n:
            t[r] = IGNORE
    w = (torch.rand(c, generator=gen, dtype=torch.float64) * 2 + 0.1).to(dtype) if weight else None
    return x, t, w


def golden(x, t, w, eps, scale, cap, a=1.0, b=1.0):
    """(loss, z_loss, lse, a * dloss + b * dz_loss) in fp64; a, b floats or [N] tensors. The cap's slope as
    1 / cosh^2: autograd's 1 - tanh^2 is 0 in fp64 past |x| / cap ~ 19, where it is 4 exp(-2 |x| / cap)."""
    xd = x.double()
    z = (cap * torch.tanh(xd / cap) if cap else xd).requires_grad_()
    lse = torch.logsumexp(z, 1)
    valid = t != IGNORE
    loss = F.cross_entropy(
        z,
        t.long(),
        weight=None if w is None else w.double(),
        ignore_index=IGNORE,
        reduction="none",
        label_smoothing=eps,
    )
    zl = torch.where(valid, scale * lse * lse, 0.0)
    (g,) = torch.autograd.grad((a * loss).sum() + (b * zl).sum(), z)
    if cap:
        g = g / torch.cosh(xd / cap) ** 2
    return loss.detach(), zl.detach(), lse.detach(), g


def bound(want, ulps, floor):
    return ulps * want.abs() + floor


def check_stats(got, want, x, t, w, cap):
    """loss, z_loss and lse to fp32's rounding of the terms they are made of: the row's largest |z| (the max
    and z_t enter the loss), weighted by the largest weight."""
    loss, zl, lse = got
    wl, wz, wlse = want
    assert loss.dtype == zl.dtype == lse.dtype == torch.float32 and loss.shape == (x.shape[0],)
    zmax = x.double().abs().amax(1) if not cap else torch.full((x.shape[0],), float(cap), dtype=torch.float64)
    wmax = 1.0 if w is None else w.double().abs().max().item()
    terms = 8 * U32 * (wlse.abs() + zmax + 1) * wmax
    for name, g, ref, tol in (
        ("lse", lse, wlse, 8 * U32 * (wlse.abs() + zmax + 1)),
        ("loss", loss, wl, terms),
        ("z_loss", zl, wz, 16 * U32 * wz.abs()),
    ):
        err = (g.double() - ref).abs()
        bad = err > tol + 1e-30
        assert not bad.any(), f"{name}: {int(bad.sum())} off, worst {err.max():.3g} (want {ref[bad][0]:.6g})"
    valid = t != IGNORE
    assert torch.all(loss[~valid] == 0) and torch.all(zl[~valid] == 0)


def check_grad(g, want, dtype, ulps=2.0, rel_floor=2e-6):
    """The gradient rounded once to dtype (``ulps`` of it), plus fp32's error in p = exp(z - lse): relative to
    the row's largest gradient."""
    assert g.dtype == dtype and g.shape == want.shape
    floor = rel_floor * want.abs().amax(1, keepdim=True) + 1e-30
    err = (g.double() - want).abs()
    bad = err > bound(want, ulps * ULP[dtype], floor)
    assert not bad.any(), f"grad: {int(bad.sum())} off, worst {err[bad].max():.3g} at want {want[bad][0]:.3g}"


@pytest.fixture
def narrow(monkeypatch):
    """Blocks of ``width`` columns: many blocks per row from a few hundred classes (the online max and sum)."""

    def set_width(width):
        monkeypatch.setattr(common, "MAX_BLOCK_D", width)

    return set_width


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("c", [1, 7, 100, 1000, 9000])
def test_forward_and_fused_grad(dtype, c):
    """C = 9000: three blocks of the widest 4096."""
    x, t, _ = case(5, c, dtype)
    g = torch.full_like(x, float("nan"))
    got = ce.forward(x, t, None, IGNORE, 0.0, 0.0, 0.0, grad=g, scales=(0.5, 0.0))
    *want, wg = golden(x, t, None, 0.0, 0.0, 0.0, a=0.5)
    check_stats(got, want, x, t, None, 0.0)
    check_grad(g, wg, dtype)
    if c == 1:  # one class: the loss is 0 and so is the gradient
        assert torch.all(got[0] == 0) and torch.all(g == 0)


@pytest.mark.parametrize("dtype", (torch.float32, torch.bfloat16))
@pytest.mark.parametrize("option", list(OPTIONS))
def test_options_in_many_blocks(narrow, dtype, option):
    """Weights, smoothing, softcap and z-loss, alone and together, the rows in five blocks of 64 columns."""
    narrow(64)
    weight, eps, scale, cap = OPTIONS[option]
    x, t, w = case(6, 300, dtype, weight=weight, ignored=(2, 5))
    g = torch.empty_like(x)
    got = ce.forward(x, t, w, IGNORE, eps, scale, cap, grad=g, scales=(0.25, 0.5))
    *want, wg = golden(x, t, w, eps, scale, cap, a=0.25, b=0.5)
    check_stats(got, want, x, t, w, cap)
    check_grad(g, wg, dtype)
    bare = ce.forward(x, t, w, IGNORE, eps, scale, cap)  # without grad: the same statistics, bit for bit
    assert all(torch.equal(p, q) for p, q in zip(bare, got))


@pytest.mark.parametrize("dtype", DTYPES)
def test_in_place_grad(dtype):
    """grad = input: each element read before it is written; the same bits as a separate buffer."""
    _, eps, scale, cap = OPTIONS["all"]
    x, t, w = case(7, 500, dtype, weight=True)
    g = torch.empty_like(x)
    want = ce.forward(x, t, w, IGNORE, eps, scale, cap, grad=g, scales=(0.3, 0.7))
    y = x.clone()
    got = ce.forward(y, t, w, IGNORE, eps, scale, cap, grad=y, scales=(0.3, 0.7))
    assert all(torch.equal(p, q) for p, q in zip(got, want)) and torch.equal(y, g)
    check_grad(y, golden(x, t, w, eps, scale, cap, a=0.3, b=0.7)[3], dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("option", ["plain", "weight+smoothing", "all"])
def test_backward(narrow, dtype, option):
    """dinput from the input and the forward's lse, per-row dloss and dz_loss (None: no z-loss term)."""
    narrow(128)
    weight, eps, scale, cap = OPTIONS[option]
    x, t, w = case(6, 400, dtype, weight=weight, ignored=(0, 3))
    gen = torch.Generator().manual_seed(1)
    dl, dz = torch.randn(6, generator=gen), torch.randn(6, generator=gen)
    _, _, lse = ce.forward(x, t, w, IGNORE, eps, scale, cap)
    for dzz in (dz, None):
        dx = ce.backward(dl, dzz, x, t, w, lse, IGNORE, eps, scale, cap)
        want = golden(x, t, w, eps, scale, cap, a=dl.double(), b=0.0 if dzz is None else dz.double())[3]
        assert dx.is_contiguous()
        check_grad(dx, want, dtype, rel_floor=4e-6)
        assert torch.all(dx[t == IGNORE] == 0)


def test_backward_takes_an_expanded_dloss():
    """autograd's gradient of a sum is a stride-0 expansion: read as such."""
    x, t, _ = case(4, 50, torch.float32)
    _, _, lse = ce.forward(x, t, None, IGNORE, 0.0, 0.0, 0.0)
    dl = torch.tensor(0.75).expand(4)
    dx = ce.backward(dl, None, x, t, None, lse, IGNORE, 0.0, 0.0, 0.0)
    assert torch.equal(dx, ce.backward(dl.contiguous(), None, x, t, None, lse, IGNORE, 0.0, 0.0, 0.0))
    check_grad(dx, golden(x, t, None, 0.0, 0.0, 0.0, a=0.75)[3], torch.float32)


def test_int32_targets_as_int64():
    _, eps, scale, cap = OPTIONS["all"]
    x, t, w = case(5, 200, torch.float16, weight=True)
    g64, g32 = torch.empty_like(x), torch.empty_like(x)
    a = ce.forward(x, t, w, IGNORE, eps, scale, cap, grad=g64)
    b = ce.forward(x, t.int(), w, IGNORE, eps, scale, cap, grad=g32)
    assert all(torch.equal(p, q) for p, q in zip(a, b)) and torch.equal(g64, g32)
    _, _, lse = a
    assert torch.equal(
        ce.backward(torch.ones(5), None, x, t.int(), w, lse, IGNORE, eps, scale, cap),
        ce.backward(torch.ones(5), None, x, t, w, lse, IGNORE, eps, scale, cap),
    )


def test_ignored_rows_and_other_ignore_index():
    """An ignored row: loss and z-loss 0, its lse still computed, its gradient zeros (every element written:
    the buffer starts as NaN); ignore_index need not be negative."""
    x, t, _ = case(4, 30, torch.float32, ignored=())
    t[1] = t[3] = 7
    g = torch.full_like(x, float("nan"))
    loss, zl, lse = ce.forward(x, t, None, 7, 0.1, 1e-2, 0.0, grad=g)
    assert loss[1] == loss[3] == zl[1] == zl[3] == 0 and torch.all(g[[1, 3]] == 0) and not g.isnan().any()
    assert torch.allclose(lse.double(), torch.logsumexp(x.double(), 1), rtol=1e-6)
    assert loss[0] > 0 and loss[2] > 0


@pytest.mark.parametrize("order", ["ascending", "descending"])
def test_online_max_across_blocks(narrow, order):
    """The running max grows in every block (ascending logits) or never after the first (descending): the
    rescaled sum is the same logsumexp either way."""
    narrow(32)
    row = torch.linspace(-40.0, 40.0, 333)
    x = torch.stack([row, row * 0.5, row * 2.0]) if order == "ascending" else torch.stack([row.flip(0)] * 3)
    t = torch.tensor([0, 332, 100])
    g = torch.empty_like(x)
    got = ce.forward(x, t, None, IGNORE, 0.1, 1e-3, 0.0, grad=g)
    *want, wg = golden(x, t, None, 0.1, 1e-3, 0.0)
    check_stats(got, want, x, t, None, 0.0)
    check_grad(g, wg, torch.float32, rel_floor=1e-5)


def test_rows_in_blocks_and_views():
    """130 rows: several rows per program and a partial last block; the logits and the gradient as views
    with a row stride past C, targets strided."""
    big = case(130, 90, torch.float32, ignored=(0, 64, 129))[0]
    x = torch.cat([big, big], 1)[:, :77]
    tt = torch.randint(0, 77, (130, 2))
    t = tt[:, 0]
    t[[0, 64, 129]] = IGNORE
    out = torch.zeros(130, 100)
    g = out[:, :77]
    got = ce.forward(x, t, None, IGNORE, 0.0, 0.0, 2.0, grad=g)
    *want, wg = golden(x, t, None, 0.0, 0.0, 2.0)
    check_stats(got, want, x, t, None, 2.0)
    check_grad(g, wg, torch.float32)
    assert torch.all(out[:, 77:] == 0)  # nothing written past the view's columns


def test_bf16_logits_of_large_magnitude():
    """bf16 logits at 1e4..6e4: finite; the loss to fp32's rounding of itself (it is formed from (max - z_t) and
    log(sum), never from an lse rounded at 6e4, 0.004 apart), with and without smoothing; lse rounded once."""
    gen = torch.Generator().manual_seed(3)
    x = (1e4 + 5e4 * torch.rand(4, 700, generator=gen, dtype=torch.float64)).to(torch.bfloat16)
    x[:, 5] = 6e4  # near-ties at the top
    x[:, 6] = 5.99e4
    t = torch.tensor([5, 6, 0, IGNORE])
    for eps in (0.0, 0.1):
        g = torch.empty_like(x)
        loss, zl, lse = ce.forward(x, t, None, IGNORE, eps, 1e-4, 0.0, grad=g)
        wl, wz, wlse, wg = golden(x, t, None, eps, 1e-4, 0.0)
        assert torch.isfinite(loss).all() and torch.isfinite(lse).all() and torch.isfinite(g.float()).all()
        assert ((loss.double() - wl).abs() <= 2 * U32 * wl.abs() + 1e-7).all(), (loss.double() - wl).abs()
        assert ((lse.double() - wlse).abs() <= U32 * wlse.abs()).all()
        assert ((zl.double() - wz).abs() <= 4 * U32 * wz.abs()).all()
        check_grad(g, wg, torch.bfloat16)


def test_softcap_tails():
    """|x| / cap up to 60: the cap's tanh saturates without nan, its slope to 0, and the loss and gradient
    stay exact (the slope from r (2 - r), not 1 - tanh^2)."""
    x = torch.linspace(-300.0, 300.0, 603).reshape(3, 201)
    t = torch.tensor([0, 100, 200])
    g = torch.empty_like(x)
    got = ce.forward(x, t, None, IGNORE, 0.0, 0.0, 5.0, grad=g)
    *want, wg = golden(x, t, None, 0.0, 0.0, 5.0)
    check_stats(got, want, x, t, None, 5.0)
    check_grad(g, wg, torch.float32, ulps=16.0, rel_floor=1e-6)


def test_the_ascend_forms(monkeypatch):
    """$TILEPORT_TRITON_ASCEND: the chip's grid and blocks and compensated fp32 sums (no fp64), measured
    here against the same golden."""
    monkeypatch.setenv(ascend.EMULATE, "ascend-a2")
    assert not common.wide(torch.device("cpu"))
    _, eps, scale, cap = OPTIONS["all"]
    x, t, w = case(45, 5000, torch.float32, weight=True, ignored=(3, 44))
    g = torch.empty_like(x)
    got = ce.forward(x, t, w, IGNORE, eps, scale, cap, grad=g, scales=(0.5, 0.5))
    *want, wg = golden(x, t, w, eps, scale, cap, a=0.5, b=0.5)
    check_stats(got, want, x, t, w, cap)
    check_grad(g, wg, torch.float32)


def test_non_finite_logits_as_the_reference():
    """Rows holding +inf (lse +inf), nan, some -inf, only -inf: the loss, z-loss, lse and the gradient's nan rows
    as the torch reference's (the standard's rule for non-finite values: the benchmark's), no z-loss at scale 0."""
    from tileport.backends.torch import cross_entropy as ref

    x = torch.randn(5, 300, generator=torch.Generator().manual_seed(0))
    x[0, 7] = x[4, 3] = float("inf")
    x[1, 9] = float("nan")
    x[2, :50] = x[3] = float("-inf")
    t = torch.tensor([1, 2, 60, 5, 3])
    for eps, scale in ((0.0, 0.0), (0.1, 1e-3)):
        g, gr = torch.empty_like(x), torch.empty_like(x)
        got = ce.forward(x, t, None, IGNORE, eps, scale, 0.0, grad=g)
        want = ref.forward(x, t, None, IGNORE, eps, scale, 0.0, grad=gr)
        for a, b in zip(got, want):
            assert torch.equal(a.isnan(), b.isnan()) and torch.equal(a.isinf(), b.isinf()), (a, b)
            assert torch.equal(a[a.isinf()], b[b.isinf()]) and torch.allclose(a[a.isfinite()], b[b.isfinite()])
        assert torch.equal(g.isnan().any(1), gr.isnan().any(1)) and torch.allclose(g[2], gr[2], atol=1e-7)


def test_softcap_of_infinite_logits_is_the_cap():
    """softcap(+-inf) = +-cap with slope 0 (torch's cap * tanh(x / cap)): the loss and gradient finite where the
    reference's are. The quotient's fma correction gave inf - inf = nan there (verify's fp16 cases whose logits
    overflowed)."""
    from tileport.backends.torch import cross_entropy as ref

    x = torch.randn(3, 40, generator=torch.Generator().manual_seed(1)) * 4
    x[0, 5], x[0, 9], x[1, 2] = float("inf"), float("-inf"), 7e4
    t = torch.tensor([5, 2, 0])
    for dtype in (torch.float32, torch.float16):
        xd = x.to(dtype)
        g, gr = torch.empty_like(xd), torch.empty_like(xd)
        got = ce.forward(xd, t, None, IGNORE, 0.1, 1e-4, 30.0, grad=g, scales=(1.0, 1.0))
        want = ref.forward(xd, t, None, IGNORE, 0.1, 1e-4, 30.0, grad=gr, scales=(1.0, 1.0))
        for a, b in zip(got, want):
            assert a.isfinite().all() and torch.allclose(a, b, rtol=1e-5, atol=1e-5), (dtype, a, b)
        assert g.isfinite().all() and torch.allclose(g.float(), gr.float(), rtol=1e-2, atol=1e-3), dtype


def test_exp_reduced():
    """The softmax's exp on a GPU and Ascend (their ``tl.exp`` rounds x log2(e) and loses |x| / 2 ulps): within
    one ulp of exp over fp32's whole range, subnormal results kept, nan, inf and -inf through."""
    import triton
    import triton.language as tl

    @triton.jit
    def probe(X, Y, N, BLOCK: tl.constexpr):
        offs = tl.arange(0, BLOCK)
        tl.store(Y + offs, ce.exp_reduced(tl.load(X + offs, mask=offs < N)), mask=offs < N)

    x = torch.cat([torch.linspace(-110.0, 89.0, 65533), torch.tensor([float("nan"), float("inf"), float("-inf")])])
    y = torch.empty_like(x)
    with common.launch_context():
        probe[(1,)](x, y, x.numel(), BLOCK=65536)
    want = torch.exp(x[:-3].double())
    normal = (want > 2.0**-126) & (want < 3e38)
    assert ((y[:-3].double() - want).abs() / want)[normal].max() <= 2.0**-23
    assert (y[:-3].double() - want)[want <= 2.0**-126].abs().max() <= 2.0**-149
    assert y[-3].isnan() and y[-2] == float("inf") and y[-1] == 0


def test_fp64_is_refused_by_name():
    x, t, _ = case(2, 10, torch.float64)
    with pytest.raises(TypeError, match="fp16, bf16 or fp32 logits, got torch.float64"):
        ce.forward(x, t, None, IGNORE, 0.0, 0.0, 0.0)


GPU_BUILD = textwrap.dedent("""
    import os, sys
    os.environ.pop("TRITON_INTERPRET", None)
    import torch, triton
    import triton.runtime.jit as jit
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
    from tileport.backends.triton import cross_entropy as ce, lowering

    found = []
    def record(self, *args, grid=None, warmup=False, **kwargs):
        values = dict(zip(self.arg_names, args)) | kwargs
        consts = {p.name: values[p.name] for p in self.params if p.is_constexpr}
        sig = {p.name: lowering._type(values[p.name]) for p in self.params if not p.is_constexpr}
        found.append((self, sig, consts))
    jit.JITFunction.run = record  # captured, not run: no GPU here
    for dtype, c, opts in ((torch.bfloat16, 128256, (0.1, 1e-4, 30.0)), (torch.float32, 100, (0.0, 0.0, 0.0))):
        x, t = torch.randn(8, c).to(dtype), torch.randint(0, c, (8,), dtype=torch.int32)
        w = torch.rand(c).to(dtype)
        ce.forward(x, t, w, -100, *opts, grad=x, scales=(0.5, 0.5))
        ce.backward(torch.ones(8), torch.ones(8), x, t, w, torch.zeros(8), -100, *opts)
    for fn, sig, consts in found:
        k = triton.compile(ASTSource(fn=fn, signature=sig, constexprs=consts), target=GPUTarget("cuda", 90, 32))
        print(fn.fn.__name__, consts["BLOCK_M"], consts["BLOCK_D"], len(k.asm["cubin"]))
""")


@pytest.mark.slow
def test_the_kernels_build_for_a_gpu():
    """The interpreter runs code Triton's compiler refuses (a name carried through a loop with a new shape did):
    every option's forward (in-place gradient) and backward built to an sm_90 cubin, without a GPU (Triton's own
    ptxas), in a process without the interpreter."""
    pytest.importorskip("triton.backends.nvidia", reason="this Triton has no CUDA backend")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    run = subprocess.run(
        [sys.executable, "-c", GPU_BUILD], capture_output=True, text=True, env=env, timeout=600, check=False
    )
    if run.returncode != 0 and "ptxas" in run.stderr and "not found" in run.stderr.lower():
        pytest.skip("no ptxas with this Triton")
    assert run.returncode == 0, run.stderr[-2000:]
    built = [line.split() for line in run.stdout.splitlines()]
    assert [b[0] for b in built] == ["_fwd_kernel", "_bwd_kernel"] * 2 and all(int(b[3]) > 0 for b in built)
    assert built[0][1:3] == ["1", "4096"]  # a 128k row: one row per program, walked in 4096-wide blocks
