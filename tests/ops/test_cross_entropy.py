"""tileport.cross_entropy against torch.nn.functional.cross_entropy, on every backend that serves it here: at
float64 (the golden: torch's own loss and gradient, to rounding) and at fp32 / bf16 / fp16 within the dual
benchmark (the output and torch's same-dtype loss, both against the fp64 golden); [N, C], [C] and
[N, C, d1, d2] inputs, non-contiguous ones, class-index and class-probability targets, weight, label smoothing,
ignore_index (all ignored too), every reduction, the z-loss and softcap against autograd of the plain fp64
expression, return_z_loss, inplace_backward, the module, the errors, and torch.compile."""

import pytest
import torch

import tileport
from tileport.backends.registry import REGISTRY, available_backends
from tileport.precision import assert_dual_benchmark

F = torch.nn.functional
IGNORE = -100
REDUCTIONS = ("none", "sum", "mean")


def _backends(op="cross_entropy"):
    return [b.name for b in available_backends() if b.available and op in b.serves and not b.interpreted]


BACKENDS = _backends()
FP64 = [b for b in BACKENDS if torch.float64 in REGISTRY.load(b).dtypes["cross_entropy"]]


def _logits(shape, dtype=torch.float64, seed=0, scale=3.0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(shape, generator=g, dtype=torch.float64) * scale).to(dtype)


def _targets(shape, c, seed=0, ignored=0.2):
    g = torch.Generator().manual_seed(seed + 1)
    t = torch.randint(0, c, shape, generator=g)
    t[torch.rand(shape, generator=g) < ignored] = IGNORE
    return t


def _weight(c, dtype=torch.float64, seed=0):
    return (torch.rand(c, generator=torch.Generator().manual_seed(seed + 2), dtype=torch.float64) + 0.5).to(dtype)


def _loss_and_grad(fn, x, dy_seed=3):
    """(loss, dx) of ``fn(leaf)`` with a fixed upstream gradient of the loss' shape."""
    leaf = x.detach().clone().requires_grad_(True)
    out = fn(leaf)
    dy = torch.randn(out.shape, generator=torch.Generator().manual_seed(dy_seed), dtype=torch.float64).to(out.dtype)
    out.backward(dy)
    return out.detach(), leaf.grad


def _plain(x, t, w=None, eps=0.0, scale=0.0, softcap=None, reduction="mean"):
    """(loss, z_loss) as the plain fp64 expression (differentiable): torch's cross-entropy of the capped logits
    plus the z-loss, "mean" dividing it by the count of valid targets."""
    z = softcap * torch.tanh(x / softcap) if softcap else x
    ce = F.cross_entropy(z, t, weight=w, ignore_index=IGNORE, reduction=reduction, label_smoothing=eps)
    valid = t != IGNORE
    zl = torch.where(valid, scale * torch.logsumexp(z, 1) ** 2, 0)
    zl = {"none": zl, "sum": zl.sum(), "mean": zl.sum() / valid.sum()}[reduction]
    return ce + zl, zl


# ---------------------------------------------------------------- float64: torch's semantics to rounding


@pytest.mark.parametrize("backend", FP64)
@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("eps", [0.0, 0.1])
def test_float64_matches_torch(backend, reduction, weighted, eps):
    x, t = _logits((23, 37)), _targets((23,), 37)
    w = _weight(37) if weighted else None
    kw = {"weight": w, "ignore_index": IGNORE, "reduction": reduction, "label_smoothing": eps}
    got = _loss_and_grad(lambda v: tileport.cross_entropy(v, t, **kw, backend=backend), x)
    ref = _loss_and_grad(lambda v: F.cross_entropy(v, t, **kw), x)
    assert got[0].dtype == torch.float64 and got[0].shape == ref[0].shape
    for a, b in zip(got, ref):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("reduction", ["none", "mean"])
def test_spatial_dims_and_one_dim_input(backend, reduction):
    """[N, C, d1, d2] (classes in dim 1) and [C] with a 0-d target, against torch at fp64 (fp32 on a backend
    without fp64, within fp32's rounding)."""
    dtype = torch.float64 if backend in FP64 else torch.float32
    tol = {"rtol": 1e-11, "atol": 1e-12} if dtype == torch.float64 else {"rtol": 2e-5, "atol": 2e-6}
    x, t, w = _logits((3, 11, 4, 5), dtype), _targets((3, 4, 5), 11), _weight(11, dtype)
    kw = {"weight": w, "reduction": reduction, "label_smoothing": 0.05}
    got = _loss_and_grad(lambda v: tileport.cross_entropy(v, t, **kw, backend=backend), x)
    ref = _loss_and_grad(lambda v: F.cross_entropy(v.double(), t, **{**kw, "weight": w.double()}), x.double())
    assert got[0].shape == ref[0].shape and got[1].shape == x.shape
    for a, b in zip(got, ref):
        torch.testing.assert_close(a.double(), b, **tol)
    x1, t1 = _logits((13,), dtype), torch.tensor(4)
    got = _loss_and_grad(lambda v: tileport.cross_entropy(v, t1, reduction=reduction, backend=backend), x1)
    ref = _loss_and_grad(lambda v: F.cross_entropy(v.double(), t1, reduction=reduction), x1.double())
    assert got[0].shape == ()
    for a, b in zip(got, ref):
        torch.testing.assert_close(a.double(), b, **tol)


