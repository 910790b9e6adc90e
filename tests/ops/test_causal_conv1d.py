"""causal_conv1d's interface, generated from its declaration by named dimensions, and its public front (Dao-AILab's
``causal_conv1d_fn``): the checks name the tensor and the dimension; every backend that serves it here against a
float64 golden written here (activation None / silu / swish, initial and final states, seq_idx with padding, the
models' transposed x and other strides); autograd of x, weight, bias and initial_states against autograd of the
golden; the front's argument rules; empty inputs; custom ops under opcheck and torch.compile with no graph break."""

import pytest
import torch

import tileport
from tileport.backends.registry import available_backends
from tileport.ops import catalog

BACKENDS = [b.name for b in available_backends() if b.available and "causal_conv1d" in b.serves and not b.interpreted]
SPEC = catalog.get("causal_conv1d")


def _golden(x, weight, bias=None, init=None, seq=None, silu=False):
    """The contract in float64, token by token: (out, final_states). Without seq_idx every term enters (zeros
    before the start, or the initial states); with it only the token's own sequence's; padding tokens give 0."""
    b, d, t = x.shape
    width = weight.shape[1]
    head = init.double() if init is not None else torch.zeros(b, d, width - 1, dtype=torch.float64)
    xe = torch.cat((head, x.double()), -1)
    outs = []
    for ti in range(t):
        z = bias.double().expand(b, d) if bias is not None else torch.zeros(b, d, dtype=torch.float64)
        for w in range(width):
            s = ti - (width - 1) + w
            term = weight.double()[:, w] * xe[:, :, s + width - 1]
            if seq is not None:
                keep = torch.tensor([s >= 0 and int(seq[i, s]) == int(seq[i, ti]) for i in range(b)])[:, None]
                term = torch.where(keep, term, 0.0)
            z = z + term
        z = z * torch.sigmoid(z) if silu else z
        outs.append(z if seq is None else torch.where((seq[:, ti] >= 0)[:, None], z, 0.0))
    out = torch.stack(outs, -1) if t else torch.zeros(b, d, 0, dtype=torch.float64)
    return out, xe[..., t:]


def _tol(dtype):
    return {torch.float32: 3e-6, torch.float16: 2e-3, torch.bfloat16: 1.6e-2, torch.float64: 1e-12}[dtype]


def _x(b, d, t, dtype=torch.float32, seed=0):
    """x as the models hand it: the transposed view of a [B, T, D] activation (channel-last)."""
    return torch.randn(b, t, d, generator=torch.Generator().manual_seed(seed)).to(dtype).transpose(1, 2)


def _params(d, w, dtype=torch.float32, seed=1):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(d, w, generator=g) / 2).to(dtype), (torch.randn(d, generator=g) / 4).to(dtype)


def _close(got, want, dtype):
    scale = max(want.abs().max().item(), 1.0) if want.numel() else 1.0
    torch.testing.assert_close(got.double(), want, rtol=_tol(dtype), atol=_tol(dtype) * scale)


# ---------------------------------------------------------------- checks from the declaration


