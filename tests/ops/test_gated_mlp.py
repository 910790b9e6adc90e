"""SwiGLUMLP and GEGLUMLP as drop-ins for transformers' LlamaMLP and GemmaMLP: a state dict of the torch module
loads as it is (the same parameter names and shapes) and gives its outputs: bit for bit from the torch backend,
and from the kernels where the activation is (silu in bf16/fp16, tests/ops/test_swiglu.py); elsewhere (fp32 from a
kernel's own exp; 16-bit gelu, where torch's ``1 + erf`` / ``1 + tanh`` cancels) within the project's dual benchmark
against the float64 golden, torch's module as the benchmark. Gradients of x and of every parameter, likewise in
fp32; in bf16/fp16 by RMSE (the standard's L0 ratio, 2): there x's gradient is the sum of two matmuls each rounded
to the dtype, and where they cancel, either module's per-element relative error is an accident of which bits
reach the sum (one seed: ours 22 and torch's 0.99 at an element whose golden is 5e-6 beside terms of 0.25; ours,
whose dgate is rounded once where autograd rounds dy * up first, has the smaller RMSE)."""

import math

import pytest
import torch

import tileport
from tileport.backends.registry import available_backends
from tileport.precision import assert_dual_benchmark
from tileport.precision.metrics import compare

F = torch.nn.functional
BACKENDS = [b.name for b in available_backends() if b.available and "swiglu" in b.serves and not b.interpreted]
KINDS = [("swiglu", None), ("geglu", "tanh"), ("geglu", "none")]


class TorchMLP(torch.nn.Module):
    """transformers' LlamaMLP / GemmaMLP, written out: ``down_proj(act_fn(gate_proj(x)) * up_proj(x))``."""

    def __init__(self, hidden, intermediate, bias, act):
        super().__init__()
        self.gate_proj = torch.nn.Linear(hidden, intermediate, bias=bias)
        self.up_proj = torch.nn.Linear(hidden, intermediate, bias=bias)
        self.down_proj = torch.nn.Linear(intermediate, hidden, bias=bias)
        self.act_fn = act

    def forward(self, x):
        return self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x))


def _act(approximate):
    return F.silu if approximate is None else (lambda t: F.gelu(t, approximate=approximate))


def _golden_act(approximate):
    """The activation in float64 without cancellation (gelu tanh as g sigmoid(2u))."""
    if approximate is None:
        return lambda g: g * torch.sigmoid(g)
    if approximate == "none":
        return lambda g: 0.5 * g * torch.erfc(-g / math.sqrt(2))
    return lambda g: g * torch.sigmoid(2 * math.sqrt(2 / math.pi) * (g + 0.044715 * g**3))


def _ours(op, approximate, hidden, intermediate, bias, backend, casting="eager"):
    if op == "swiglu":
        return tileport.SwiGLUMLP(hidden, intermediate, bias, casting=casting, backend=backend)
    return tileport.GEGLUMLP(hidden, intermediate, bias, approximate, casting=casting, backend=backend)


def _run(module, x, dy):
    """(output, x's gradient, the parameters' gradients by name) of one forward and backward."""
    x = x.clone().requires_grad_()
    y = module(x)
    y.backward(dy)
    grads = {n: p.grad.clone() for n, p in module.named_parameters()}
    module.zero_grad(set_to_none=True)
    return y.detach(), x.grad, grads


def _bit_for_bit(op, backend, dtype):
    """Where eager casting's output is torch's bits (tests/ops/test_swiglu.py states why)."""
    return backend == "torch" or (op == "swiglu" and dtype != torch.float32)


