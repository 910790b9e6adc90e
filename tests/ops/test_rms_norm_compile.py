"""torch.compile(fullgraph=True) of code calling tileport.rms_norm: custom ops, no recompile for a new row count."""

import torch

import tileport


def test_custom_ops_pass_opcheck():
    x, w = torch.randn(3, 4, 16), torch.randn(16)
    y, rstd = torch.ops.tileport.rms_norm_fwd(x, w, 1e-6, 0.0, "fp32", None, None)
    torch.testing.assert_close(y, tileport.rms_norm(x, w), rtol=0, atol=0)
    torch.library.opcheck(torch.ops.tileport.rms_norm_fwd.default, (x, w, 1e-6, 0.0, "fp32", None, None))
    torch.library.opcheck(
        torch.ops.tileport.rms_norm_bwd.default, (x, rstd, torch.randn(3, 4, 16), w, 0.0, "fp32", None, 1e-6)
    )
    torch.library.opcheck(
        torch.ops.tileport.rms_norm_bwd.default, (x, rstd, torch.randn(3, 4, 16), None, 0.0, "fp32", None, None)
    )


def test_fullgraph_compile_forward_backward_without_recompiling_for_rows():
    from torch._dynamo.testing import CompileCounter

    counter = CompileCounter()
    layer = tileport.RMSNorm(64)

    def f(t):
        return layer(t * 2.0).sum()

    compiled = torch.compile(f, fullgraph=True, backend=counter, dynamic=True)
    for rows in (5, 9, 17):
        x = torch.randn(rows, 64, requires_grad=True)
        out = compiled(x)
        out.backward()
        xe = x.detach().clone().requires_grad_()
        ref = f(xe)
        ref.backward()
        torch.testing.assert_close(out, ref, rtol=0, atol=0)
        torch.testing.assert_close(x.grad, xe.grad, rtol=0, atol=0)
    assert counter.frame_count == 1