@pytest.mark.parametrize(
    "change,error,message",
    [
        (
            dict(weight=torch.randn(6, 4)),
            ValueError,
            r"^weight has D = 6 \(its dim 0\) but x has D = 5 \(its dim 1\)$",
        ),
        (dict(bias=torch.randn(4)), ValueError, r"^bias has D = 4 \(its dim 0\) but x has D = 5 \(its dim 1\)$"),
        (
            dict(initial_states=torch.randn(2, 5, 2)),
            ValueError,
            r"^the sizes must satisfy S \+ 1 == W, got W = 4, S = 2$",
        ),
        (
            dict(initial_states=torch.randn(3, 5, 3)),
            ValueError,
            r"^initial_states has B = 3 \(its dim 0\) but x has B = 2 \(its dim 0\)$",
        ),
        (
            dict(seq_idx=torch.zeros(2, 6, dtype=torch.int32)),
            ValueError,
            r"^seq_idx has T = 6 \(its dim 1\) but x has T = 7 \(its dim 2\)$",
        ),
        (
            dict(seq_idx=torch.zeros(2, 7)),
            TypeError,
            r"^seq_idx must have an integer dtype \(int64 or int32\), got torch.float32$",
        ),
        (
            dict(weight=torch.randn(5, 4).half()),
            TypeError,
            r"^weight must have the dtype of x \(torch.float32\), got torch.float16$",
        ),
        (
            dict(x=torch.randn(2, 5)),
            ValueError,
            r"^x must have 3 dimensions \(\[B, D, T\]\), got 2 \(shape \(2, 5\)\)$",
        ),
        (dict(x=torch.zeros(2, 5, 7, dtype=torch.int64)), TypeError, r"^x must have a floating dtype"),
        (dict(weight=torch.randn(5, 0)), ValueError, r"^the sizes must satisfy W >= 1, got W = 0$"),
        (dict(bias=torch.randn(5, device="meta")), ValueError, r"^bias must be on x's device cpu, got meta"),
        (dict(weight="w"), TypeError, r"^weight must be a torch.Tensor, got str$"),
        (dict(activation="relu"), ValueError, r"^activation must be one of 'none', 'silu', 'swish', None, got 'relu'"),
    ],
)
def test_checks_name_the_tensor_and_the_dimension(change, error, message):
    ins = dict(x=torch.randn(2, 5, 7), weight=torch.randn(5, 4), bias=None, initial_states=None, seq_idx=None)
    attrs = {"activation": change.pop("activation")} if "activation" in change else {}
    ins |= change
    for fn in (SPEC.api.function, SPEC.api.forward):
        with pytest.raises(error, match=message):
            fn(**ins, **attrs, backend="torch")
    if "initial_states" not in change:  # the front passes the same tensors on
        with pytest.raises(error, match=message):
            tileport.causal_conv1d(
                ins["x"], ins["weight"], ins["bias"], seq_idx=ins["seq_idx"], backend="torch", **attrs
            )


def test_backward_checks():
    x, w = torch.randn(2, 5, 7), torch.randn(5, 4)
    with pytest.raises(ValueError, match=r"^dout has T = 6 \(its dim 2\) but x has T = 7 \(its dim 2\)$"):
        tileport.causal_conv1d_bwd(x, w, None, None, None, torch.randn(2, 5, 6), backend="torch")
    with pytest.raises(ValueError, match=r"^the sizes must satisfy S \+ 1 == W, got W = 4, S = 2$"):
        tileport.causal_conv1d_bwd(x, w, None, None, None, torch.randn(2, 5, 7), torch.randn(2, 5, 2))


def test_the_fronts_argument_rules():
    x, (w, b) = _x(2, 5, 7), _params(5, 4)
    ids = torch.zeros(2, 7, dtype=torch.int32)
    with pytest.raises(ValueError, match="seq_idx cannot be combined with initial_states or return_final_states"):
        tileport.causal_conv1d(x, w, b, seq_idx=ids, return_final_states=True)
    with pytest.raises(ValueError, match="seq_idx cannot be combined with initial_states or return_final_states"):
        tileport.causal_conv1d(x, w, b, seq_idx=ids, initial_states=torch.zeros(2, 5, 3))
    with pytest.raises(TypeError, match="return_final_states must be a bool, got int"):
        tileport.causal_conv1d(x, w, b, return_final_states=1)
    with pytest.raises(ValueError, match="final_states_out is written only with return_final_states=True"):
        tileport.causal_conv1d(x, w, b, final_states_out=torch.empty(2, 5, 3))
    with pytest.raises(ValueError, match=r"final_states_out must be a tensor of shape \(2, 5, 3\)"):
        tileport.causal_conv1d(x, w, b, return_final_states=True, final_states_out=torch.empty(2, 5, 2))


# ---------------------------------------------------------------- numerics against the float64 golden


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("activation", [None, "silu", "swish"])
def test_against_the_golden(backend, dtype, activation):
    x, (w, b) = _x(2, 37, 11, dtype), _params(37, 4, dtype)
    out = tileport.causal_conv1d(x, w, b, activation, backend=backend)
    assert out.dtype == dtype and out.shape == x.shape
    _close(out, _golden(x, w, b, silu=activation is not None)[0], dtype)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("t", [1, 2, 9])  # T < W - 1 too: the final states reach into the initial ones
