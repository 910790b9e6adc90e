"""The gated activations swiglu and geglu, declared by named dimensions: against a float64 golden written here
(both castings), casting="eager" bit for bit with torch's ``act(gate) * up`` in the input dtype, gradients
against torch.autograd in float64, derivatives at large |gate| not cancelled, 0-d, empty and non-contiguous
inputs, and the shape check naming both tensors. Every backend that serves them here runs the numerics."""

import math

import pytest
import torch

import tileport
from tileport.backends.registry import available_backends


def _backends(op):
    return [b.name for b in available_backends() if b.available and op in b.serves and not b.interpreted]


CASES = [("swiglu", None)] + [("geglu", a) for a in ("none", "tanh")]
PARAMS = [(op, a, b) for op, a in CASES for b in _backends(op)]


def _golden_act(g, approximate):
    """act(g) in float64, written out: silu, gelu by erfc, gelu by tanh."""
    g = g.double()
    if approximate is None:
        return g / (1 + torch.exp(-g))
    if approximate == "none":
        return 0.5 * g * torch.erfc(-g / math.sqrt(2))
    return 0.5 * g * (1 + torch.tanh(math.sqrt(2 / math.pi) * (g + 0.044715 * g**3)))


def _call(op, approximate, gate, up, backend, casting="fp32"):
    if op == "swiglu":
        return tileport.swiglu(gate, up, casting=casting, backend=backend)
    return tileport.geglu(gate, up, approximate, casting=casting, backend=backend)


def _torch_eager(approximate, gate, up):
    f = torch.nn.functional
    act = f.silu(gate) if approximate is None else f.gelu(gate, approximate=approximate)
    return act * up


@pytest.mark.parametrize("op,approximate,backend", PARAMS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_against_golden(op, approximate, backend, dtype):
    gen = torch.Generator().manual_seed(0)
    gate, up = (torch.randn(5, 3, 70, generator=gen).mul(3).to(dtype) for _ in range(2))
    golden = _golden_act(gate, approximate) * up.double()
    y = _call(op, approximate, gate, up, backend)
    assert y.dtype == dtype and y.shape == gate.shape
    # fp32 casting rounds once: within one rounding of the golden, elementwise (plus the fp32 math's few ulp)
    rel = torch.finfo(dtype).eps + 16 * torch.finfo(torch.float32).eps
    err = (y.double() - golden).abs()
    assert bool((err <= rel * golden.abs() + 1e-37).all())
    eager = _call(op, approximate, gate, up, backend, casting="eager")
    act = _golden_act(gate, approximate).to(dtype).double()
    close = (eager.double() - act * up.double()).abs() <= 2 * rel * (act * up.double()).abs() + 1e-37
    assert close.float().mean() > 0.99  # the activation rounded first: rare elements cross a rounding boundary


@pytest.mark.parametrize("op,approximate,backend", PARAMS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_eager_bit_for_bit_with_torch(op, approximate, backend, dtype):
    """casting="eager" is transformers' ``act(gate) * up`` in the input dtype: bit for bit from the torch backend;
    a kernel whose fp32 activation differs from torch's by an ulp may round it across a bf16 boundary, so there
    it matches all but rare elements, within one ulp of the dtype (fp32: of the product)."""
    gen = torch.Generator().manual_seed(1)
    gate, up = (torch.randn(64, 129, generator=gen).to(dtype) for _ in range(2))
    y, ref = _call(op, approximate, gate, up, backend, casting="eager"), _torch_eager(approximate, gate, up)
    if backend == "torch":
        assert torch.equal(y, ref)
        return
    differ = y != ref
    assert differ.float().mean() < 0.02
    assert bool(((y.float() - ref.float()).abs()[differ] <= 2 * torch.finfo(dtype).eps * ref.float().abs()[differ]).all())


@pytest.mark.parametrize("op,approximate,backend", PARAMS)
@pytest.mark.parametrize("casting", ["fp32", "eager"])
def test_gradients_against_autograd(op, approximate, backend, casting):
    gen = torch.Generator().manual_seed(2)
    gate, up, dy = (torch.randn(4, 33, generator=gen).mul(2) for _ in range(3))
    gate[0, :6] = torch.tensor([-60.0, 60.0, -20.0, 20.0, -8.0, 8.0])
    g64, u64 = gate.double().requires_grad_(), up.double().requires_grad_()
    (_golden_act(g64, approximate) * u64).backward(dy.double())
    g, u = gate.clone().requires_grad_(), up.clone().requires_grad_()
    _call(op, approximate, g, u, backend, casting).backward(dy)
    assert g.grad.dtype == torch.float32 and u.grad.dtype == torch.float32
    tol = 4 * torch.finfo(torch.float32).eps
    assert bool(((g.grad.double() - g64.grad).abs() <= tol * (g64.grad.abs() + (dy.double() * u64.detach()).abs() * 1e-6) + 1e-37).all())
    assert bool(((u.grad.double() - u64.grad).abs() <= tol * u64.grad.abs() + 1e-37).all())


@pytest.mark.parametrize("op,approximate,backend", PARAMS)
def test_large_gate_derivatives_not_cancelled(op, approximate, backend):
    """At gate = -8 (gelu none: Phi(-8) ~ 6e-16, the fp32 ``1 + erf`` gives 0) the derivative keeps its bits."""
    v = torch.tensor([-60.0, -20.0, -8.0, -5.0, 8.0, 60.0])
    dg, _ = (tileport.swiglu_bwd(torch.ones(6), v, torch.ones(6), casting="fp32", backend=backend) if op == "swiglu"
             else tileport.geglu_bwd(torch.ones(6), v, torch.ones(6), approximate=approximate, backend=backend))
    g64 = v.double().requires_grad_()
    _golden_act(g64, approximate).sum().backward()
    want = g64.grad.float().double()
    got = dg.double()
    assert bool(((got - want).abs() <= 8 * torch.finfo(torch.float32).eps * want.abs() + 1e-44).all()), (got, want)


@pytest.mark.parametrize("op,approximate,backend", PARAMS)
def test_zero_dim_empty_and_non_contiguous(op, approximate, backend):
    g, u = torch.tensor(1.5), torch.tensor(-2.0)
    y = _call(op, approximate, g, u, backend)
    assert y.shape == () and torch.allclose(y.double(), _golden_act(g, approximate) * u.double())
    e = _call(op, approximate, torch.empty(0, 7), torch.empty(0, 7), backend)
    assert e.shape == (0, 7)
    base = torch.randn(9, 40, generator=torch.Generator().manual_seed(3))
    gate, up = base.t()[:, ::2], base[:, :20].t().contiguous().t()  # strided, transposed
    y = _call(op, approximate, gate, up, backend)
    assert torch.equal(y, _call(op, approximate, gate.contiguous(), up.contiguous(), backend))


@pytest.mark.parametrize("op", ["swiglu", "geglu"])
def test_shapes_differing_raise_naming_both(op):
    with pytest.raises(ValueError, match="up.*gate"):
        getattr(tileport, op)(torch.randn(3, 4), torch.randn(3, 5))
