"""swiglu's and geglu's Triton kernels (``tileport/backends/triton/{swiglu,geglu}.py``) under the CPU interpreter,
called through the kernel modules' interface, against a float64 golden written here (gelu by erfc, the tanh form
as x * sigmoid(2u): fp64's own 1 + erf cancels too); casting "eager" against ``F.silu(gate) * up`` in the input dtype
(its backward: the contract's, dgate rounded once). Small shapes: the interpreter costs milliseconds per program."""

import math

import pytest
import torch
import torch.nn.functional as F

pytest.importorskip("triton", reason="triton is an optional extra: pip install tileport[triton]")
from tileport.backends.registry import REGISTRY

if not REGISTRY.availability("triton").ok:
    pytest.skip(REGISTRY.availability("triton").reason, allow_module_level=True)

from tileport.backends.triton import geglu, swiglu

DTYPES = (torch.float32, torch.float16, torch.bfloat16)
ACTS = ("silu", "none", "tanh")  # swiglu, geglu exact, geglu tanh
ULP = {torch.float32: 2.0**-23, torch.float16: 2.0**-10, torch.bfloat16: 2.0**-7}
SUBNORMAL = {torch.float32: 2.0**-149, torch.float16: 2.0**-24, torch.bfloat16: 2.0**-133}  # the spacing at 0


def act(x, kind):
    """The activation of fp64 x."""
    if kind == "silu":
        return x / (1 + torch.exp(-x))
    if kind == "none":
        return 0.5 * x * torch.special.erfc(-x / math.sqrt(2))
    u = math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)
    return x / (1 + torch.exp(-2 * u))


def act_grad(x, kind):
    xx = x.detach().clone().requires_grad_()
    act(xx, kind).sum().backward()
    return xx.grad


def fwd(kind, gate, up, casting="fp32"):
    if kind == "silu":
        return swiglu.forward(gate, up, casting)
    return geglu.forward(gate, up, kind, casting)


def bwd(kind, dy, gate, up, casting="fp32"):
    if kind == "silu":
        return swiglu.backward(dy, gate, up, casting)
    return geglu.backward(dy, gate, up, kind, casting)


def fp32_ulps(kind, gate, dtype):
    """The kernels' fp32 error bound in ulps: 16, times 1 + 2|u| for the tanh form (its exp(-2u) carries u's
    rounding relative); a low dtype's own rounding hides it (1 ulp)."""
    if dtype != torch.float32:
        return 1.0
    if kind != "tanh":
        return 16.0
    x = gate.double()
    return 16.0 * (1 + 2 * (math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)).abs())


def torch_act(kind, x):
    return F.silu(x) if kind == "silu" else F.gelu(x, approximate=kind)