@pytest.mark.parametrize("backend", BACKENDS)
def test_non_contiguous_inputs_give_the_contiguous_results(backend):
    """A transposed [N, C] (class stride N), a row-strided slice, and a channels-last [N, C, d] (class stride 1:
    a view, no copy) give what their contiguous copies give."""
    dtype = torch.float64 if backend in FP64 else torch.float32
    x, t = _logits((40, 17), dtype), _targets((40,), 17)
    views = [x.t().contiguous().t(), torch.cat([x, x], 1)[:, 5:22]]
    x3 = _logits((4, 9, 6), dtype)
    t3 = _targets((4, 6), 9)
    for v, tt in [(u, t) for u in views] + [(x3.transpose(1, 2).contiguous().transpose(1, 2), t3)]:
        assert not v.is_contiguous()
        a = _loss_and_grad(lambda u, tt=tt: tileport.cross_entropy(u, tt, reduction="none", backend=backend), v)
        b = _loss_and_grad(
            lambda u, tt=tt: tileport.cross_entropy(u, tt, reduction="none", backend=backend), v.contiguous()
        )
        for p, q in zip(a, b):
            torch.testing.assert_close(p, q, rtol=0, atol=0)


# ---------------------------------------------------------------- low precision: within the standard


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("weighted", [False, True])
def test_low_precision_within_the_dual_benchmark(backend, dtype, weighted):
    """Per-row losses and the gradient of their sum: tileport's and torch's own at the same dtype, each against
    torch at fp64 of the same (rounded) logits."""
    x, t = _logits((64, 1000), dtype, seed=4), _targets((64,), 1000, seed=4)
    w = _weight(1000, dtype) if weighted else None
    kw = {"weight": w, "label_smoothing": 0.1}
    w64 = None if w is None else w.double()
    loss = tileport.cross_entropy(x, t, reduction="none", **kw, backend=backend)
    assert loss.dtype == dtype
    gold = F.cross_entropy(x.double(), t, reduction="none", weight=w64, label_smoothing=0.1)
    assert_dual_benchmark(loss, gold, F.cross_entropy(x, t, reduction="none", **kw), dtype=dtype)
    got = _loss_and_grad(lambda v: tileport.cross_entropy(v, t, reduction="sum", **kw, backend=backend), x)[1]
    gold = _loss_and_grad(lambda v: F.cross_entropy(v, t, reduction="sum", weight=w64, label_smoothing=0.1), x.double())
    bench = _loss_and_grad(lambda v: F.cross_entropy(v, t, reduction="sum", **kw), x)[1]
    assert got.dtype == dtype
    assert_dual_benchmark(got, gold[1], bench, dtype=dtype)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("eps", [0.0, 0.1])
def test_an_fp32_weight_beside_16_bit_logits_is_taken_unrounded(backend, eps):
    """Liger-Kernel's users pass an fp32 class weight with bf16 logits (torch refuses it): taken, its values in
    the fp32 math. At fp16 the weights 2e5 and 3e-8 are no fp16 values (inf, 0): rounded, "mean" would be nan."""
    t = _targets((64,), 1000, seed=5)
    w = torch.where(torch.arange(1000) % 2 == 0, 2e5, 3e-8).to(torch.float32)
    for dtype, weight in ((torch.float16, w), (torch.bfloat16, _weight(1000, torch.float32))):
        x = _logits((64, 1000), dtype, seed=5)
        kw = {"weight": weight, "label_smoothing": eps}
        got = _loss_and_grad(lambda v, kw=kw: tileport.cross_entropy(v, t, **kw, backend=backend), x)
        gold = _loss_and_grad(
            lambda v, weight=weight: F.cross_entropy(v, t, weight=weight.double(), label_smoothing=eps), x.double()
        )
        assert got[0].dtype == got[1].dtype == dtype and got[0].isfinite() and got[1].isfinite().all()
        torch.testing.assert_close(got[0].double(), gold[0], rtol=4e-3, atol=0)
        torch.testing.assert_close(got[1].double(), gold[1], rtol=2e-2, atol=2e-2 * gold[1].abs().max().item())
        loss_fn = tileport.CrossEntropyLoss(weight=weight, label_smoothing=eps, backend=backend)
        assert torch.equal(loss_fn(x, t), got[0])


