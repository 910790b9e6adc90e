"""fused_linear_cross_entropy: against a float64 golden (``F.linear`` + ``F.cross_entropy`` in float64, the z-loss
and softcap written out, gradients by torch.autograd) for every reduction and option, bias, class weights, chunks
that do not divide the rows, 3-D and non-contiguous inputs, bf16 and fp32, a gradient reaching the z-loss, a
second backward through a retained graph, autocast, the inference path, empty and all-ignored targets, and the
errors. No [N, V] tensor is ever allocated (watched at the dispatcher). Every backend serving the cross_entropy row
kernel here runs the numerics.

Precision: gradients and per-row losses by the project's dual benchmark (``compare`` at L0: the output and the
same-dtype benchmark, torch's ``F.linear`` in the input's dtype and the loss in fp32, both against the golden);
a scalar loss within a few times the benchmark's own error (plus fp32's rounding of a sum)."""

import pytest
import torch
import torch.utils._pytree as pytree
from torch.utils._python_dispatch import TorchDispatchMode

import tileport
from tileport.backends.registry import available_backends
from tileport.ops.fused_linear_cross_entropy import (
    FusedLinearCrossEntropyLoss,
    fused_linear_cross_entropy,
)
from tileport.precision import compare

F = torch.nn.functional
BACKENDS = [b.name for b in available_backends() if b.available and "cross_entropy" in b.serves and not b.interpreted]
N, H, V = 45, 24, 301  # 45 rows in chunks of 8: the last chunk short
OPTIONS = {
    "plain": {},
    "bias": {"bias": True},
    "ce_weight": {"ce_weight": True},
    "smoothing": {"label_smoothing": 0.1},
    "z_loss": {"lse_square_scale": 1e-3},
    "softcap": {"softcap": 5.0},
    "everything": {"bias": True, "ce_weight": True, "label_smoothing": 0.2, "lse_square_scale": 1e-2, "softcap": 8.0},
}


def _inputs(dtype, shape=(N,), seed=0, bias=False, ce_weight=False, ignore_index=-100):
    g = torch.Generator().manual_seed(seed)
    x = (torch.randn(*shape, H, generator=g) * 2).to(dtype)
    w = (torch.randn(V, H, generator=g) * 0.5).to(dtype)
    t = torch.randint(0, V, shape, generator=g)
    t.view(-1)[torch.rand(t.numel(), generator=g) < 0.15] = ignore_index
    b = (torch.randn(V, generator=g) * 0.5).to(dtype) if bias else None
    cw = (torch.rand(V, generator=g) + 0.5).to(dtype) if ce_weight else None
    return x, w, t, b, cw


def _reference(
    x,
    w,
    t,
    b,
    cw,
    *,
    compute,
    ignore_index=-100,
    reduction="mean",
    label_smoothing=0.0,
    lse_square_scale=0.0,
    softcap=None,
):
    """(loss, z_loss) of the composite users write: the logits by F.linear in x's dtype, the loss in ``compute``
    (float64: the golden; float32: the benchmark), z-loss and softcap as Liger-Kernel defines them."""
    z = F.linear(x, w, b).to(compute)
    if softcap:
        z = softcap * torch.tanh(z / softcap)
    z2, t1 = z.reshape(-1, V), t.reshape(-1).long()
    ce = F.cross_entropy(
        z2,
        t1,
        weight=None if cw is None else cw.to(compute),
        ignore_index=ignore_index,
        reduction="none",
        label_smoothing=label_smoothing,
    )
    valid = t1 != ignore_index
    zl = torch.where(valid, lse_square_scale * torch.logsumexp(z2, -1) ** 2, 0)
    if reduction == "none":
        return (ce + zl).view(t.shape), zl.view(t.shape)
    if reduction == "sum":
        return ce.sum() + zl.sum(), zl.sum()
    den = valid.sum() if cw is None else cw.to(compute)[t1[valid]].sum()
    return ce.sum() / den + zl.sum() / valid.sum(), zl.sum() / valid.sum()


def _leaves(x, w, b, dtype=None):
    return [None if t is None else t.detach().to(dtype or t.dtype).requires_grad_(True) for t in (x, w, b)]


def _grads(fn, leaves, dy, dz=None):
    """(loss, z_loss, [gradients of the leaves]) of ``fn(*leaves)`` given ``dy`` (and ``dz`` for the z-loss)."""
    loss, z = fn(*leaves)
    wrt = [t for t in leaves if t is not None]
    outs, gs = [loss], [dy.to(loss.dtype)]
    if dz is not None:
        outs.append(z)
        gs.append(dz.to(z.dtype))
    return loss.detach(), z.detach(), list(torch.autograd.grad(outs, wrt, gs))


