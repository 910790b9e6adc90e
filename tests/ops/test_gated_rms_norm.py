"""gated_rms_norm: forward and backward against the float64 golden on every CPU backend, the golden's own
backward against autograd, both gate placements and activations, the module, edges and errors."""

import math

import pytest
import torch

import tileport
from tileport.precision import assert_dual_benchmark
from tileport.precision.metrics import compare
from tileport.precision.retest import retest_verdicts

DTYPES = [torch.float32, torch.float16, torch.bfloat16]
FORMS = [("silu", True), ("silu", False), ("sigmoid", True), ("sigmoid", False)]


def _weight(D, dtype, seed=5):
    g = torch.Generator().manual_seed(seed)
    return (1.0 + 0.5 * torch.randn(D, generator=g)).to(dtype)


def _check(x, gate, w, dy, golden, backend, activation, nbg, eps=1e-6, judge_dweight=True):
    kw = dict(activation=activation, norm_before_gate=nbg)
    y, rstd = tileport.gated_rms_norm_fwd(x, gate, w, eps, backend=backend, **kw)
    yb, rb = tileport.gated_rms_norm_fwd(x, gate, w, eps, backend="torch", **kw)
    dx, dg, dw = tileport.gated_rms_norm_bwd(x, gate, rstd, dy, w, eps=eps, backend=backend, **kw)
    dxb, dgb, dwb = tileport.gated_rms_norm_bwd(x, gate, rb, dy, w, eps=eps, backend="torch", **kw)
    gold = golden("gated_rms_norm", x=x, gate=gate, weight=w, dy=dy, eps=eps, **kw)
    assert y.dtype == x.dtype and rstd.dtype == torch.float32 and dx.dtype == x.dtype and dg.dtype == gate.dtype
    assert_dual_benchmark(y, gold["y"], yb, dtype=x.dtype)
    assert_dual_benchmark(rstd, gold["rstd"], rb, dtype=torch.float32)
    assert_dual_benchmark(dx, gold["dx"], dxb, dtype=x.dtype)
    assert_dual_benchmark(dg, gold["dgate"], dgb, dtype=gate.dtype)
    if w is None:
        assert dw is None
    else:
        assert dw.dtype == w.dtype and dw.shape == w.shape
        if judge_dweight:
            assert_dual_benchmark(dw, gold["dweight"], dwb, dtype=w.dtype)


