"""cross_entropy's TileLang CUDA kernels lower here without a device for every dtype, int64 and int32 targets and
every option (one kernel per dtype, bucket and options: N and C are runtime values); the Ascend (arch35) kernels
too (slow): SIMT sub-kernels between GM <-> UB copies, within the UB budget, free of ThreadSync race warnings. The
math they share (the softcap's tanh and slope, one element's gradient) is compiled for the C target through
TileLang and checked against fp64 here; the launchers' host side runs with the kernels stood in by the torch
reference (no device here)."""

import importlib
import inspect

import pytest
import torch

from tileport.backends.registry import REGISTRY

DTYPES = (torch.float16, torch.bfloat16, torch.float32)
ALL = {"target_dtype": torch.int32, "weighted": True, "smoothing": True, "capped": True}
NAMES = {"cross_entropy_fwd_grad", "cross_entropy_fwd", "cross_entropy_bwd"}


@pytest.fixture(scope="module")
def backend():
    if not REGISTRY.availability("tilelang").ok:
        pytest.skip(REGISTRY.availability("tilelang").reason)
    return REGISTRY.load("tilelang")


@pytest.fixture(scope="module")
def cuda(backend):
    from tileport.backends.tilelang.cuda import cross_entropy
    from tileport.backends.tilelang.targets import cuda_target, lower_source

    def lower(dtype, dim, **options):
        return {
            n: body(lower_source(f, cuda_target())) for n, f in cross_entropy.lowered(dtype, dim, **options).items()
        }

    return lower


def body(src: str) -> str:
    return src[src.index('extern "C" __global__') :]


@pytest.mark.parametrize("dtype", DTYPES)
def test_cuda_lowering(cuda, dtype):
    """The plain kernels: one pass for the online max and sum (one max and one sum reduction per chunk, the
    chunks' sums in fp64), the loss's log in fp64 once per row, the host's scalars as doubles; the fused
    forward's target element by an fp64 exp once per row; the backward reduces nothing (lse is given)."""
    src = cuda(dtype, 128256)
    assert set(src) == NAMES
    for name, s in src.items():
        assert f"{name}_kernel(" in s and "int C, int N" in s and "const int64_t* __restrict__ TG" in s
        assert "double scale" in s and "tanhf" not in s and "0x1.4p-1f" not in s  # no softcap without one
    fwd, fused, bwd = src["cross_entropy_fwd"], src["cross_entropy_fwd_grad"], src["cross_entropy_bwd"]
    for s in (fwd, fused):
        assert s.count("tl::MaxOp") == 1 and s.count("tl::SumOp") == 1
        assert "double s[1]" in s and s.count(" log(") == 1
        assert " W[" not in s  # no weight read without one
    assert fwd.count(" exp(") == 1 and fused.count(" exp(") == 2  # the rescale; and the target's element
    assert "* __restrict__ G" in fused and "* __restrict__ G" not in fwd  # only the fused forward writes G
    assert "AllReduce" not in bwd and bwd.count(" exp(") == 1 and "expf" in bwd


def test_cuda_every_option(cuda):
    """int32 targets, weights, smoothing (sum(w z) and W: two more sums per chunk) and softcap (the polynomial's
    split at 0.625 and exp, never tanhf); the backward sums the weights once (W) when it smooths."""
    src = cuda(torch.bfloat16, 4097, **ALL)
    fwd, bwd = src["cross_entropy_fwd_grad"], src["cross_entropy_bwd"]
    for s in src.values():
        assert "const int* __restrict__ TG" in s and "const bfloat16_t* __restrict__ W" in s
        assert "0x1.4p-1f" in s and "tanhf" not in s
    assert fwd.count("tl::SumOp") == 3 and fwd.count("tl::MaxOp") == 1
    assert bwd.count("tl::SumOp") == 1 and "tl::MaxOp" not in bwd
    weighted_only = cuda(torch.bfloat16, 4097, weighted=True)
    assert weighted_only["cross_entropy_bwd"].count("AllReduce") == 0  # W unused without smoothing


def test_cuda_one_kernel_per_bucket(backend):
    from tileport.backends.tilelang.cuda import cross_entropy

    a, b = (cross_entropy.lowered(torch.float16, d, **ALL) for d in (4097, 262144))
    assert all(a[n].script() == b[n].script() for n in NAMES)  # C is a runtime value: one kernel past 2048