def _check(actual, golden, bench, what, dtype):
    """The dual benchmark (L0) on a tensor; a scalar within a few times the benchmark's error. The small-value
    rule (errors beyond the dtype's bound where |golden| is small, at most twice the benchmark's count) is given a
    slack of 0.5% of the elements: at these sizes every small gradient element is a sum that cancels, both
    counts are a few dozen and their ratio is noise (the elements' errors themselves are held by MARE / MERE)."""
    if actual.numel() > 1:
        v = compare(actual.double().reshape(-1), golden.reshape(-1), bench.double().reshape(-1), "L0", dtype)
        failures = [f for f in v.failures if not f.startswith("small-value")]
        allowed = max(2 * v.benchmark.small_errors, v.benchmark.small_errors + actual.numel() // 200)
        if v.actual.small_errors > allowed:
            failures.append(
                f"small-value errors {v.actual.small_errors} > {allowed} (benchmark's {v.benchmark.small_errors})"
            )
        assert not failures, (
            f"{what}: {'; '.join(failures)} (MARE {v.actual.mare:.3g} MERE {v.actual.mere:.3g}; benchmark's "
            f"{v.benchmark.mare:.3g} {v.benchmark.mere:.3g})"
        )
        return
    err, ref = (actual.double() - golden).abs().item(), (bench.double() - golden).abs().item()
    bound = 4 * ref + 1e-6 * golden.abs().item() + 1e-12
    assert err <= bound, f"{what}: {actual.item()!r} against the golden {golden.item()!r} (benchmark {bench.item()!r})"


def _compare(dtype, backend, x, w, t, b, cw, dz=False, **opts):
    """The function against the golden and the benchmark: loss, z-loss and every gradient."""
    kw = {k: v for k, v in opts.items() if k not in ("chunk_size", "accum_dtype")}
    dy_shape = t.shape if opts.get("reduction") == "none" else ()
    g = torch.Generator().manual_seed(7)
    dy = torch.randn(dy_shape, generator=g, dtype=torch.float64)
    if not dy_shape and dtype.itemsize == 2:
        dy = torch.tensor(
            1.0, dtype=torch.float64
        )  # 16-bit and a loss gradient other than 1: test_scaled_half_input_grad
    dzv = torch.randn(dy_shape, generator=g, dtype=torch.float64) if dz else None

    def ours(xx, ww, bb):
        return fused_linear_cross_entropy(xx, ww, t, bb, cw, return_z_loss=True, backend=backend, **opts)

    def reference(compute):
        return lambda xx, ww, bb: _reference(xx, ww, t, bb, cw, compute=compute, **kw)

    got = _grads(ours, _leaves(x, w, b), dy, dzv)
    gold = _grads(reference(torch.float64), _leaves(x, w, b, torch.float64), dy, dzv)
    bench = _grads(reference(torch.float32 if dtype != torch.float64 else torch.float64), _leaves(x, w, b), dy, dzv)
    assert got[0].dtype == (torch.float64 if dtype == torch.float64 else torch.float32)  # the loss in fp32, as Liger's
    for i, name in enumerate(("loss", "z_loss")):
        _check(got[i], gold[i], bench[i], name, dtype)
    for name, a, gd, bn, src in zip(("dinput", "dweight", "dbias"), got[2], gold[2], bench[2], (x, w, b)):
        assert a.dtype == src.dtype and a.shape == src.shape, name
        _check(a, gd, bn, name, dtype)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("option", list(OPTIONS))
def test_against_golden(backend, dtype, reduction, option):
    opts = dict(OPTIONS[option])
    x, w, t, b, cw = _inputs(dtype, bias=opts.pop("bias", False), ce_weight=opts.pop("ce_weight", False))
    _compare(dtype, backend, x, w, t, b, cw, reduction=reduction, chunk_size=8, **opts)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("reduction", ["mean", "none"])
def test_head_gradient_summed_in_its_own_dtype(backend, dtype, reduction):
    """accum_dtype=None: the head's and the bias's gradients summed over the chunks in their own dtype (Liger's
    default), against the golden; the 16-bit gradient then owns no fp32 buffer (with the default fp32 sum it is
    narrowed over the front of one, twice its bytes)."""
    x, w, t, b, cw = _inputs(dtype, bias=True)
    _compare(dtype, backend, x, w, t, b, cw, reduction=reduction, chunk_size=8, accum_dtype=None)
    for accum, share in ((None, 1), (torch.float32, 2 if dtype.itemsize == 2 else 1)):
        ww = w.detach().requires_grad_(True)
        fused_linear_cross_entropy(x, ww, t, chunk_size=8, accum_dtype=accum, backend=backend).backward()
        assert ww.grad.dtype == dtype and ww.grad.untyped_storage().nbytes() == share * ww.grad.nbytes, accum


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("chunk_size", [1, 7, 44, 45, 1000, None])
def test_chunk_sizes(backend, chunk_size):
    x, w, t, b, cw = _inputs(torch.float32, bias=True)
    _compare(torch.float32, backend, x, w, t, b, cw, chunk_size=chunk_size, lse_square_scale=1e-3)


@pytest.mark.parametrize("backend", [b for b in BACKENDS if b != "torch"])  # torch's rows are fp32 math
@pytest.mark.parametrize("reduction", ["none", "sum"])
def test_loss_of_equal_rows_is_rounded_once(backend, reduction):
    """Saturated softcap logits make every row's loss one value: the loss (with its z-loss) and the sum over rows
    are the fp64 value rounded once, not one rounding error per row or per term (L0 cases 4873, 185 failed so)."""
    g = torch.Generator().manual_seed(7)
    x = (79.0 + 7.0 * torch.randn(96, 15, generator=g)).clamp(min=1.0)
    w = torch.rand(3088, 15, generator=g) + 0.5  # positive: every logit far past the cap
    t = torch.randint(0, 3088, (96,), generator=g)
    opts = {"softcap": 30.0, "lse_square_scale": 1e-4, "reduction": reduction, "chunk_size": 3}
    loss, z = fused_linear_cross_entropy(x, w, t, return_z_loss=True, backend=backend, **opts)
    ref, ref_z = fused_linear_cross_entropy(x.double(), w.double(), t, return_z_loss=True, backend="torch", **opts)
    assert torch.equal(loss, ref.float()) and torch.equal(z, ref_z.float())


def test_float64_is_the_golden():
    """fp64 inputs on the torch backend: the loss in fp64, equal to the golden to fp64 rounding."""
    x, w, t, b, cw = _inputs(torch.float64, bias=True, ce_weight=True)
    opts = {"label_smoothing": 0.1, "lse_square_scale": 1e-3, "softcap": 6.0}
    leaves = _leaves(x, w, b)
    loss = fused_linear_cross_entropy(leaves[0], leaves[1], t, leaves[2], cw, chunk_size=10, backend="torch", **opts)
    gl = _leaves(x, w, b)
    ref, _ = _reference(gl[0], gl[1], t, gl[2], cw, compute=torch.float64, **opts)
    assert loss.dtype == torch.float64
    torch.testing.assert_close(loss, ref, rtol=1e-12, atol=0)
    for a, r in zip(torch.autograd.grad(loss, leaves), torch.autograd.grad(ref, gl)):
        torch.testing.assert_close(a, r, rtol=1e-10, atol=1e-14)


@pytest.mark.parametrize("backend", BACKENDS)
def test_scaled_half_input_grad(backend):
    """bf16 with a loss gradient g other than 1 ("mean"/"sum"): the head's and bias's gradients are scaled in
    fp32 before their one rounding, the input's was rounded in the forward and is rounded again when scaled; all
    within the dual benchmark."""
    x, w, t, b, _cw = _inputs(torch.bfloat16, bias=True)
    dy = torch.tensor(-1.37)
    got = _grads(
        lambda xx, ww, bb: fused_linear_cross_entropy(xx, ww, t, bb, return_z_loss=True, chunk_size=8, backend=backend),
        _leaves(x, w, b),
        dy,
    )
    gold = _grads(
        lambda xx, ww, bb: _reference(xx, ww, t, bb, None, compute=torch.float64), _leaves(x, w, b, torch.float64), dy
    )
    bench = _grads(lambda xx, ww, bb: _reference(xx, ww, t, bb, None, compute=torch.float32), _leaves(x, w, b), dy)
    for name, a, gd, bn in zip(("dinput", "dweight", "dbias"), got[2], gold[2], bench[2]):
        _check(a, gd, bn, name, torch.bfloat16)


@pytest.mark.parametrize("backend", BACKENDS)
def test_3d_and_non_contiguous_input(backend):
    """input [B, T, H] as a transposed view of [T, B, H] (not contiguous), target [B, T]."""
    x, w, t, b, cw = _inputs(torch.bfloat16, shape=(9, 5))
    xt = x.transpose(0, 1).contiguous().transpose(0, 1)  # same values, strides of [T, B, H]
    assert not xt.is_contiguous()
    _compare(torch.bfloat16, backend, xt, w, t, b, cw, reduction="none", chunk_size=4)
    _compare(torch.bfloat16, backend, xt, w, t, b, cw, chunk_size=4, label_smoothing=0.05)


@pytest.mark.parametrize("backend", BACKENDS)
def test_ignore_index_that_is_a_class(backend):
    """ignore_index may name a real class (here 3): those rows are skipped, int32 targets too."""
    x, w, t, b, cw = _inputs(torch.float32, ignore_index=3)
    _compare(torch.float32, backend, x, w, t.int(), b, cw, ignore_index=3, chunk_size=16)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_gradient_reaching_the_z_loss(backend, reduction):
    """Backpropagating through the returned z-loss as well (its gradient is not dropped as Liger's is)."""
    x, w, t, b, cw = _inputs(torch.float32, bias=True)
    _compare(torch.float32, backend, x, w, t, b, cw, dz=True, reduction=reduction, lse_square_scale=0.05, chunk_size=16)


@pytest.mark.parametrize("backend", BACKENDS)
def test_second_backward_through_a_retained_graph(backend):
    """The forward's gradients serve the first backward; a second one (retain_graph) makes them again, and the
    first results are left as they were."""
    x, w, t, b, _cw = _inputs(torch.float32, bias=True)
    xx, ww, bb = _leaves(x, w, b)
    loss = fused_linear_cross_entropy(xx, ww, t, bb, lse_square_scale=1e-3, chunk_size=16, backend=backend)
    first = torch.autograd.grad(loss, (xx, ww, bb), torch.tensor(0.5), retain_graph=True)
    kept = [g.clone() for g in first]
    second = torch.autograd.grad(loss, (xx, ww, bb), torch.tensor(-2.0))
    for a, k, s in zip(first, kept, second):
        assert torch.equal(a, k)
        torch.testing.assert_close(s, -4 * k, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("backend", BACKENDS)
def test_only_the_gradients_asked_for(backend):
    """A frozen head: input's gradient alone; a detached input: the head's alone."""
    x, w, t, _b, _cw = _inputs(torch.float32)
    xx = x.clone().requires_grad_(True)
    loss = fused_linear_cross_entropy(xx, w, t, chunk_size=16, backend=backend)
    (dx,) = torch.autograd.grad(loss, (xx,))
    ww = w.clone().requires_grad_(True)
    loss2 = fused_linear_cross_entropy(x, ww, t, chunk_size=16, backend=backend)
    (dw,) = torch.autograd.grad(loss2, (ww,))
    gx, gw = _leaves(x, w, None, torch.float64)[:2]
    ref, _ = _reference(gx, gw, t, None, None, compute=torch.float64)
    rx, rw = torch.autograd.grad(ref, (gx, gw))
    torch.testing.assert_close(dx.double(), rx, rtol=1e-4, atol=1e-6)
    torch.testing.assert_close(dw.double(), rw, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("backend", BACKENDS)
def test_autocast(backend):
    """fp32 hidden states and head under torch.autocast(bf16): the logits in bf16 as the composite's are, the
    gradients in fp32 (the parameters' dtype), the loss in fp32; as torch's composite under the same autocast."""
    x, w, t, b, _cw = _inputs(torch.float32, bias=True)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        got = _grads(
            lambda xx, ww, bb: fused_linear_cross_entropy(
                xx, ww, t, bb, return_z_loss=True, chunk_size=16, backend=backend
            ),
            _leaves(x, w, b),
            torch.tensor(1.0),
        )
        bench = _grads(
            lambda xx, ww, bb: _reference(xx, ww, t, bb, None, compute=torch.float32),
            _leaves(x, w, b),
            torch.tensor(1.0),
        )
    gold = _grads(
        lambda xx, ww, bb: _reference(xx, ww, t, bb, None, compute=torch.float64),
        _leaves(x.bfloat16(), w.bfloat16(), b.bfloat16(), torch.float64),
        torch.tensor(1.0),
    )
    assert got[0].dtype == torch.float32 and [g.dtype for g in got[2]] == [torch.float32] * 3
    _check(got[0], gold[0], bench[0], "loss", torch.bfloat16)
    for a, gd, bn in zip(got[2], gold[2], bench[2]):
        _check(a, gd, bn, "gradient", torch.bfloat16)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("reduction", ["mean", "none"])
def test_inference_path(backend, reduction):
    """Without gradients (no_grad, or no input requiring one): the same loss, and no gradient buffer made."""
    x, w, t, b, _cw = _inputs(torch.bfloat16, bias=True)
    with torch.no_grad(), _Sizes() as sizes:
        loss = fused_linear_cross_entropy(
            x.requires_grad_(), w, t, b, reduction=reduction, chunk_size=16, backend=backend
        )
    assert loss.grad_fn is None
    assert max(sizes.numels) < V * H  # no [V, H] weight-gradient accumulator
    ref, _ = _reference(
        *_leaves(x, w, b, torch.float64)[:2], t, b.double(), None, compute=torch.float64, reduction=reduction
    )
    torch.testing.assert_close(loss.double(), ref.detach(), rtol=2e-2, atol=2e-2)


class _Sizes(TorchDispatchMode):
    """The shape and element count of every tensor an aten op allocates (views and in-place results left out)."""

    def __init__(self):
        super().__init__()
        self.shapes, self.numels = [], [0]

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        given = {
            t.untyped_storage().data_ptr() for t in pytree.tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)
        }
        for t in pytree.tree_leaves(out):
            if isinstance(t, torch.Tensor) and t.untyped_storage().data_ptr() not in given:
                self.shapes.append(tuple(t.shape))
                self.numels.append(t.numel())
        return out


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("reduction", ["mean", "none"])
def test_no_logits_tensor(backend, reduction):
    """Forward and backward never make an [N, V] tensor: a chunk's [rows, V] logits are the largest with V."""
    x, w, t, b, _cw = _inputs(torch.bfloat16, bias=True)
    xx, ww, bb = _leaves(x, w, b)
    with _Sizes() as sizes:
        loss = fused_linear_cross_entropy(xx, ww, t, bb, reduction=reduction, chunk_size=8, backend=backend)
        torch.autograd.grad(loss.sum(), (xx, ww, bb))
    logits = [s for s in sizes.shapes if s[-1:] == (V,) and len(s) == 2]
    assert logits and max(s[0] for s in logits) <= 8, sorted(set(logits))  # chunks of 8 rows
    assert max(sizes.numels) <= V * H, sorted(set(sizes.shapes))  # the head's gradient is the largest


@pytest.mark.parametrize("backend", BACKENDS)
def test_empty_and_all_ignored(backend):
    """No rows: mean nan, sum 0, none empty, zero gradients; every target ignored: mean nan (torch's 0 / 0), zero
    gradients."""
    x, w, t, b, _cw = _inputs(torch.float32, bias=True)
    for reduction, expect in (("mean", float("nan")), ("sum", 0.0)):
        xx, ww, bb = _leaves(x[:0], w, b)
        loss = fused_linear_cross_entropy(xx, ww, t[:0], bb, reduction=reduction, backend=backend)
        torch.testing.assert_close(loss, torch.tensor(expect), equal_nan=True)
        for g in torch.autograd.grad(loss, (xx, ww, bb), allow_unused=True, materialize_grads=True):
            assert not g.any()
    assert fused_linear_cross_entropy(x[:0], w, t[:0], reduction="none", backend=backend).shape == (0,)
    xx, ww = _leaves(x, w, None)[:2]
    loss = fused_linear_cross_entropy(xx, ww, torch.full_like(t, -100), chunk_size=16, backend=backend)
    assert loss.isnan()
    assert not any(g.any() for g in torch.autograd.grad(loss, (xx, ww)))


@pytest.mark.parametrize("backend", BACKENDS)
def test_module(backend):
    """FusedLinearCrossEntropyLoss: the function's result; ce_weight a buffer (in the state dict)."""
    x, w, t, b, cw = _inputs(torch.float32, bias=True, ce_weight=True)
    m = FusedLinearCrossEntropyLoss(
        cw, label_smoothing=0.1, lse_square_scale=1e-3, return_z_loss=True, chunk_size=16, backend=backend
    )
    assert "ce_weight" in m.state_dict()
    loss, z = m(x, w, t, b)
    ref = fused_linear_cross_entropy(
        x, w, t, b, cw, label_smoothing=0.1, lse_square_scale=1e-3, return_z_loss=True, chunk_size=16, backend=backend
    )
    assert torch.equal(loss, ref[0]) and torch.equal(z, ref[1])
    assert tileport.FusedLinearCrossEntropyLoss is FusedLinearCrossEntropyLoss
    assert tileport.fused_linear_cross_entropy is fused_linear_cross_entropy


def _raises(exc, match, *args, **kw):
    x, w, t, _b, _cw = _inputs(torch.float32, bias=True)
    call = {"input": x, "lm_weight": w, "target": t} | kw
    with pytest.raises(exc, match=match):
        fused_linear_cross_entropy(*args, **call)


@pytest.mark.parametrize(
    "exc, match, kw",
    [
        (IndexError, r"target 301 .*\[0, 301\)", {"target": torch.full((N,), V)}),
        (IndexError, r"target -1 .*\[0, 301\)", {"target": torch.full((N,), -1)}),
        (TypeError, "target must be int64 or int32", {"target": torch.zeros(N)}),
        (ValueError, r"target must have input.shape\[:-1\]", {"target": torch.zeros(N + 1, dtype=torch.long)}),
        (ValueError, "input's last dimension must be lm_weight's H", {"input": torch.zeros(N, H + 1)}),
        (ValueError, "lm_weight must be 2-dim", {"lm_weight": torch.zeros(V * H)}),
        (ValueError, "at least one row", {"lm_weight": torch.zeros(0, H)}),
        (TypeError, "lm_weight must have input's dtype", {"lm_weight": torch.zeros(V, H, dtype=torch.float64)}),
        (TypeError, "input must have a floating dtype", {"input": torch.zeros(N, H, dtype=torch.long)}),
        (TypeError, "input must be a torch.Tensor", {"input": [[0.0] * H] * N}),
        (ValueError, "at least 1 dimension", {"input": torch.tensor(1.0), "target": torch.tensor(0)}),
        (ValueError, r"bias must be None or of shape \[V\]", {"bias": torch.zeros(V + 1)}),
        (TypeError, "ce_weight must have a floating dtype", {"ce_weight": torch.ones(V, dtype=torch.long)}),
        (ValueError, "tensors must be on one device", {"ce_weight": torch.ones(V, device="meta")}),
        (ValueError, "reduction must be one of", {"reduction": "avg"}),
        (ValueError, r"label_smoothing must be in \[0, 1\]", {"label_smoothing": 1.5}),
        (ValueError, "lse_square_scale must be finite and >= 0", {"lse_square_scale": -1.0}),
        (ValueError, r"softcap must be None \(or 0.0: no cap\) or finite and > 0", {"softcap": -1.0}),
        (TypeError, "softcap must be None or a real number", {"softcap": "30"}),
        (ValueError, "chunk_size must be >= 1", {"chunk_size": 0}),
        (TypeError, "chunk_size must be None or an int", {"chunk_size": 2.0}),
        (TypeError, "return_z_loss must be a bool", {"return_z_loss": 1}),
        (TypeError, "ignore_index must be an int", {"ignore_index": 1.0}),
        (ValueError, r"accum_dtype must be None \(lm_weight's own dtype\), torch.float32", {"accum_dtype": torch.half}),
        (TypeError, "accum_dtype must be None or a torch.dtype, got str", {"accum_dtype": "float32"}),
    ],
)
def test_errors(exc, match, kw):
    _raises(exc, match, **kw)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("z_loss", [0.0, 1e-3])
def test_torch_compile_has_no_graph_break(backend, reduction, z_loss):
    """Both passes are custom ops under torch.compile (fullgraph): the loss and every gradient as in eager mode; the
    targets' range, which reads the data, is still checked when the compiled graph runs."""
    x, w, t, b, _cw = _inputs(torch.float32, bias=True)

    def step(xx, ww, bb):
        out = fused_linear_cross_entropy(
            xx, ww, t, bb, reduction=reduction, lse_square_scale=z_loss, chunk_size=8, backend=backend
        )
        return (out.sum() if reduction == "none" else out) * 0.7

    torch._dynamo.reset()
    compiled = torch.compile(step, fullgraph=True, backend="aot_eager")
    got, ref = _leaves(x, w, b), _leaves(x, w, b)
    loss, expected = compiled(*got), step(*ref)
    loss.backward()
    expected.backward()
    torch.testing.assert_close(loss, expected, rtol=1e-6, atol=1e-7)
    for a, e in zip(got, ref):
        torch.testing.assert_close(a.grad, e.grad, rtol=1e-5, atol=1e-7)
    t[3] = V
    with pytest.raises(IndexError, match=r"target 301 is out of bounds: targets must be in \[0, 301\)"):
        compiled(*_leaves(x, w, b))
