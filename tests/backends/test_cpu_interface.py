"""The CPU kernel interface derived from a prim_func: launch by name, the roles the norm family needs
(rows with any stride, per-row vectors, broadcast vectors, scalars, partial outputs reduced across rows), the
row-map and row-sum helpers with several inputs, and clear errors."""

# No `from __future__ import annotations`: it breaks T.prim_func annotations.
import functools

import pytest
import tilelang.cpu.language as T
import torch

from tileport.backends.tilelang.cpu.interface import PARTIAL_BLOCK_ROWS
from tileport.backends.tilelang.cpu.rowwise import F32, Io, M, partial, per_row, row_map, row_sum, splat
from tileport.backends.tilelang.cpu.runtime import compile_kernel


def build_scale_and_grad(x, g):
    """y = x * w * a, s[row] = sum(x * g * w), dw = sum over rows of x * g (a weight-gradient shape)."""
    X, G = Io(x), Io(g)

    @T.prim_func
    def tp_test_scale(x: X.rows, g: G.rows, w: X.vector, a: T.float32, y: X.rows, s: per_row(), dw: partial()):
        with T.Kernel(M) as row:
            r = T.alloc_local((1,), T.float32)
            row_map(lambda xv, wv: xv * wv * splat(a), [(X, x), (X, w)], [(X, y)], row)
            row_sum(r, 0, lambda xv, gv, wv: xv * gv * wv, [(X, x), (G, g), (X, w)], row)
            s[row] = r[0]
            row_map(lambda xv, gv: xv * gv, [(X, x), (G, g)], [(F32, dw)], row)

    return tp_test_scale


@functools.cache  # the test's own cache: the process-wide kernel cache (kernel_cache_info) stays untouched
def _kernel(dtype):
    return compile_kernel(build_scale_and_grad(dtype, dtype))


def _inputs(m, d, dtype, seed=0):
    gen = torch.Generator().manual_seed(seed)
    x, g, w = (torch.randn(*s, generator=gen).to(dtype) for s in ((m, d), (m, d), (d,)))
    return x, g, w


def _run(dtype, x, g, w, a=0.5, nthreads=1):
    m, d = x.shape
    y, s, dw = torch.empty(m, d, dtype=dtype), torch.empty(m), torch.empty(d)
    _kernel(dtype)(nthreads, x=x, g=g, w=w, a=a, y=y, s=s, dw=dw)
    return y, s, dw


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("d", [1, 15, 16, 33, 100, 1000])
def test_every_role_against_float64(dtype, d):
    x, g, w = _inputs(70, d, dtype)
    y, s, dw = _run(dtype, x, g, w)
    xd, gd, wd = x.double(), g.double(), w.double()
    tol = {torch.float32: 1e-5, torch.bfloat16: 1e-2, torch.float16: 2e-3}[dtype]
    torch.testing.assert_close(y.double(), xd * wd * 0.5, rtol=tol, atol=tol)
    torch.testing.assert_close(s.double(), (xd * gd * wd).sum(-1), rtol=1e-5, atol=1e-5 * d**0.5)
    torch.testing.assert_close(dw.double(), (xd * gd).sum(0), rtol=1e-5, atol=1e-5 * 70**0.5)


def test_partials_have_the_same_bits_for_any_thread_count():
    x, g, w = _inputs(PARTIAL_BLOCK_ROWS * 37 + 5, 300, torch.float32, seed=1)  # many blocks and a ragged one
    one = _run(torch.float32, x, g, w, nthreads=1)
    two = _run(torch.float32, x, g, w, nthreads=2)
    for a, b in zip(one, two):
        assert torch.equal(a, b)
    assert (one[2] != 0).all()


@pytest.mark.parametrize("nthreads", [1, 2])  # one thread runs the rows without an OpenMP region
def test_strided_rows_read_in_place_match_contiguous_copies(nthreads):
    base = torch.randn(40, 260)
    x, g = base[::2, 3:203], base[1::2, 50:250]  # row strides 520, unit-stride columns
    w = torch.randn(200)
    strided = _run(torch.float32, x, g, w, nthreads=nthreads)
    copied = _run(torch.float32, x.contiguous(), g.contiguous(), w, nthreads=3 - nthreads)
    for a, b in zip(strided, copied):
        assert torch.equal(a, b)


def test_launch_names_a_missing_or_unknown_argument():
    x, g, w = _inputs(4, 8, torch.float32)
    y, s, dw = torch.empty(4, 8), torch.empty(4), torch.empty(8)
    with pytest.raises(TypeError, match=r"tp_test_scale\(\) got an unexpected keyword argument 'alpha'"):
        _kernel(torch.float32)(1, x=x, g=g, w=w, a=1.0, alpha=1.0, y=y, s=s, dw=dw)
    with pytest.raises(TypeError, match=r"tp_test_scale\(\) missing 1 required keyword-only argument: 'a'"):
        _kernel(torch.float32)(1, x=x, g=g, w=w, y=y, s=s, dw=dw)
    with pytest.raises(TypeError, match=r"takes from 0 to 1 positional argument"):
        _kernel(torch.float32)(1, x, g, w, 1.0, y, s, dw)  # positional tensors are refused: names only