@pytest.mark.parametrize("backend", BACKENDS)
def test_large_vocabulary_and_large_bf16_logits(backend):
    """262144 classes (a row in many blocks) and bf16 logits at magnitude 1e4..6e4: finite, the mean loss and the
    gradient within bf16's rounding of the fp64 golden."""
    x = _logits((4, 262144), torch.float32, seed=5)
    t = torch.tensor([0, 262143, IGNORE, 131072])
    got = _loss_and_grad(lambda v: tileport.cross_entropy(v, t, backend=backend), x)
    ref = _loss_and_grad(lambda v: F.cross_entropy(v, t), x.double())
    torch.testing.assert_close(got[0].double(), ref[0], rtol=1e-5, atol=0)
    torch.testing.assert_close(got[1].double(), ref[1], rtol=1e-4, atol=1e-9)
    big = (_logits((8, 3000), torch.float64, seed=6, scale=1.0) * 1.5e4).clamp(-6e4, 6e4).to(torch.bfloat16)
    tb = _targets((8,), 3000, seed=6, ignored=0.0)
    got = _loss_and_grad(lambda v: tileport.cross_entropy(v, tb, reduction="none", backend=backend), big)
    ref = _loss_and_grad(lambda v: F.cross_entropy(v, tb, reduction="none"), big.double())
    assert bool(torch.isfinite(got[0]).all() and torch.isfinite(got[1]).all())
    torch.testing.assert_close(got[0].double(), ref[0], rtol=2**-7, atol=0)
    torch.testing.assert_close(got[1].double(), ref[1], rtol=0, atol=2**-8)


# ---------------------------------------------------------------- probabilities, ignored batches, z-loss, softcap


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_probability_targets(backend, reduction):
    dtype = torch.float64 if backend in FP64 else torch.float32
    tol = {"rtol": 1e-11, "atol": 1e-12} if dtype == torch.float64 else {"rtol": 2e-5, "atol": 2e-6}
    x, w = _logits((3, 7, 5), dtype), _weight(7, dtype)
    q = torch.softmax(_logits((3, 7, 5), dtype, seed=9), 1)
    kw = {"weight": w, "reduction": reduction, "label_smoothing": 0.2}
    got = _loss_and_grad(lambda v: tileport.cross_entropy(v, q, **kw, backend=backend), x)
    ref = _loss_and_grad(lambda v: F.cross_entropy(v.double(), q.double(), **{**kw, "weight": w.double()}), x.double())
    for a, b in zip(got, ref):
        torch.testing.assert_close(a.double(), b, **tol)
    # with the z-loss and softcap (every row counts: no ignore_index for probabilities)
    x2, q2 = x[:, :, 0].contiguous(), q[:, :, 0].contiguous()

    def plain(v):
        z = 4.0 * torch.tanh(v / 4.0)
        ce = F.cross_entropy(z, q2.double(), reduction=reduction)
        zl = 1e-2 * torch.logsumexp(z, 1) ** 2
        return ce + {"none": zl, "sum": zl.sum(), "mean": zl.mean()}[reduction]

    got = _loss_and_grad(
        lambda v: tileport.cross_entropy(
            v, q2, reduction=reduction, lse_square_scale=1e-2, softcap=4.0, backend=backend
        ),
        x2,
    )
    for a, b in zip(got, _loss_and_grad(plain, x2.double())):
        torch.testing.assert_close(a.double(), b, **tol)


