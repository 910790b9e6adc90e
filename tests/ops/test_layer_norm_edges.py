"""layer_norm edge cases: empties, non-contiguous inputs (same bits), nan/inf rows, thread counts, the module,
torch.compile."""

import math

import pytest
import torch

import tileport

BACKENDS = ["tilelang", "torch", "triton"]


@pytest.mark.parametrize("backend", BACKENDS)
def test_non_contiguous_inputs_give_the_bits_of_their_contiguous_copies(backend, randn):
    base, wbase = randn(24, 2, 300, dtype=torch.bfloat16), randn(600, dtype=torch.bfloat16, seed=4)
    x, w, b = base[:, 1, :], wbase[::2], wbase[1::2]  # strided rows, strided weight and bias
    dy = randn(300, 24, dtype=torch.bfloat16, seed=5).t()  # transposed
    y, m, r = tileport.layer_norm_fwd(x, w, b, backend=backend)
    yc, mc, rc = tileport.layer_norm_fwd(x.contiguous(), w.contiguous(), b.contiguous(), backend=backend)
    assert torch.equal(y, yc) and torch.equal(m, mc) and torch.equal(r, rc)
    grads = tileport.layer_norm_bwd(x, m, r, dy, w, bias=b, backend=backend)
    grads_c = tileport.layer_norm_bwd(
        x.contiguous(), mc, rc, dy.contiguous(), w.contiguous(), bias=b.contiguous(), backend=backend
    )
    assert all(torch.equal(g, gc) for g, gc in zip(grads, grads_c))


@pytest.mark.parametrize("backend", BACKENDS)
def test_nan_and_inf_rows_affect_only_their_row(backend, randn):
    x, w, b, dy = randn(6, 100), randn(100, seed=1), randn(100, seed=3), randn(6, 100, seed=2)
    bad = x.clone()
    bad[1, 3], bad[4, 7] = math.nan, math.inf
    y, m, r = tileport.layer_norm_fwd(bad, w, b, backend=backend)
    y0, m0, r0 = tileport.layer_norm_fwd(x, w, b, backend=backend)
    clean = [0, 2, 3, 5]
    assert torch.equal(y[clean], y0[clean]) and torch.equal(m[clean], m0[clean]) and torch.equal(r[clean], r0[clean])
    assert torch.isnan(y[1]).all() and not torch.isfinite(y[4]).all()
    dx, _, _ = tileport.layer_norm_bwd(bad, m, r, dy, w, backend=backend)
    dx0, _, _ = tileport.layer_norm_bwd(x, m0, r0, dy, w, backend=backend)
    assert torch.equal(dx[clean], dx0[clean])


@pytest.mark.parametrize("backend", ["tilelang", "torch"])
@pytest.mark.parametrize("shape", [(0, 16), (3, 0, 8), (4, 0)])
def test_empty_inputs(shape, backend):
    x, w, b = torch.randn(shape), torch.randn(shape[-1]), torch.randn(shape[-1])
    y, mean, rstd = tileport.layer_norm_fwd(x, w, b, backend=backend)
    assert y.shape == x.shape and mean.shape == rstd.shape == x.shape[:-1]
    assert torch.isnan(mean).all() and torch.isnan(rstd).all()  # D = 0: the mean of nothing, as torch's
    dx, dw, db = tileport.layer_norm_bwd(x, mean, rstd, torch.randn(shape), w, bias=b, backend=backend)
    assert dx.shape == x.shape and torch.equal(dw, torch.zeros_like(w)) and torch.equal(db, torch.zeros_like(b))


def test_module_is_a_drop_in_for_torch_layernorm(randn):
    ours, theirs = tileport.LayerNorm((4, 64), eps=1e-5), torch.nn.LayerNorm((4, 64), eps=1e-5)
    assert ours.weight.shape == theirs.weight.shape == ours.bias.shape == (4, 64)
    with torch.no_grad():
        for p in ("weight", "bias"):
            v = randn(4, 64, seed=9 if p == "weight" else 10)
            getattr(ours, p).copy_(v)
            getattr(theirs, p).copy_(v)
    x = randn(3, 4, 64)
    torch.testing.assert_close(ours(x), theirs(x), rtol=2e-6, atol=2e-6)
    ours(x).pow(2).sum().backward()
    theirs(x).pow(2).sum().backward()
    for p in ("weight", "bias"):
        torch.testing.assert_close(getattr(ours, p).grad, getattr(theirs, p).grad, rtol=1e-4, atol=1e-4)
    assert tileport.LayerNorm(64, elementwise_affine=False).weight is None
    assert tileport.LayerNorm(64, bias=False).bias is None and set(dict(tileport.LayerNorm(8).named_parameters())) == {
        "weight",
        "bias",
    }


def test_custom_ops_pass_opcheck():
    x, w, b = torch.randn(3, 4, 16), torch.randn(16), torch.randn(16)
    y, mean, rstd = torch.ops.tileport.layer_norm_fwd(x, w, b, 1e-5, None, None)
    torch.testing.assert_close(y, tileport.layer_norm(x, w, b), rtol=0, atol=0)
    torch.library.opcheck(torch.ops.tileport.layer_norm_fwd.default, (x, w, b, 1e-5, None, None))
    dy = torch.randn(3, 4, 16)
    torch.library.opcheck(torch.ops.tileport.layer_norm_bwd.default, (x, mean, rstd, dy, w, b, None, 1e-5))
    torch.library.opcheck(torch.ops.tileport.layer_norm_bwd.default, (x, mean, rstd, dy, None, None, None, None))


def test_fullgraph_compile_forward_backward_without_recompiling_for_rows():
    from torch._dynamo.testing import CompileCounter

    counter = CompileCounter()
    layer = tileport.LayerNorm(64)

    def f(t):
        return layer(t * 2.0).pow(2).sum()

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