@pytest.mark.slow
def test_cuda_builds_cubins_with_every_option(backend, tmp_path):
    """nvcc (where present) builds every kernel with weights, smoothing and softcap for sm_90."""
    import shutil

    if shutil.which("nvcc") is None:
        pytest.skip("nvcc not on PATH: the cubin step needs the CUDA toolkit")
    from tileport.lower import lower

    options = {k: v for k, v in ALL.items() if k != "target_dtype"}
    done = lower("cross_entropy", "cuda", torch.bfloat16, 128256, tmp_path, **options)
    assert len(done.binaries) == 3
    assert all((tmp_path / f"{n}_bfloat16_D128256.cubin").read_bytes()[:4] == b"\x7fELF" for n in NAMES)


@pytest.mark.slow
@pytest.mark.parametrize(
    "dtype,dim,options,only",
    [
        (torch.float16, 100, {}, ("cross_entropy_fwd_grad", "cross_entropy_bwd")),
        (torch.bfloat16, 5000, ALL, ("cross_entropy_fwd_grad",)),
    ],
    ids=["fp16-100-plain", "bf16-5000-every-option"],
)
def test_ascend_lowering(backend, dtype, dim, options, only, capfd):
    from tileport.backends.tilelang.ascend._common import UB_BUDGET
    from tileport.backends.tilelang.targets import ON_CHIP_BUDGET

    kernels = backend.device_kernels("cross_entropy", "ascend", dtype, dim, only=only, **options)
    out, err = capfd.readouterr()
    assert "ThreadSync" not in out + err, "lowering reports a data race: " + (out + err)[-400:]
    assert set(kernels) == set(only)
    for name, (s, used) in kernels.items():
        assert f"{name}_kernel(" in s and "int32_t C, int32_t N" in s  # one kernel for any N and C in the bucket
        assert "asc_copy_gm2ub_align" in s and "asc_copy_ub2gm_align" in s and "asc_vf_call" in s  # GM <-> UB, SIMT
        assert "tanhf" not in s and "expf" in s
        assert 0 < used <= min(2 * UB_BUDGET, ON_CHIP_BUDGET["ascend"]), f"{name}: {used} B"
    if dim > 4096:  # chunked rows: the pipelined loops' two UB stages
        assert "version_counter" in kernels["cross_entropy_fwd_grad"][0]


def test_ascend_modules_follow_the_cuda_contract(backend):
    from tileport.backends.tilelang.ascend import cross_entropy as ascend
    from tileport.backends.tilelang.cuda import cross_entropy as cuda
    from tileport.backends.torch import cross_entropy as reference

    for fn in ("lowered", "forward", "backward"):
        assert inspect.signature(getattr(ascend, fn)) == inspect.signature(getattr(cuda, fn)), fn
    for fn in ("forward", "backward"):  # the contract's argument names, as the torch reference takes them
        assert list(inspect.signature(getattr(cuda, fn)).parameters) == list(
            inspect.signature(getattr(reference, fn)).parameters
        )


class _Stand:
    """A target's kernel cache with the kernels stood in by the torch reference: records what was asked and
    writes the outputs the kernels would (their argument order)."""

    def __init__(self):
        self.asked = []

    def kernel(self, name, build, *args):
        from tileport.backends.torch import cross_entropy as ref

        self.asked.append((name, *args))
        weighted, _, capped = args[3:6]

        def fwd(x, t, w, g, loss, zl, lse, ignore, eps, scale, cap, a, b):
            got = ref.forward(
                x,
                t,
                w if weighted else None,
                ignore,
                eps,
                scale,
                cap if capped else 0.0,
                grad=g if args[6] else None,
                scales=(a, b),
            )
            for out, v in zip((loss, zl, lse), got):
                out.copy_(v)

        def bwd(x, t, w, dl, dz, lse, dx, ignore, eps, scale, cap):
            dx.copy_(
                ref.backward(dl, dz, x, t, w if weighted else None, lse, ignore, eps, scale, cap if capped else 0.0)
            )

        return fwd if name.startswith("cross_entropy_fwd") else bwd