@pytest.mark.parametrize("backend", BACKENDS)
def test_every_target_ignored(backend):
    """As torch: "mean" is nan (0 / 0), "sum" and "none" 0, and the gradient is 0."""
    x, t = _logits((5, 9), torch.float32), torch.full((5,), IGNORE)
    for reduction, expect in (("mean", float("nan")), ("sum", 0.0)):
        loss, dx = _loss_and_grad(
            lambda v, r=reduction: tileport.cross_entropy(v, t, reduction=r, lse_square_scale=1e-3, backend=backend), x
        )
        torch.testing.assert_close(loss, torch.tensor(expect), equal_nan=True)
        assert bool((dx == 0).all())
    assert bool((tileport.cross_entropy(x, t, reduction="none", backend=backend) == 0).all())


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("softcap", [None, 5.0])
def test_z_loss_softcap_and_return_z_loss(backend, reduction, softcap):
    """(loss, z_loss) with the z-loss in the loss, against autograd of the plain fp64 expression; a backward
    through both returned tensors (z_loss' own gradient added)."""
    dtype = torch.float64 if backend in FP64 else torch.float32
    tol = {"rtol": 1e-11, "atol": 1e-12} if dtype == torch.float64 else {"rtol": 3e-5, "atol": 3e-6}
    x, t, w = _logits((19, 31), dtype, seed=7), _targets((19,), 31, seed=7), _weight(31, dtype)
    kw = {"eps": 0.1, "scale": 1e-2, "softcap": softcap, "reduction": reduction}
    leaf = x.detach().clone().requires_grad_(True)
    loss, z = tileport.cross_entropy(
        leaf,
        t,
        w,
        reduction=reduction,
        label_smoothing=0.1,
        lse_square_scale=1e-2,
        softcap=softcap,
        return_z_loss=True,
        backend=backend,
    )
    ref = x.double().requires_grad_(True)
    rloss, rz = _plain(ref, t, w.double(), **kw)
    torch.testing.assert_close(loss.double(), rloss.detach(), **tol)
    torch.testing.assert_close(z.double(), rz.detach(), **tol)
    assert loss.dtype == z.dtype == dtype
    g = torch.Generator().manual_seed(8)
    dl, dz = (torch.randn(rloss.shape, generator=g, dtype=torch.float64) for _ in range(2))
    torch.autograd.backward((loss, z), (dl.to(dtype), dz.to(dtype)))
    torch.autograd.backward((rloss, rz), (dl, dz))
    torch.testing.assert_close(leaf.grad.double(), ref.grad, **tol)


# ---------------------------------------------------------------- inplace_backward, module, compile


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("reduction", ["none", "mean"])
def test_inplace_backward_overwrites_the_input_with_the_gradient(backend, reduction):
    dtype = torch.float64 if backend in FP64 else torch.float32
    x, t, w = _logits((12, 50), dtype), _targets((12,), 50), _weight(50, dtype)
    kw = {"reduction": reduction, "label_smoothing": 0.1, "lse_square_scale": 1e-3, "backend": backend}
    expect = _loss_and_grad(lambda v: tileport.cross_entropy(v, t, w, **kw), x)
    leaf = x.clone().requires_grad_(True)
    loss = tileport.cross_entropy(leaf, t, w, inplace_backward=True, **kw)
    torch.testing.assert_close(loss.detach(), expect[0], rtol=0, atol=0)
    assert not torch.equal(leaf.detach(), x)  # the logits are gone: the scaled gradient is there
    dy = torch.randn(loss.shape, generator=torch.Generator().manual_seed(3), dtype=torch.float64).to(dtype)
    loss.backward(dy)
    torch.testing.assert_close(leaf.grad, expect[1], rtol=1e-12 if dtype == torch.float64 else 1e-6, atol=0)
    with pytest.raises(RuntimeError, match="the backward can run once"):
        leaf2 = x.clone().requires_grad_(True)
        out = tileport.cross_entropy(leaf2, t, w, inplace_backward=True, **kw).sum()
        out.backward(retain_graph=True)
        out.backward()
    with pytest.raises(RuntimeError, match="cannot differentiate the returned z_loss"):
        leaf3 = x.clone().requires_grad_(True)
        _, z = tileport.cross_entropy(leaf3, t, w, inplace_backward=True, return_z_loss=True, **kw)
        z.sum().backward()


@pytest.mark.parametrize("backend", BACKENDS)
def test_module(backend):
    w = _weight(21, torch.float32)
    m = tileport.CrossEntropyLoss(w, label_smoothing=0.1, lse_square_scale=1e-3, return_z_loss=True)
    m.backend = backend
    assert "weight" in m.state_dict() and m.weight is not None
    x, t = _logits((6, 21), torch.float32), _targets((6,), 21)
    loss, z = m(x, t)
    ref = tileport.cross_entropy(
        x, t, w, label_smoothing=0.1, lse_square_scale=1e-3, return_z_loss=True, backend=backend
    )
    assert torch.equal(loss, ref[0]) and torch.equal(z, ref[1])
    assert m.double().weight.dtype == torch.float64
    with pytest.raises(ValueError, match="'avg' is not a valid value for reduction"):
        tileport.CrossEntropyLoss(reduction="avg")