def inputs(shape, dtype, scale=3.0, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return tuple((torch.randn(shape, generator=gen, dtype=torch.float64) * s).to(dtype) for s in (scale, 1.0, 1.0))


def close(got, want, dtype, ulps=4.0, floor=1e-30):
    """got within ``ulps`` of dtype's rounding of want (relative), or ``floor`` (and the dtype's spacing at 0)."""
    err = (got.double() - want).abs()
    tol = ulps * ULP[dtype] * want.abs() + max(floor, SUBNORMAL[dtype])
    bad = err > tol
    assert not bad.any(), f"{int(bad.sum())} off, worst {err[bad].max():.3g} at want {want[bad][0]:.3g}"


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("kind", ACTS)
@pytest.mark.parametrize("shape", [(5, 37), (2, 3, 129), ()])
def test_forward_fp32_casting(kind, dtype, shape):
    g, u, _ = inputs(shape, dtype)
    y = fwd(kind, g, u)
    assert y.shape == g.shape and y.dtype == dtype and y.is_contiguous()
    close(y, act(g.double(), kind) * u.double(), dtype, ulps=fp32_ulps(kind, g, dtype))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("kind", ACTS)
def test_backward_fp32_casting(kind, dtype):
    g, u, dy = inputs((4, 65), dtype)
    dg, du = bwd(kind, dy, g, u)
    gd, ud, dyd = g.double(), u.double(), dy.double()
    assert dg.dtype == du.dtype == dtype and dg.shape == du.shape == g.shape
    # dgate's fp32 math rounds dy * up * act' in three steps: near act's root (x ~ -1.28 / -0.75) it is absolute
    close(
        dg,
        dyd * ud * act_grad(gd, kind),
        dtype,
        ulps=fp32_ulps(kind, g, dtype),
        floor=4e-7 * (dyd * ud).abs().max().item(),
    )
    close(du, dyd * act(gd, kind), dtype, ulps=fp32_ulps(kind, g, dtype))


@pytest.mark.parametrize("kind", ACTS)
def test_large_gate_tails(kind):
    """|gate| up to 14: the negative tail (gelu ~ 1e-44, silu ~ -1e-5) is kept relative to a few ulps where the
    value is normal, and nothing cancels in the derivatives."""
    g = torch.linspace(-14, 14, 2001)
    one = torch.ones_like(g)
    want = act(g.double(), kind)
    y = fwd(kind, g, one)
    normal = want.abs() > 1e-30
    rel = ((y.double() - want).abs() / want.abs())[normal].max().item()
    limit = 2000.0 if kind == "tanh" else 16.0  # the tanh form's exp(-2u) amplifies u's fp32 rounding by |2u|
    assert rel < limit * 2.0**-24, rel / 2.0**-24
    dg, _ = bwd(kind, one, g, one)
    close(dg, act_grad(g.double(), kind), torch.float32, ulps=16.0 if kind != "tanh" else 4000.0, floor=4e-7)


@pytest.mark.parametrize("dtype", (torch.float16, torch.bfloat16))
@pytest.mark.parametrize("kind", ACTS)
def test_eager_rounds_the_activation(kind, dtype):
    """eager: the activation rounded to the dtype, then the product rounded (the fp32 casting's y with up = 1 is
    that rounded activation); and torch's ``act(gate) * up`` in the dtype agrees to the odd last bit."""
    g, u, _ = inputs((3, 77), dtype)
    y = fwd(kind, g, u, "eager")
    a = fwd(kind, g, torch.ones_like(g))
    assert torch.equal(y, (a.float() * u.float()).to(dtype))
    ref = torch_act(kind, g) * u
    if kind == "silu":
        diff = (y != ref).float().mean().item()
        assert diff <= 0.02, diff
    close(y, act(g.double(), kind).to(dtype).double() * u.double(), dtype, ulps=1.0)


def test_eager_fp32_matches_torch_silu():
    """fp32 eager is the fp32 casting (no rounding to add) and torch's ``F.silu(gate) * up`` to its exp's ulp:
    torch's vectorized exp and the interpreter's (numpy's) differ in the last bit for about a third of inputs, so
    bit for bit holds where the exps agree, and within 2 ulps everywhere."""
    g, u, _ = inputs((8, 64), torch.float32)
    y = fwd("silu", g, u, "eager")
    assert torch.equal(y, fwd("silu", g, u, "fp32"))
    ref = F.silu(g) * u
    err = (y - ref).abs() / ref.abs().clamp_min(1e-30)
    assert err.max().item() <= 2 * 2.0**-23


@pytest.mark.parametrize("dtype", (torch.float16, torch.bfloat16))
@pytest.mark.parametrize("kind", ACTS)
def test_eager_backward_is_the_contract(kind, dtype):
    """eager backward (the contract, as the CPU kernels and the torch reference): dup = dy * round(act(gate)), the
    product's own factor; dgate = dy * up * act'(gate) rounded once, the fp32 casting's dgate (autograd of
    ``act(gate) * up`` in the dtype rounds dy * up first: the verify benchmark is the contract's, so it is not
    emulated); within 2 ulps of that autograd."""
    g, u, dy = inputs((3, 50), dtype)
    dg, du = bwd(kind, dy, g, u, "eager")
    a = fwd(kind, g, torch.ones_like(g))
    assert torch.equal(du, (dy.float() * a.float()).to(dtype))
    assert torch.equal(dg, bwd(kind, dy, g, u, "fp32")[0])
    gg, uu = g.clone().requires_grad_(), u.clone().requires_grad_()
    (torch_act(kind, gg) * uu).backward(dy)
    assert (dg.float() - gg.grad.float()).abs().max() <= 2 * ULP[dtype] * gg.grad.float().abs().max()


@pytest.mark.parametrize("kind", ACTS)
def test_non_contiguous_and_0d(kind):
    g, u, dy = inputs((6, 40), torch.float32)
    gt, dyt = g.t(), dy.t()
    ut = u.t()
    y = fwd(kind, gt, ut)
    assert y.is_contiguous() and y.shape == gt.shape
    assert torch.equal(y, fwd(kind, gt.contiguous(), ut.contiguous()))
    dg, du = bwd(kind, dyt, gt, ut)
    dgc, duc = bwd(kind, dyt.contiguous(), gt.contiguous(), ut.contiguous())
    assert torch.equal(dg, dgc) and torch.equal(du, duc)
    s = fwd(kind, torch.tensor(-2.5), torch.tensor(3.0))
    assert s.shape == () and abs(s.item() - act(torch.tensor(-2.5, dtype=torch.float64), kind).item() * 3) < 1e-6


def test_geglu_rejects_an_unknown_approximation():
    g = torch.ones(3)
    with pytest.raises(ValueError, match="approximate"):
        geglu.forward(g, g, "erf", "fp32")
