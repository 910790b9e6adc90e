"""vLLM's concatenated forms ``silu_and_mul(x)`` and ``gelu_and_mul(x, approximate)``: x [..., 2F] (gate first,
up second), y [..., F]. The halves are views of x (no copy where x has stride 1 in its last dimension); y is the
two-tensor operator's on them, bit for bit, and within the standard of the float64 golden; dx is (dgate, dup)
side by side, against autograd of the golden; non-contiguous x; errors naming what is wrong."""

import math

import pytest
import torch

import tileport
from tileport.backends.registry import available_backends
from tileport.backends.tilelang.cpu import swiglu as cpu_swiglu
from tileport.precision import assert_dual_benchmark

F = torch.nn.functional
EPS32 = torch.finfo(torch.float32).eps
FORMS = [("silu_and_mul", None), ("gelu_and_mul", "none"), ("gelu_and_mul", "tanh")]
BACKENDS = [b.name for b in available_backends() if b.available and "swiglu" in b.serves and not b.interpreted]


def _concat(form, approximate, x, backend, casting="fp32"):
    if form == "silu_and_mul":
        return tileport.silu_and_mul(x, casting=casting, backend=backend)
    return tileport.gelu_and_mul(x, approximate, casting=casting, backend=backend)


def _pair(form, approximate, gate, up, backend, casting="fp32"):
    if form == "silu_and_mul":
        return tileport.swiglu(gate, up, casting=casting, backend=backend)
    return tileport.geglu(gate, up, approximate, casting=casting, backend=backend)


def _golden(approximate, x):
    """act(gate) * up in float64, in forms that do not cancel (gelu tanh as g sigmoid(2u))."""
    x = x.double()
    g, u = x.chunk(2, -1)
    if approximate is None:
        a = g * torch.sigmoid(g)
    elif approximate == "none":
        a = 0.5 * g * torch.erfc(-g / math.sqrt(2))
    else:
        a = g * torch.sigmoid(2 * math.sqrt(2 / math.pi) * (g + 0.044715 * g**3))
    return a * u


def _kappa(approximate, g):
    """How much the fp32 math's argument rounding is amplified, relatively, at g (tests/ops/test_swiglu.py)."""
    g = g.double()
    if approximate is None:
        return 1 + g.abs()
    if approximate == "none":
        return 1 + g * g
    return 1 + (2 * math.sqrt(2 / math.pi) * (g + 0.044715 * g**3)).abs()


@pytest.mark.parametrize("form,approximate", FORMS)
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("casting", ["fp32", "eager"])
def test_forward_is_the_pair_on_the_halves(form, approximate, backend, dtype, casting):
    """y [..., F] is the two-tensor operator on x's halves, bit for bit (from a kernel, also on contiguous copies of
    them: its result does not depend on the layout, where torch's own elementwise loops do); casting="fp32"
    passes the dual benchmark against the float64 golden."""
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(3, 5, 2 * 37, generator=gen).mul(3).to(dtype)
    y = _concat(form, approximate, x, backend, casting)
    assert y.shape == (3, 5, 37) and y.dtype == dtype
    assert torch.equal(y, _pair(form, approximate, x[..., :37], x[..., 37:], backend, casting))
    gate, up = x[..., :37].contiguous(), x[..., 37:].contiguous()
    if backend != "torch":
        assert torch.equal(y, _pair(form, approximate, gate, up, backend, casting))
    if casting == "fp32":
        act = F.silu if approximate is None else (lambda t: F.gelu(t, approximate=approximate))
        bench = (act(gate.float()) * up.float()).to(dtype)
        assert_dual_benchmark(y, _golden(approximate, x), bench, dtype=dtype)


@pytest.mark.parametrize("form,approximate", FORMS)
@pytest.mark.parametrize("backend", BACKENDS)
def test_backward_against_golden(form, approximate, backend):
    """dx = (dgate, dup) side by side: bit for bit the pair's backward on the halves; against autograd of the
    float64 golden, dgate within 4 eps of |dy * up| (|act'| <= 1.13) and dup within 8 eps, times the fp32 math's
    conditioning kappa(gate), of |dy * act(gate)|."""
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(4, 2 * 21, generator=gen).mul(2).requires_grad_()
    dy = torch.randn(4, 21, generator=gen)
    _concat(form, approximate, x, backend).backward(dy)
    assert x.grad.shape == x.shape and x.grad.dtype == torch.float32
    gate, up = x.detach()[:, :21], x.detach()[:, 21:]
    pair = (
        tileport.swiglu_bwd(dy, gate, up, backend=backend)
        if form == "silu_and_mul"
        else tileport.geglu_bwd(dy, gate, up, approximate=approximate, backend=backend)
    )
    assert torch.equal(x.grad, torch.cat(pair, -1))
    x64 = x.detach().double().requires_grad_()
    _golden(approximate, x64).backward(dy.double())
    dup64 = x64.grad[:, 21:]
    bound = torch.cat([4 * EPS32 * (dy * up).double().abs(), 8 * EPS32 * _kappa(approximate, gate) * dup64.abs()], -1)
    err = (x.grad.double() - x64.grad).abs()
    assert bool((err <= bound + 1e-44).all()), float((err / (bound + 1e-44)).max())