@pytest.mark.parametrize("backend", BACKENDS)
def test_torch_compile(backend):
    x, t, w = _logits((8, 33), torch.float32), _targets((8,), 33), _weight(33, torch.float32)

    def step(v):
        loss = tileport.cross_entropy(
            v, t, w, label_smoothing=0.1, lse_square_scale=1e-3, softcap=10.0, backend=backend
        )
        return loss * 2

    torch._dynamo.reset()
    compiled = torch.compile(step, fullgraph=True)  # the targets' range check breaks no graph
    got = _loss_and_grad(compiled, x)
    ref = _loss_and_grad(step, x)
    for a, b in zip(got, ref):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-7)
    t[5] = 33  # the check runs when the compiled graph does, in training and inference
    for v in (x.detach().requires_grad_(True), x.detach()):
        with pytest.raises(IndexError, match=r"target\[5\] = 33 is outside \[0, C\) = \[0, 33\)"):
            compiled(v)


def test_int32_targets_and_empty_batch():
    x = _logits((6, 9))
    t = _targets((6,), 9)
    assert torch.equal(
        tileport.cross_entropy(x, t.int(), backend="torch"), tileport.cross_entropy(x, t, backend="torch")
    )
    e, te = torch.empty(0, 9, dtype=torch.float64), torch.empty(0, dtype=torch.long)
    assert (
        tileport.cross_entropy(e, te, backend="torch").isnan() and tileport.cross_entropy(e, te, reduction="sum") == 0
    )
    assert tileport.cross_entropy(e, te, reduction="none").shape == (0,)


# ---------------------------------------------------------------- errors


@pytest.mark.parametrize(
    "call, exc, message",
    [
        (
            lambda x, t: tileport.cross_entropy(x, torch.tensor([0, 9, 1])),
            IndexError,
            r"^target\[1\] = 9 is outside \[0, C\) = \[0, 9\) and is not ignore_index = -100$",
        ),
        (lambda x, t: tileport.cross_entropy(x, torch.tensor([0, -3, 1])), IndexError, r"target\[1\] = -3 is outside"),
        (lambda x, t: tileport.cross_entropy(x, torch.tensor([0, -3, 1]), ignore_index=-3), None, None),
        (lambda x, t: tileport.cross_entropy(x.long(), t), TypeError, r"^input must be a floating torch.Tensor"),
        (
            lambda x, t: tileport.cross_entropy(x.half(), t, torch.ones(9, dtype=torch.bfloat16)),
            TypeError,
            r"^weight must have the dtype of input \(torch.float16\) or torch.float32, got torch.bfloat16$",
        ),
        (
            lambda x, t: tileport.cross_entropy(x, t, torch.ones(9, dtype=torch.float16)),
            TypeError,
            r"^weight must have the dtype of input \(torch.float32\), got torch.float16$",
        ),
        (lambda x, t: tileport.cross_entropy(x.half(), t, torch.ones(8)), ValueError, r"weight"),
        (lambda x, t: tileport.cross_entropy(x, t.bool()), TypeError, r"^target must have an integer dtype"),
        (
            lambda x, t: tileport.cross_entropy(x, t[:2]),
            ValueError,
            (
                r"^target of class indices must have shape \(3,\) \(input's \(3, 9\) without its class dimension 1\), "
                r"got "
                r"\(2,\)$"
            ),
        ),
        (
            lambda x, t: tileport.cross_entropy(x, torch.rand(3, 8)),
            ValueError,
            r"^target of class probabilities must have input's shape \(3, 9\), got \(3, 8\)$",
        ),
        (lambda x, t: tileport.cross_entropy(x, t, torch.ones(8)), ValueError, r"weight"),
        (
            lambda x, t: tileport.cross_entropy(x, t, reduction="avg"),
            ValueError,
            r"^'avg' is not a valid value for reduction \(one of: none, sum, mean\)$",
        ),
        (lambda x, t: tileport.cross_entropy(x, t, softcap=0.0), ValueError, r"^softcap must be None or > 0, got 0.0$"),
        (
            lambda x, t: tileport.cross_entropy(x, t, label_smoothing=1.5),
            ValueError,
            r"^label_smoothing must be in \[0, 1\], got 1.5$",
        ),
        (lambda x, t: tileport.cross_entropy(x, t, lse_square_scale=-1.0), ValueError, r"^lse_square_scale must be"),
        (lambda x, t: tileport.cross_entropy(x[0, 0], t), ValueError, r"^input must have at least 1 dimension"),
    ],
)
def test_errors_name_the_problem(call, exc, message):
    x, t = _logits((3, 9), torch.float32), torch.tensor([0, 8, IGNORE])
    if exc is None:
        call(x, t)
        return
    with pytest.raises(exc, match=message):
        call(x, t)
