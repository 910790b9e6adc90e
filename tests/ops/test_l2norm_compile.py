"""torch.compile(fullgraph=True) of code calling tileport.l2norm: custom ops, no graph break."""

import torch

import tileport


def _graph_targets(recorded):
    """A compile backend recording the ops of the AOT forward and backward graphs."""
    from torch._dynamo.backends.common import aot_autograd

    def record(gm, example_inputs):
        recorded.extend(str(n.target) for n in gm.graph.nodes if n.op == "call_function")
        return gm

    return aot_autograd(fw_compiler=record, bw_compiler=record)


def test_custom_ops_are_registered():
    assert hasattr(torch.ops.tileport, "l2norm_fwd") and hasattr(torch.ops.tileport, "l2norm_bwd")
    x = torch.randn(3, 4, 16)
    y, rstd = torch.ops.tileport.l2norm_fwd(x, 1e-6, None, None)
    torch.testing.assert_close(y, tileport.l2norm(x), rtol=0, atol=0)
    torch.library.opcheck(torch.ops.tileport.l2norm_fwd.default, (x, 1e-6, None, None))
    torch.library.opcheck(torch.ops.tileport.l2norm_bwd.default, (x, rstd, torch.randn(3, 4, 16), None, 1e-6))


def test_fullgraph_compile_forward_and_backward():
    recorded = []

    def f(t):
        return tileport.l2norm(t * 2.0, eps=1e-5).sum(-1)

    compiled = torch.compile(f, fullgraph=True, backend=_graph_targets(recorded))
    x = torch.randn(8, 5, 64, requires_grad=True)
    out = compiled(x)
    assert any("tileport.l2norm_fwd" in t for t in recorded), recorded
    xe = x.detach().clone().requires_grad_()
    torch.testing.assert_close(out, f(xe), rtol=0, atol=0)
    out.sum().backward()
    assert any("tileport.l2norm_bwd" in t for t in recorded), recorded
    f(xe).sum().backward()
    torch.testing.assert_close(x.grad, xe.grad, rtol=0, atol=0)


def test_inductor_compile_with_dynamic_rows():
    compiled = torch.compile(lambda t: tileport.l2norm(t) * 3.0, fullgraph=True, dynamic=True)
    for m in (5, 17, 33):
        x = torch.randn(m, 96, dtype=torch.bfloat16)
        torch.testing.assert_close(compiled(x), tileport.l2norm(x) * 3.0)
