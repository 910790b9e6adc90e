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
