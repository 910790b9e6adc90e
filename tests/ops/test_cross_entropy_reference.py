"""cross_entropy's torch reference (the golden at fp64) against torch itself: each row's loss against
``F.cross_entropy(reduction="none")`` with weight, label smoothing and ignore_index, and the z-loss, the softcap
and every gradient (``forward(grad=...)``, in place over the input too, and ``backward``) against torch.autograd
of the plain fp64 expression. Rows in chunks: a chunk size of a few rows gives the same results."""

import pytest
import torch

from tileport.backends.torch import cross_entropy as ref

F = torch.nn.functional
IGNORE = -100


def _case(n, c, seed=0, ignored=0.25, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    x = (torch.randn(n, c, generator=g, dtype=torch.float64) * 3).to(dtype)
    t = torch.randint(0, c, (n,), generator=g)
    t[torch.rand(n, generator=g) < ignored] = IGNORE
    w = (torch.rand(c, generator=g, dtype=torch.float64) + 0.5).to(dtype)
    return x, t, w


def _plain(x, t, w, eps, scale, softcap):
    """Per-row (loss, z_loss) as a plain fp64 expression (differentiable), ignored rows 0."""
    z = softcap * torch.tanh(x / softcap) if softcap else x
    lse = torch.logsumexp(z, 1)
    logp = z - lse[:, None]
    valid = t != IGNORE
    tc = torch.where(valid, t, 0)
    ww = torch.ones(x.shape[1], dtype=x.dtype) if w is None else w
    nll = -ww[tc] * logp.gather(1, tc[:, None])[:, 0]
    smooth = -(ww * logp).sum(1) / x.shape[1]
    loss = (1 - eps) * nll + eps * smooth
    return torch.where(valid, loss, 0), torch.where(valid, scale * lse * lse, 0), lse


@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("eps", [0.0, 0.1, 1.0])
def test_loss_matches_torch(weighted, eps):
    x, t, w = _case(37, 53)
    w = w if weighted else None
    loss, z_loss, lse = ref.forward(x, t, w, IGNORE, eps, 0.0, 0.0)
    expect = F.cross_entropy(x, t, weight=w, ignore_index=IGNORE, reduction="none", label_smoothing=eps)
    assert loss.dtype == torch.float64 and loss.shape == (37,)
    torch.testing.assert_close(loss, expect, rtol=1e-13, atol=1e-13)
    torch.testing.assert_close(lse, torch.logsumexp(x, 1), rtol=1e-14, atol=0)
    assert bool((z_loss == 0).all())


@pytest.mark.parametrize("softcap", [0.0, 5.0])
@pytest.mark.parametrize("weighted", [False, True])
def test_z_loss_softcap_and_grads_match_autograd(softcap, weighted):
    x, t, w = _case(29, 41, seed=1)
    w = w if weighted else None
    eps, scale, (a, b) = 0.1, 1e-2, (0.37, 1.9)
    xr = x.clone().requires_grad_()
    loss_e, z_e, lse_e = _plain(xr, t, w, eps, scale, softcap)
    (a * loss_e + b * z_e).sum().backward()
    grad = torch.full_like(x, float("nan"))
    loss, z_loss, lse = ref.forward(x, t, w, IGNORE, eps, scale, softcap, grad=grad, scales=(a, b))
    torch.testing.assert_close(loss, loss_e.detach(), rtol=1e-13, atol=1e-13)
    torch.testing.assert_close(z_loss, z_e.detach(), rtol=1e-13, atol=1e-13)
    torch.testing.assert_close(lse, lse_e.detach(), rtol=1e-14, atol=0)
    torch.testing.assert_close(grad, xr.grad, rtol=1e-12, atol=1e-14)
    assert bool((grad[t == IGNORE] == 0).all())

    dl, dz = torch.rand(29, dtype=torch.float64), torch.rand(29, dtype=torch.float64)
    xr.grad = None
    loss_e, z_e, _ = _plain(xr, t, w, eps, scale, softcap)
    (dl * loss_e + dz * z_e).sum().backward()
    dx = ref.backward(dl, dz, x, t, w, lse, IGNORE, eps, scale, softcap)
    torch.testing.assert_close(dx, xr.grad, rtol=1e-12, atol=1e-14)
    dx0 = ref.backward(dl, None, x, t, w, lse, IGNORE, eps, scale, softcap)
    xr.grad = None
    (dl * _plain(xr, t, w, eps, scale, softcap)[0]).sum().backward()
    torch.testing.assert_close(dx0, xr.grad, rtol=1e-12, atol=1e-14)


def test_grad_in_place_over_input(monkeypatch):
    """grad = input: the gradient replaces the logits; in chunks of 3 rows (each read before written)."""
    monkeypatch.setattr(ref, "CHUNK_ELEMENTS", 3 * 50)
    x, t, w = _case(20, 50, seed=2)
    expect = torch.empty_like(x)
    out = ref.forward(x, t, w, IGNORE, 0.05, 1e-3, 3.0, grad=expect, scales=(0.5, 0.25))
    y = x.clone()
    got = ref.forward(y, t, w, IGNORE, 0.05, 1e-3, 3.0, grad=y, scales=(0.5, 0.25))
    assert torch.equal(y, expect)
    for o, g in zip(out, got):
        assert torch.equal(o, g)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
def test_low_precision_stat_dtype_and_large_logits(dtype):
    """16-bit and fp32 logits: stats in fp32, the gradient in the input's dtype; bf16 at 3e4 stays finite."""
    x, t, w = _case(16, 300, seed=3, dtype=dtype)
    if dtype == torch.bfloat16:
        x = x * 1e4
    grad = torch.empty_like(x)
    loss, z_loss, lse = ref.forward(x, t, w, IGNORE, 0.1, 1e-4, 0.0, grad=grad)
    assert loss.dtype == z_loss.dtype == lse.dtype == torch.float32 and grad.dtype == dtype
    assert bool(torch.isfinite(loss).all() and torch.isfinite(lse).all() and torch.isfinite(grad).all())
    gold = ref.forward(x.double(), t, w.double(), IGNORE, 0.1, 1e-4, 0.0)
    torch.testing.assert_close(lse.double(), gold[2], rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(loss.double(), gold[0], rtol=1e-5, atol=1e-3)


def test_int32_targets_and_row_strided_view():
    x, t, w = _case(12, 30, seed=4)
    big = torch.zeros(12, 40, dtype=torch.float64)
    big[:, 5:35] = x
    v = big[:, 5:35]
    a = ref.forward(v, t.int(), w, IGNORE, 0.0, 0.0, 0.0)
    b = ref.forward(x, t, w, IGNORE, 0.0, 0.0, 0.0)
    for p, q in zip(a, b):
        assert torch.equal(p, q)


def test_absent_terms_are_not_multiplied_by_zero():
    """s = 0: z_loss 0 and dz_loss never read (nan there leaks nowhere); an ignored row's gradient is 0 whatever
    dloss holds; eps = 0: no smoothing term, so an -inf logit outside the target leaves the loss finite."""
    x, t, w = _case(6, 9, seed=5)
    assert int(t[0]) != IGNORE and bool((t == IGNORE).any())
    x[0, (int(t[0]) + 1) % 9] = -float("inf")
    loss, z_loss, lse = ref.forward(x, t, w, IGNORE, 0.0, 0.0, 0.0)
    assert bool((z_loss == 0).all()) and bool(torch.isfinite(loss).all())
    dl = torch.ones(6, dtype=torch.float64)
    dl[t == IGNORE] = float("nan")
    dx = ref.backward(dl, torch.full((6,), float("nan"), dtype=torch.float64), x, t, w, lse, IGNORE, 0.0, 0.0, 0.0)
    assert bool(torch.isfinite(dx).all()) and bool((dx[t == IGNORE] == 0).all())