@pytest.mark.parametrize("op,approximate", KINDS)
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("bias", [False, True])
def test_state_dict_drop_in(op, approximate, backend, dtype, bias):
    torch.manual_seed(0)
    ref = TorchMLP(64, 176, bias, _act(approximate)).to(dtype)
    ours = _ours(op, approximate, 64, 176, bias, backend).to(dtype)
    assert ours.load_state_dict(ref.state_dict(), strict=True) is not None
    assert sorted(ours.state_dict()) == sorted(ref.state_dict())
    x = torch.randn(3, 41, 64).mul(2).to(dtype)
    dy = torch.randn(3, 41, 64).to(dtype)
    y, dx, grads = _run(ours, x, dy)
    y_ref, dx_ref, grads_ref = _run(ref, x, dy)
    if _bit_for_bit(op, backend, dtype):
        assert torch.equal(y, y_ref)
    g64 = TorchMLP(64, 176, bias, _golden_act(approximate)).double()
    g64.load_state_dict(ref.state_dict())
    y64, dx64, grads64 = _run(g64, x.double(), dy.double())
    assert_dual_benchmark(y, y64, y_ref, dtype=dtype)
    for name, g, g64_, g_ref in [
        ("x", dx, dx64, dx_ref),
        *((n, grads[n], grads64[n], grads_ref[n]) for n in grads_ref),
    ]:
        if dtype == torch.float32:
            assert_dual_benchmark(g, g64_, g_ref, dtype=dtype)
            continue
        verdict = compare(g, g64_, g_ref, "L0", dtype)
        assert verdict.ratios["rmse"] <= 2.0, (
            f"{name}'s gradient: RMSE {verdict.actual.rmse:.3g}, torch's {verdict.benchmark.rmse:.3g}"
        )


@pytest.mark.parametrize("op,approximate", KINDS)
def test_fp32_casting_and_module_surface(op, approximate):
    """casting="fp32" rounds once: the output is down_proj of the operator's fp32-casting result; repr, defaults
    and bad arguments."""
    torch.manual_seed(1)
    m = _ours(op, approximate, 16, 40, False, None, casting="fp32").to(torch.bfloat16)
    x = torch.randn(5, 16).to(torch.bfloat16)
    gate, up = m.gate_proj(x), m.up_proj(x)
    h = tileport.swiglu(gate, up) if op == "swiglu" else tileport.geglu(gate, up, approximate)
    assert torch.equal(m(x), m.down_proj(h))
    assert "casting='fp32'" in repr(m) and "intermediate_size=40" in repr(m)
    default = tileport.SwiGLUMLP(8, 16) if op == "swiglu" else tileport.GEGLUMLP(8, 16)
    assert default.casting == "eager" and default.gate_proj.bias is None
    if op == "geglu":
        assert default.approximate == "tanh"
    with pytest.raises(ValueError, match="casting must be one of"):
        _ours(op, approximate, 8, 16, False, None, casting="fp16")
    with pytest.raises(ValueError, match="intermediate_size must be >= 1, got 0"):
        _ours(op, approximate, 8, 0, False, None)
    with pytest.raises(TypeError, match="hidden_size must be an int"):
        _ours(op, approximate, 8.0, 16, False, None)


def test_geglu_approximate_checked():
    with pytest.raises(ValueError, match="approximate must be one of 'none', 'tanh'"):
        tileport.GEGLUMLP(8, 16, approximate="erf")


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_against_transformers(dtype):
    """Where transformers is installed: LlamaMLP (silu) and GemmaMLP (gelu tanh) of tiny configs, their state
    dicts loaded into ours; the torch backend gives their outputs bit for bit, the default backend silu's in bf16
    bit for bit and everything within the dual benchmark of the float64 golden."""
    pytest.importorskip("transformers")
    from transformers import GemmaConfig, LlamaConfig
    from transformers.models.gemma.modeling_gemma import GemmaMLP
    from transformers.models.llama.modeling_llama import LlamaMLP

    torch.manual_seed(2)
    cases = [
        (LlamaMLP(LlamaConfig(hidden_size=64, intermediate_size=176, hidden_act="silu")), "swiglu", None),
        (
            GemmaMLP(GemmaConfig(hidden_size=64, intermediate_size=176, hidden_activation="gelu_pytorch_tanh")),
            "geglu",
            "tanh",
        ),
    ]
    x = torch.randn(2, 33, 64).to(dtype)
    for theirs, op, approximate in cases:
        theirs = theirs.to(dtype)
        for backend in BACKENDS:
            ours = _ours(op, approximate, 64, 176, False, backend).to(dtype)
            ours.load_state_dict(theirs.state_dict(), strict=True)
            y, y_ref = ours(x), theirs(x)
            if _bit_for_bit(op, backend, dtype):
                assert torch.equal(y, y_ref), (op, backend)
            g64 = TorchMLP(64, 176, False, _golden_act(approximate)).double()
            g64.load_state_dict(theirs.state_dict())
            assert_dual_benchmark(y.detach(), g64(x.double()).detach(), y_ref.detach(), dtype=dtype)