@pytest.mark.parametrize("form,approximate", FORMS)
@pytest.mark.parametrize("backend", BACKENDS)
def test_non_contiguous_x(form, approximate, backend):
    """A row-strided x (a slice of wider rows), a transposed x (its last dimension strided), a 1-dim x and rows
    with a step give what their contiguous copies give, forward and backward (bit for bit from a kernel)."""
    gen = torch.Generator().manual_seed(2)
    wide = torch.randn(6, 50, generator=gen)
    for x in (wide[:, 3:43], torch.randn(40, 6, generator=gen).t(), wide[0, :40], wide[::2, :40]):
        xa, xb = x.clone().requires_grad_(), x.contiguous().requires_grad_()
        ya, yb = _concat(form, approximate, xa, backend), _concat(form, approximate, xb, backend)
        dy = torch.randn(ya.shape, generator=gen)
        ya.backward(dy)
        yb.backward(dy)
        if backend == "torch":  # torch's elementwise loops take other paths (scalar tails) for other layouts
            torch.testing.assert_close(ya, yb, rtol=4 * EPS32, atol=0)
            torch.testing.assert_close(xa.grad, xb.grad, rtol=4 * EPS32, atol=1e-44)
        else:
            assert torch.equal(ya, yb) and torch.equal(xa.grad, xb.grad)


def test_the_cpu_kernels_read_the_halves_in_place():
    """The halves of a row-strided x reach the TileLang CPU kernel as (M, F) views of x's memory, no copy."""
    x = torch.randn(2, 3, 2 * 24)
    gate, up = x[..., :24], x[..., 24:]
    for half in (gate, up):
        rows = cpu_swiglu.rows_of(half)
        assert rows.shape == (6, 24) and rows.stride() == (48, 1) and rows.data_ptr() == half.data_ptr()
    assert rows.untyped_storage().data_ptr() == x.untyped_storage().data_ptr()


@pytest.mark.parametrize("form,approximate", FORMS)
def test_empty_and_half_less(form, approximate):
    assert _concat(form, approximate, torch.empty(0, 8), None).shape == (0, 4)
    assert _concat(form, approximate, torch.empty(3, 0), None).shape == (3, 0)


def test_defaults_and_grad_modes():
    """gelu_and_mul's default approximation is vLLM's "none"; no graph under no_grad."""
    x = torch.randn(3, 10).requires_grad_()
    assert torch.equal(tileport.gelu_and_mul(x), tileport.geglu(x[:, :5], x[:, 5:], "none"))
    with torch.no_grad():
        assert tileport.silu_and_mul(x).grad_fn is None
    assert tileport.silu_and_mul(x).grad_fn is not None


@pytest.mark.parametrize("fn", [tileport.silu_and_mul, tileport.gelu_and_mul])
def test_bad_input_names_the_problem(fn):
    name = fn.__name__
    with pytest.raises(TypeError, match=f"{name}: x must be a torch.Tensor"):
        fn([1.0, 2.0])
    with pytest.raises(TypeError, match=f"{name}: x must have a floating dtype.*int64"):
        fn(torch.ones(2, 4, dtype=torch.int64))
    with pytest.raises(ValueError, match=f"{name}: x must be .*got a 0-dim tensor"):
        fn(torch.tensor(1.0))
    with pytest.raises(ValueError, match=rf"{name}: x's last dimension .* must be even, got 7 \(x of shape \(2, 7\)\)"):
        fn(torch.randn(2, 7))
    with pytest.raises(ValueError, match="casting must be one of"):
        fn(torch.randn(2, 8), casting="fp16")


@pytest.mark.parametrize("form,approximate", FORMS)
def test_torch_compile_fullgraph(form, approximate):
    """The concatenated forms trace whole under torch.compile (the interface's custom ops), forward and backward,
    with eager's results."""
    fn = torch.compile(lambda t: _concat(form, approximate, t, None), fullgraph=True, backend="aot_eager")
    x = torch.randn(4, 2 * 33, generator=torch.Generator().manual_seed(5))
    xa, xb = x.clone().requires_grad_(), x.clone().requires_grad_()
    ya, yb = fn(xa), _concat(form, approximate, xb, None)
    assert torch.equal(ya, yb)
    ya.sum().backward()
    yb.sum().backward()
    assert torch.equal(xa.grad, xb.grad)