@pytest.mark.parametrize("target", ["cuda", "ascend"])
def test_launchers_host_side(backend, target, monkeypatch):
    """The kernel picked by (bucket, dtypes, options, fused); the gradient written in place into input (also a
    non-contiguous one, through a contiguous copy) or into a strided grad; dz_loss None as zeros; the results
    the reference's."""
    from tileport.backends.torch import cross_entropy as ref

    module = importlib.import_module(f"tileport.backends.tilelang.{target}.cross_entropy")
    stand = _Stand()
    monkeypatch.setattr(module.RUNNER, "kernel", stand.kernel)  # the launchers hold the target's runner
    g = torch.Generator().manual_seed(0)
    x = torch.randn(6, 40, generator=g)
    t = torch.randint(0, 40, (6,), generator=g, dtype=torch.int32)
    t[2] = -100
    w = torch.rand(40, generator=g) + 0.5
    args = (-100, 0.1, 1e-3, 5.0)
    want_grad = torch.empty_like(x)
    want = ref.forward(x, t, w, *args, grad=want_grad, scales=(0.5, 0.25))

    got = module.forward(x, t, w, *args)
    assert all(torch.equal(p, q) for p, q in zip(got, want))
    assert stand.asked[-1] == (
        "cross_entropy_fwd",
        module.bucket(40),
        torch.float32,
        torch.int32,
        True,
        True,
        True,
        False,
    )
    y = x.clone()
    got = module.forward(y, t, w, *args, grad=y, scales=(0.5, 0.25))
    assert torch.equal(y, want_grad) and stand.asked[-1][0] == "cross_entropy_fwd_grad"
    yt = x.t().contiguous().t()  # non-contiguous input, written in place
    module.forward(yt, t, w, *args, grad=yt, scales=(0.5, 0.25))
    assert torch.equal(yt, want_grad)
    buf = torch.zeros(6, 50)
    module.forward(x, t, w, *args, grad=buf[:, :40], scales=(0.5, 0.25))
    assert torch.equal(buf[:, :40], want_grad) and torch.all(buf[:, 40:] == 0)

    dl = torch.tensor(0.5).expand(6)
    dx = module.backward(dl, None, x, t, None, want[2], -100, 0.0, 0.0, 0.0)
    assert torch.equal(dx, ref.backward(dl, torch.zeros(6), x, t, None, want[2], -100, 0.0, 0.0, 0.0))
    assert stand.asked[-1] == ("cross_entropy_bwd", module.bucket(40), torch.float32, torch.int32, False, False, False)
    with pytest.raises(TypeError, match="fp16, bf16 or fp32 logits, got torch.float64"):
        module.forward(x.double(), t, None, *args)


def test_the_shared_math_in_fp32(backend):
    """The expressions both device targets emit, compiled for the C target through TileLang (its C codegen has
    no fabs: |v| as max(v, -v) for this check): cap * tanh(x / cap) within 4 ulps, its slope within 64 (exp's
    argument 2|x| / cap carries x / cap's rounding), where a normal fp32; one element's gradient within the slope's
    error."""
    import tilelang
    import tilelang.language as T

    from tileport.backends.tilelang.cuda import cross_entropy as ce

    class C:
        exp, if_then_else = staticmethod(T.exp), staticmethod(T.if_then_else)
        abs = staticmethod(lambda v: T.max(v, -v))

    n = T.dynamic("n")

    @T.prim_func
    def probe(
        X: T.Tensor((n,), "float32"),
        Z: T.Tensor((n,), "float32"),
        S: T.Tensor((n,), "float32"),
        G: T.Tensor((n,), "float32"),
        cap: T.float32,
    ):
        with T.Kernel(1):
            for i in T.serial(n):
                Z[i] = ce.softcapped(C, X[i], cap, lambda z, s: z)
                S[i] = ce.softcapped(C, X[i], cap, lambda z, s: s)
                G[i] = ce.gradient(
                    C,
                    True,
                    True,
                    X[i],
                    cap,
                    T.float32(0.75),
                    T.float32(2.0),
                    T.float32(0.5),
                    T.float32(0.01),
                    i == 7,
                    T.float32(0.3),
                    T.float32(1.0),
                )

    kernel = tilelang.compile(probe, target="c", execution_backend="cython")
    x = torch.linspace(-300.0, 300.0, 60001)
    z, s, grad = (torch.empty_like(x) for _ in range(3))
    kernel(x, z, s, grad, 5.0)
    u = x.double() / 5.0
    tz, ts = 5.0 * torch.tanh(u), 1.0 / torch.cosh(u) ** 2
    assert ((z - tz).abs() / tz.abs().clamp_min(1e-30)).max() <= 4 * 2.0**-24
    normal = ts > 1e-37
    assert ((s.double() - ts).abs() / ts)[normal].max() <= 64 * 2.0**-24
    assert (s.double() - ts)[~normal].abs().max() <= 2.0**-126
    want = (0.75 * torch.exp((tz - 2.0) - 0.5) - 0.01) * ts
    want[7] -= 0.3 * ts[7]
    assert ((grad.double() - want).abs() <= 64 * 2.0**-24 * (want.abs() + 0.01 * ts) + 2.0**-126).all()  # the slope's