def test_initial_and_final_states(backend, t):
    x, (w, b) = _x(3, 20, t), _params(20, 4)
    h = torch.randn(3, 20, 3)
    out, final = tileport.causal_conv1d(x, w, b, "silu", initial_states=h, return_final_states=True, backend=backend)
    want, want_final = _golden(x, w, b, h, silu=True)
    _close(out, want, torch.float32)
    assert torch.equal(final.double(), want_final)
    out0, final0 = tileport.causal_conv1d(x, w, b, "silu", return_final_states=True, backend=backend)  # zeros before
    _close(out0, _golden(x, w, b, silu=True)[0], torch.float32)
    assert torch.equal(final0.double(), _golden(x, w, b)[1])
    buf = torch.full((3, 20, 3), float("nan"))
    _, written = tileport.causal_conv1d(x, w, b, initial_states=h, return_final_states=True, final_states_out=buf)
    assert written is buf and torch.equal(buf, final)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_packed_batch_restarts_at_each_sequence(backend):
    """seq_idx [B, T]: two sequences per row and padding (-1) give what each sequence alone gives, and 0."""
    x, (w, b) = _x(2, 24, 10), _params(24, 4)
    ids = torch.tensor([[0, 0, 0, 1, 1, 1, 1, 1, -1, -1], [5, 5, 5, 5, 5, 5, 2, 2, 2, 2]], dtype=torch.int32)
    out = tileport.causal_conv1d(x, w, b, "silu", seq_idx=ids, backend=backend)
    _close(out, _golden(x, w, b, seq=ids, silu=True)[0], torch.float32)
    alone = tileport.causal_conv1d(x[:1, :, 3:8], w, b, "silu", backend=backend)  # row 0's second sequence alone
    _close(out[:1, :, 3:8], alone.double(), torch.float32)
    assert torch.count_nonzero(out[0, :, 8:]) == 0


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("layout", ["channel-last", "contiguous", "sliced"])
def test_any_strides(backend, layout):
    """The models' transposed view (read in place), a contiguous [B, D, T], and a slice of a wider activation (the
    qkv projection's channels): the same numbers; out keeps a channel-last x's layout."""
    base = torch.randn(2, 9, 48)  # [B, T, 48]
    x = {
        "channel-last": base.transpose(1, 2),
        "contiguous": base.transpose(1, 2).contiguous(),
        "sliced": base[..., 8:40].transpose(1, 2),
    }[layout]
    w, b = _params(x.shape[1], 3)
    out = tileport.causal_conv1d(x, w, b, "silu", backend=backend)
    _close(out, _golden(x, w, b, silu=True)[0], torch.float32)
    if layout == "channel-last" and backend != "torch":
        assert out.stride(1) == 1  # [B, T, D] memory: the model's next transpose is free


# ---------------------------------------------------------------- autograd, empty inputs, custom ops


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", ["states", "seq_idx"])
def test_autograd_against_the_goldens_gradients(backend, case):
    dtype = torch.float64 if backend == "torch" else torch.float32
    x, (w, b) = _x(2, 19, 8, dtype), _params(19, 4, dtype)
    h = torch.randn(2, 19, 3, dtype=dtype)
    ids = torch.tensor([[0, 0, 1, 1, 1, -1, 2, 2], [0, 0, 0, 0, 0, 0, 0, 0]]) if case == "seq_idx" else None
    leaves = [t.detach().clone().requires_grad_() for t in (x, w, b, h)]
    gx, gw, gb, gh = (t.detach().double().requires_grad_() for t in (x, w, b, h))
    g = torch.Generator().manual_seed(9)
    dout, dfin = torch.randn(2, 19, 8, generator=g), torch.randn(2, 19, 3, generator=g)
    if case == "states":
        out, final = tileport.causal_conv1d(
            leaves[0],
            leaves[1],
            leaves[2],
            "silu",
            initial_states=leaves[3],
            return_final_states=True,
            backend=backend,
        )
        (out * dout.to(dtype)).sum().add((final * dfin.to(dtype)).sum()).backward()
        want_out, want_final = _golden(gx, gw, gb, gh, silu=True)
        (want_out * dout.double()).sum().add((want_final * dfin.double()).sum()).backward()
        pairs = zip(leaves, (gx, gw, gb, gh))
    else:
        out = tileport.causal_conv1d(leaves[0], leaves[1], leaves[2], "silu", seq_idx=ids, backend=backend)
        (out * dout.to(dtype)).sum().backward()
        (_golden(gx, gw, gb, seq=ids, silu=True)[0] * dout.double()).sum().backward()
        pairs = zip(leaves[:3], (gx, gw, gb))
        assert leaves[3].grad is None
    for got, want in pairs:
        _close(got.grad, want.grad, dtype)


