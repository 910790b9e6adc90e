"""Each operator's public call (``tileport.<op>``, as users write it) compiles into one graph, forward and backward:
nothing in tileport's Python breaks a user's torch.compile (checks that read data run inside the custom ops)."""

import inspect
import math

import pytest
import torch
from torch._dynamo.testing import CompileCounter

import tileport
from tileport.ops import catalog

OPS = sorted(catalog.specs())


def _leaves(spec) -> dict:
    """The spec's example at its smallest benchmark shape (fp32), the differentiable inputs as leaves where the
    operator has a backward."""
    ex = spec.example(min(spec.sweep, key=math.prod), torch.float32, "cpu", torch.Generator().manual_seed(0))
    decls = {t.name: t for t in spec.inputs}
    train = "fwdbwd" in spec.modes

    def leaf(name, v):
        grad = train and name in decls and getattr(decls[name], "grad", None) is not False
        if isinstance(v, torch.Tensor) and v.is_floating_point() and grad:
            return v.detach().requires_grad_(True)
        return v

    return {k: leaf(k, v) for k, v in ex.items()}


@pytest.mark.parametrize("op", OPS)
def test_the_public_call_compiles_into_one_graph(op):
    spec = catalog.get(op)
    function = getattr(tileport, op)
    assert set(_leaves(spec)) <= set(inspect.signature(function).parameters), op

    def step(**kw):
        out = function(**kw)
        outs = out if isinstance(out, tuple) else (out,)
        return sum(o.float().sum() for o in outs if isinstance(o, torch.Tensor))

    torch._dynamo.reset()
    counter = CompileCounter()
    compiled = torch.compile(step, backend=counter)
    leaves = _leaves(spec)
    loss = compiled(**leaves)
    if loss.requires_grad:
        loss.backward()
        assert any(v.grad is not None for v in leaves.values() if isinstance(v, torch.Tensor)), op
    torch._dynamo.reset()
    assert counter.frame_count == 1, f"{op}: {counter.frame_count} graphs"


def test_inductor_meets_the_fakes_strides_in_the_backward():
    """Inductor asserts each custom op result's strides against its fake's: given q and k as transformers holds
    them ([B, H, T, D] seen as [B, T, H, D]), rope's backward gave back gradients in that permuted layout (a compiled
    training step of a patched model failed on it); the results are contiguous, as the fakes. The gradients are
    eager's."""
    g = torch.Generator().manual_seed(0)
    B, T, H, D = 1, 32, 2, 16
    cos, sin = torch.randn(T, D // 2, generator=g), torch.randn(T, D // 2, generator=g)
    heads = [torch.randn(B, H, T, D, generator=g) for _ in range(2)]

    def step(q, k):
        qo, ko = tileport.rope(q.transpose(1, 2), k.transpose(1, 2), cos, sin)
        return (qo * 1.5).sum() + ko.sum()

    got, want = [h.clone().requires_grad_(True) for h in heads], [h.clone().requires_grad_(True) for h in heads]
    torch._dynamo.reset()
    torch.compile(step)(*got).backward()
    step(*want).backward()
    torch._dynamo.reset()
    for a, b in zip(got, want):
        torch.testing.assert_close(a.grad, b.grad, rtol=0, atol=0)