@pytest.mark.parametrize("activation,nbg", FORMS)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("D", [1, 7, 128, 4097])
def test_tilelang_matches_golden(D, dtype, activation, nbg, golden, randn):
    M = min(256, max(48, 4096 // D))  # short rows: enough of them that no one element decides the RMSE ratio
    x, gate, dy = (
        randn(M, D, dtype=dtype),
        randn(M, D, dtype=dtype, seed=1, scale=2.0),
        randn(M, D, dtype=dtype, seed=2),
    )
    # one column's dweight is one number, whose ratio one seed cannot settle: the retest rule's, below
    _check(x, gate, _weight(D, dtype), dy, golden, "tilelang", activation, nbg, judge_dweight=D > 1)


@pytest.mark.parametrize("activation,nbg", FORMS)
def test_single_column_dweight_passes_the_retest_rule(activation, nbg, golden, randn):
    """D = 1: dweight is one sum over rows; the standard judges such a value by the median ratio over new seeds
    (the 95% bootstrap lower bound must not exceed 1), not by one seed."""
    kw = dict(activation=activation, norm_before_gate=nbg)
    verdicts = []
    for seed in range(40):
        x, gate, dy = (
            randn(256, 1, seed=3 * seed),
            randn(256, 1, seed=3 * seed + 1, scale=2.0),
            randn(256, 1, seed=3 * seed + 2),
        )
        w = _weight(1, torch.float32, seed=1000 + seed)
        _, rstd = tileport.gated_rms_norm_fwd(x, gate, w, backend="tilelang", **kw)
        _, rb = tileport.gated_rms_norm_fwd(x, gate, w, backend="torch", **kw)
        dw = tileport.gated_rms_norm_bwd(x, gate, rstd, dy, w, backend="tilelang", **kw)[2]
        dwb = tileport.gated_rms_norm_bwd(x, gate, rb, dy, w, backend="torch", **kw)[2]
        gold = golden("gated_rms_norm", x=x, gate=gate, weight=w, dy=dy, **kw)["dweight"]
        verdicts.append(compare(dw, gold, dwb, "L0", torch.float32))
    result = retest_verdicts(verdicts, min_seeds=0)  # 40 seeds: the rule, not verify's 1000-seed retest
    assert result.passed, result.failures


@pytest.mark.parametrize("activation", ["silu", "sigmoid"])
def test_gate_before_norm_rstd_takes_the_gated_input_in_fp64(activation):
    """At D = 1 rstd is 1 / |x * act(gate)|: formed in fp32, the activation's quotient and the product round twice
    more and the rstd's mean relative error was level with torch's fp32 composite (L1 case 4457, bf16, sigmoid:
    median ratio 1.00 over 1000 seeds); formed in fp64 from the fp32 exp it is about 0.6 of torch's."""
    g = torch.Generator().manual_seed(11)
    x, gate = ((torch.rand(2, 50000, 1, generator=g) * 2 - 1).to(torch.bfloat16) for _ in range(2))
    kw = dict(activation=activation, norm_before_gate=False)
    gold = tileport.gated_rms_norm_fwd(x.double(), gate.double(), None, 1e-12, backend="torch", **kw)[1]
    ours = tileport.gated_rms_norm_fwd(x, gate, None, 1e-12, backend="tilelang", **kw)[1]
    bench = tileport.gated_rms_norm_fwd(x, gate, None, 1e-12, backend="torch", **kw)[1]
    mere = lambda r: ((r.double() - gold).abs() / gold.abs()).mean().item()  # noqa: E731
    assert mere(ours) < 0.75 * mere(bench)


@pytest.mark.parametrize("activation", ["silu", "sigmoid"])
def test_gate_before_norm_y_takes_the_rstd_of_the_u_it_scales(activation):
    """At D = 1, y = u * rstd is u / |u|: scaled by the rstd of that same fp32 u, u's rounding cancels. Scaled by
    the saved rstd (of u formed in fp64) it stayed in y: fp32 y failed L1 at D = 1 with MERE ratios 2-4."""
    g = torch.Generator().manual_seed(12)
    x, gate = (torch.randn(20000, 1, generator=g) for _ in range(2))
    kw = dict(activation=activation, norm_before_gate=False)
    gold = tileport.gated_rms_norm_fwd(x.double(), gate.double(), None, 1e-12, backend="torch", **kw)[0]
    ours = tileport.gated_rms_norm_fwd(x, gate, None, 1e-12, backend="tilelang", **kw)[0]
    bench = tileport.gated_rms_norm_fwd(x, gate, None, 1e-12, backend="torch", **kw)[0]
    mere = lambda y: ((y.double() - gold).abs() / gold.abs()).mean().item()  # noqa: E731
    assert mere(ours) <= 1.1 * mere(bench)


@pytest.mark.parametrize("activation,nbg", FORMS)
def test_without_weight_and_triton_interpreter(activation, nbg, golden, randn):
    x, gate, dy = randn(33, 200), randn(33, 200, seed=1, scale=2.0), randn(33, 200, seed=2)
    _check(x, gate, None, dy, golden, "tilelang", activation, nbg)
    _check(x, gate, _weight(200, torch.float32), dy, golden, "triton", activation, nbg)


@pytest.mark.parametrize("activation,nbg", FORMS)
def test_the_golden_backward_is_autograd_of_the_forward(activation, nbg, randn):
    """The torch reference's explicit backward (the golden in float64) against autograd through its forward."""
    x, gate, dy = randn(6, 40).double(), randn(6, 40, seed=1, scale=3.0).double(), randn(6, 40, seed=2).double()
    w = _weight(40, torch.float64)
    leaves = [t.clone().requires_grad_() for t in (x, gate, w)]
    y, _ = tileport.gated_rms_norm_fwd(*leaves, 1e-5, activation=activation, norm_before_gate=nbg, backend="torch")
    # the forward as plain torch ops, so autograd can differentiate it
    a = torch.nn.functional.silu(leaves[1]) if activation == "silu" else torch.sigmoid(leaves[1])
    u = leaves[0] if nbg else leaves[0] * a
    ref = u * torch.rsqrt(u.pow(2).mean(-1, keepdim=True) + 1e-5) * leaves[2] * (a if nbg else 1.0)
    torch.testing.assert_close(y, ref.detach(), rtol=1e-14, atol=0)
    want = torch.autograd.grad(ref, leaves, dy)
    _, rstd = tileport.gated_rms_norm_fwd(
        x, gate, w, 1e-5, activation=activation, norm_before_gate=nbg, backend="torch"
    )
    got = tileport.gated_rms_norm_bwd(
        x, gate, rstd, dy, w, eps=1e-5, activation=activation, norm_before_gate=nbg, backend="torch"
    )
    for g, e in zip(got, want):
        torch.testing.assert_close(g, e, rtol=1e-10, atol=1e-12)


def test_norm_before_gate_places_the_gate_as_stated(randn):
    """True: rms_norm(x) * w * act(gate) (gated DeltaNet); False: rms_norm(x * act(gate)) * w (Mamba2)."""
    x, gate, w = randn(5, 64), randn(5, 64, seed=1), _weight(64, torch.float32)
    a = torch.nn.functional.silu(gate)
    before = tileport.gated_rms_norm(x, gate, w)
    after = tileport.gated_rms_norm(x, gate, w, norm_before_gate=False)
    torch.testing.assert_close(before, tileport.rms_norm(x, w) * a, rtol=2e-6, atol=1e-6)
    torch.testing.assert_close(after, tileport.rms_norm(x * a, w), rtol=2e-6, atol=1e-6)
    assert not torch.allclose(before, after)


def test_swish_is_silu_and_sigmoid_differs(randn):
    x, gate = randn(4, 32), randn(4, 32, seed=1)
    silu = tileport.gated_rms_norm(x, gate)
    assert torch.equal(tileport.gated_rms_norm(x, gate, activation="swish"), silu)
    sig = tileport.gated_rms_norm(x, gate, activation="sigmoid")
    torch.testing.assert_close(sig, tileport.rms_norm(x) * torch.sigmoid(gate), rtol=2e-6, atol=1e-6)


@pytest.mark.parametrize("nbg", [True, False])
def test_autograd_gives_the_backward_and_every_gradient(nbg, randn):
    x, gate, w, dy = randn(3, 5, 24), randn(3, 5, 24, seed=1), _weight(24, torch.float32), randn(3, 5, 24, seed=2)
    leaves = [t.clone().requires_grad_() for t in (x, gate, w)]
    tileport.gated_rms_norm(*leaves, norm_before_gate=nbg).backward(dy)
    _, rstd = tileport.gated_rms_norm_fwd(x, gate, w, norm_before_gate=nbg)
    want = tileport.gated_rms_norm_bwd(x, gate, rstd, dy, w, norm_before_gate=nbg)
    for leaf, g in zip(leaves, want):
        assert torch.equal(leaf.grad, g)


def test_module_form(randn):
    layer = tileport.GatedRMSNorm(32, eps=1e-5, activation="sigmoid", norm_before_gate=False)
    assert torch.equal(layer.weight.detach(), torch.ones(32))
    x, gate = randn(2, 3, 32), randn(2, 3, 32, seed=1)
    with torch.no_grad():
        layer.weight.mul_(0.5)
    want = tileport.gated_rms_norm(x, gate, layer.weight, 1e-5, activation="sigmoid", norm_before_gate=False)
    assert torch.equal(layer(x, gate), want)
    assert "activation='sigmoid'" in repr(layer) and "norm_before_gate=False" in repr(layer)
    assert tileport.GatedRMSNorm(8, elementwise_affine=False).weight is None
    with pytest.raises(ValueError, match="activation must be one of"):
        tileport.GatedRMSNorm(8, activation="relu")


def test_empty_inputs_and_non_contiguous_rows(randn):
    y, rstd = tileport.gated_rms_norm_fwd(torch.empty(0, 8), torch.empty(0, 8))
    assert y.shape == (0, 8) and rstd.shape == (0,)
    y, rstd = tileport.gated_rms_norm_fwd(torch.empty(3, 0), torch.empty(3, 0))
    assert y.shape == (3, 0) and torch.isnan(rstd).all()  # the mean of nothing
    dx, dg, dw = tileport.gated_rms_norm_bwd(
        torch.empty(0, 8), torch.empty(0, 8), torch.empty(0), torch.empty(0, 8), torch.ones(8)
    )
    assert dx.shape == dg.shape == (0, 8) and torch.equal(dw, torch.zeros(8))
    x, gate = randn(16, 40).t(), randn(40, 32, seed=1)[:, ::2]  # (40, 16) views: transposed, strided columns
    assert not x.is_contiguous() and not gate.is_contiguous()
    assert torch.equal(tileport.gated_rms_norm(x, gate), tileport.gated_rms_norm(x.contiguous(), gate.contiguous()))


def test_fp64_inputs_run_on_the_torch_backend(randn):
    x, gate = randn(4, 16).double(), randn(4, 16, seed=1).double()
    y = tileport.gated_rms_norm(x, gate)
    assert y.dtype == torch.float64
    a = torch.nn.functional.silu(gate)
    torch.testing.assert_close(y, x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * a, rtol=1e-14, atol=0)


def test_bad_input_names_the_problem():
    x = torch.randn(4, 16)
    with pytest.raises(ValueError, match=r"gate must have x's shape \(4, 16\), got \(4, 15\)"):
        tileport.gated_rms_norm(x, torch.randn(4, 15))
    with pytest.raises(TypeError, match="gate must have a floating dtype"):
        tileport.gated_rms_norm(x, torch.ones(4, 16, dtype=torch.int32))
    with pytest.raises(ValueError, match="activation must be one of 'silu', 'sigmoid', 'swish', got 'gelu'"):
        tileport.gated_rms_norm(x, x, activation="gelu")
    with pytest.raises(TypeError, match="norm_before_gate must be a bool, got int"):
        tileport.gated_rms_norm(x, x, norm_before_gate=1)
    with pytest.raises(ValueError, match="eps must be finite and >= 0"):
        tileport.gated_rms_norm(x, x, eps=math.nan)
    with pytest.raises(ValueError, match=r"weight must have shape x.shape\[-1:\] = \(16,\), got \(8,\)"):
        tileport.gated_rms_norm(x, x, torch.ones(8))
    with pytest.raises(ValueError, match=r"rstd must have shape x.shape\[:-1\] = \(4,\), got \(5,\)"):
        tileport.gated_rms_norm_bwd(x, x, torch.ones(5), x)