@pytest.mark.parametrize("backend", BACKENDS)
def test_empty_inputs(backend):
    w, b = _params(5, 4)
    assert tileport.causal_conv1d(torch.randn(0, 5, 7), w, b, backend=backend).shape == (0, 5, 7)
    h = torch.randn(2, 5, 3, requires_grad=True)
    x = torch.randn(2, 5, 0, requires_grad=True)
    out, final = tileport.causal_conv1d(x, w, b, initial_states=h, return_final_states=True, backend=backend)
    assert out.shape == (2, 5, 0) and torch.equal(final, h.detach())  # T = 0: the final states are the initial ones
    final.sum().backward()
    assert torch.equal(h.grad, torch.ones(2, 5, 3))


def test_custom_ops_pass_opcheck():
    x, (w, b) = _x(2, 5, 6), _params(5, 4)
    h, ids = torch.randn(2, 5, 3), torch.tensor([[0, 0, 1, 1, -1, 2], [3, 3, 3, 3, 3, 3]], dtype=torch.int32)
    dout = torch.randn(2, 5, 6)
    for args, dfin in (
        ((x, w, b, h, None, "silu", "torch"), torch.randn(2, 5, 3)),
        ((x, w, None, None, ids, "none", "torch"), None),
    ):
        torch.library.opcheck(torch.ops.tileport.causal_conv1d_fwd.default, args)
        torch.library.opcheck(torch.ops.tileport.causal_conv1d_bwd.default, (*args[:5], dout, dfin, *args[5:]))


@pytest.mark.parametrize("backend", ["torch", *[b for b in BACKENDS if b != "torch"][:1]])
def test_fullgraph_compile_without_a_graph_break_or_a_recompile_per_length(backend):
    from torch._dynamo.testing import CompileCounter

    counter = CompileCounter()

    def f(x, w, b, h):
        out, final = tileport.causal_conv1d(
            x, w, b, "silu", initial_states=h, return_final_states=True, backend=backend
        )
        return out.sum() + final.sum() * 2

    compiled = torch.compile(f, fullgraph=True, backend=counter, dynamic=True)
    w, b = (t.requires_grad_() for t in _params(6, 4))
    for t in (5, 9, 17):
        x = _x(2, 6, t).requires_grad_()
        h = torch.randn(2, 6, 3, requires_grad=True)
        compiled(x, w, b, h).backward()
        grads = [t_.grad.clone() for t_ in (x, w, b, h)]
        for t_ in (x, w, b, h):
            t_.grad = None
        f(x, w, b, h).backward()
        for got, t_ in zip(grads, (x, w, b, h)):
            torch.testing.assert_close(got, t_.grad, rtol=0, atol=0)
        for t_ in (w, b):
            t_.grad = None
    assert counter.frame_count == 1


@pytest.mark.parametrize("backend", [b for b in BACKENDS if b != "torch"][:1] or ["torch"])
def test_inductor_with_the_models_transposed_x(backend):
    """Inductor checks each custom op's results against its fake's strides: the front hands x over contiguous
    under torch.compile, so the kernels' layout-keeping results match (a channel-last out would fail there)."""
    x = _x(2, 16, 9).requires_grad_()
    w, b = (t.requires_grad_() for t in _params(16, 4))

    def f(x, w, b):
        return (tileport.causal_conv1d(x, w, b, "silu", backend=backend) * 2 + 1).square().sum()

    compiled = torch.compile(f, fullgraph=True)
    compiled(x, w, b).backward()
    got = [t.grad.clone() for t in (x, w, b)]
    for t in (x, w, b):
        t.grad = None
    f(x, w, b).backward()
    for a, t in zip(got, (x, w, b)):
        torch.testing.assert_close(a, t.grad)