@pytest.mark.parametrize(
    "bad,match",
    [
        (dict(w=torch.randn(9)), r"w must be a broadcast tensor of shape \(8,\)"),
        (dict(s=torch.empty(5)), r"s must be a per_row tensor of shape \(4,\)"),
        (dict(g=torch.randn(4, 8).half()), r"g must be a rows tensor .* dtype \['torch.float32'\]"),
        (dict(y=torch.empty(8, 4).t()), r"y must be a rows tensor .* unit-stride"),
        (dict(s=torch.empty(8)[::2]), r"s must be a per_row tensor of shape \(4,\) with unit-stride"),
        (dict(w=torch.randn(16)[::2]), r"w must be a broadcast tensor of shape \(8,\) with unit-stride"),
        (dict(x=torch.randn(2, 2, 8)), r"x must be a rows tensor \(M, D\), got shape \(2, 2, 8\)"),
    ],
)
def test_wrong_tensors_raise_before_the_call(bad, match):
    x, g, w = _inputs(4, 8, torch.float32)
    args = dict(x=x, g=g, w=w, a=1.0, y=torch.empty(4, 8), s=torch.empty(4), dw=torch.empty(8))
    args.update(bad)
    with pytest.raises(ValueError, match=match):
        _kernel(torch.float32)(1, **args)


def test_driver_passes_arguments_by_name_in_the_generated_order():
    k = _kernel(torch.float32)
    proto = [n for _, n in k.iface.prototype]
    assert sorted(proto) == sorted(["x", "g", "w", "a", "y", "s", "dw", "M", "D"])
    src = k.source()
    call = src[src.index("tp_test_scale_kernel(", src.index("tp_test_scale_drive")) :].split(";")[0]
    for name in ("x", "g", "y"):
        assert f"{name} + lo * ld_{name}" in call
    assert "s + lo" in call and "part_dw + b * 2 * D" in call


def test_unsupported_buffer_shape_is_refused():
    @T.prim_func
    def tp_test_bad(x: T.Tensor((M, 4), "float32")):
        with T.Kernel(M) as row:
            x[row, 0] = T.float32(1)

    with pytest.raises(ValueError, match=r"unsupported buffer shape \('M', 4\)"):
        compile_kernel(tp_test_bad)


TAIL_DTYPES = [torch.float32, torch.float16, torch.bfloat16]


@pytest.mark.parametrize("dtype", TAIL_DTYPES, ids=str)
def test_every_tail_length_reads_and_writes_only_its_row(dtype, golden):
    """D = 1 ... 40 covers every tail length (0-15 columns past the 16-lane blocks, and a second block's):
    each row's forward and backward have the bits it has alone (a tail read past D would pull in the next
    row), nothing past the last row is written (the output sits before sentinels), and the forward meets the
    golden (dual benchmark)."""
    import tileport
    from tileport.precision import assert_dual_benchmark

    g = torch.Generator().manual_seed(0)
    for D in range(1, 41):
        x = (3 * torch.randn(5, D, generator=g)).to(dtype)
        dy = torch.randn(5, D, generator=g).to(dtype)
        w = (1 + 0.3 * torch.randn(D, generator=g)).to(dtype)
        buf = torch.full((5 * D + 16,), 7.0, dtype=dtype)
        y, rstd = tileport.rms_norm_fwd(x, w, backend="tilelang", out=(buf[: 5 * D].view(5, D), torch.empty(5)))
        assert torch.equal(buf[5 * D :], torch.full((16,), 7.0, dtype=dtype)), f"D = {D}: written past the output"
        dx, dw = tileport.rms_norm_bwd(x, rstd, dy, w, backend="tilelang")
        s = tileport.softmax(x, backend="tilelang")
        for i in range(5):
            yi, ri = tileport.rms_norm_fwd(x[i : i + 1], w, backend="tilelang")
            dxi, _ = tileport.rms_norm_bwd(x[i : i + 1], ri, dy[i : i + 1], w, backend="tilelang")
            assert torch.equal(y[i : i + 1], yi) and torch.equal(dx[i : i + 1], dxi), f"D = {D}, row {i}"
            assert torch.equal(s[i : i + 1], tileport.softmax(x[i : i + 1], backend="tilelang")), f"D = {D}, row {i}"
        gold = golden("rms_norm", x=x, weight=w)
        assert_dual_benchmark(y, gold["y"], tileport.rms_norm_fwd(x, w, backend="torch")[0], dtype=dtype)
        assert_dual_benchmark(s, torch.softmax(x.double(), -1), torch.softmax(x.float(), -1).to(dtype), dtype=dtype)
