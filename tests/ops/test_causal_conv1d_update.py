"""causal_conv1d_update's interface (generated from its forward-only declaration) and its front (Dao-AILab's
``causal_conv1d_update``): the checks name the tensor and the dimension; every backend serving it here against a
float64 golden written here and against transformers' own pure-torch fallback; the state updated in place (one
token, a few, more tokens than the state holds); a decode loop equal to causal_conv1d over the whole sequence;
custom ops under opcheck; torch.compile with no graph break and the in-place update kept."""

import pytest
import torch

import tileport
from tileport.backends.registry import available_backends
from tileport.ops import catalog

BACKENDS = [
    b.name for b in available_backends() if b.available and "causal_conv1d_update" in b.serves and not b.interpreted
]
SPEC = catalog.get("causal_conv1d_update")


def _golden(x, state, weight, bias=None, silu=False):
    """(out, new_state) in float64, token by token: xs = [state, x]; out[t] = bias + the W taps ending at S + t."""
    xs = torch.cat((state.double(), x.double()), -1)
    s, t, width = state.shape[2], x.shape[2], weight.shape[1]
    outs = []
    for ti in range(t):
        z = bias.double().expand(x.shape[0], -1) if bias is not None else torch.zeros(x.shape[:2], dtype=torch.float64)
        for w in range(width):
            z = z + weight.double()[:, w] * xs[:, :, s + ti - (width - 1) + w]
        outs.append(z * torch.sigmoid(z) if silu else z)
    return torch.stack(outs, -1), xs[..., t:]


def _inputs(b, d, t, s, w, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (
        torch.randn(b, d, t, generator=g).to(dtype),
        torch.randn(b, d, s, generator=g).to(dtype),
        (torch.randn(d, w, generator=g) / 2).to(dtype),
        (torch.randn(d, generator=g) / 4).to(dtype),
    )


def _tol(dtype):
    return {torch.float32: 3e-6, torch.float16: 2e-3, torch.bfloat16: 1.6e-2}[dtype]


@pytest.mark.parametrize(
    "change,error,message",
    [
        (
            dict(conv_state=torch.randn(2, 5, 2)),
            ValueError,
            r"^the sizes must satisfy S >= W - 1, got S = 2, W = 4$",
        ),
        (
            dict(conv_state=torch.randn(3, 5, 4)),
            ValueError,
            r"^conv_state has B = 3 \(its dim 0\) but x has B = 2 \(its dim 0\)$",
        ),
        (dict(weight=torch.randn(6, 4)), ValueError, r"^weight has D = 6 \(its dim 0\) but x has D = 5 \(its dim 1\)$"),
        (
            dict(conv_state=torch.randn(2, 5, 4).half()),
            TypeError,
            r"^conv_state must have the dtype of x \(torch.float32\), got torch.float16$",
        ),
        (dict(x=torch.randn(5)), ValueError, r"^x must have 3 dimensions \(\[B, D, T\]\), got 1"),
    ],
)
def test_checks_name_the_tensor_and_the_dimension(change, error, message):
    ins = dict(x=torch.randn(2, 5, 1), conv_state=torch.randn(2, 5, 4), weight=torch.randn(5, 4), bias=None) | change
    with pytest.raises(error, match=message):
        SPEC.api.forward(**ins, backend="torch")
    with pytest.raises(error, match=message):
        tileport.causal_conv1d_update(ins["x"], ins["conv_state"], ins["weight"], backend="torch")


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("shape", [(3, 37, 1, 4, 4), (2, 20, 3, 3, 4), (1, 18, 6, 4, 4), (2, 9, 2, 7, 2)])
def test_against_the_golden_and_the_state_in_place(backend, dtype, shape):
    """(B, D, T, S, W): a decode step, a few tokens with S = W - 1, more tokens than the state holds, a long state."""
    b, d, t, s, w = shape
    x, state, weight, bias = _inputs(b, d, t, s, w, dtype)
    want, want_state = _golden(x, state, weight, bias, silu=True)
    before = state.data_ptr()
    out = tileport.causal_conv1d_update(x, state, weight, bias, "silu", backend=backend)
    assert out.dtype == dtype and out.shape == x.shape
    scale = max(want.abs().max().item(), 1.0)
    torch.testing.assert_close(out.double(), want, rtol=_tol(dtype), atol=_tol(dtype) * scale)
    assert state.data_ptr() == before and torch.equal(state.double(), want_state)  # in place, exact copies


@pytest.mark.parametrize("backend", BACKENDS)
def test_one_token_as_b_d_and_transformers_fallback(backend):
    """x [B, D] gives out [B, D]; out and the state equal transformers' ``causal_conv1d_update`` fallback (its
    F.conv1d over [state, x]) in fp32 to rounding, the state bit for bit."""
    transformers = pytest.importorskip("transformers.models.qwen3_next.modeling_qwen3_next")
    x, state, weight, bias = _inputs(4, 24, 1, 4, 4)
    ours, theirs = state.clone(), state.clone()
    out = tileport.causal_conv1d_update(x[..., 0], ours, weight, bias, activation="silu", backend=backend)
    ref = (
        transformers.causal_conv1d_update.__wrapped__
        if hasattr(transformers.causal_conv1d_update, "__wrapped__")
        else None
    )
    fallback = ref or transformers.causal_conv1d_update
    want = fallback(x, theirs, weight, bias, activation="silu")
    assert out.shape == (4, 24)
    torch.testing.assert_close(out, want[..., 0], rtol=3e-6, atol=3e-6)
    assert torch.equal(ours, theirs)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_decode_loop_is_the_whole_sequences_convolution(backend):
    """Prefill with causal_conv1d (its final states start the cache), then tokens one by one with the update: the
    outputs are the convolution of the whole sequence."""
    x, _, weight, bias = _inputs(2, 20, 9, 3, 4)
    whole = tileport.causal_conv1d(x, weight, bias, "silu", backend=backend)
    out, state = tileport.causal_conv1d(x[..., :5], weight, bias, "silu", return_final_states=True, backend=backend)
    state = state.contiguous()
    steps = [
        tileport.causal_conv1d_update(x[..., t], state, weight, bias, "silu", backend=backend) for t in range(5, 9)
    ]
    torch.testing.assert_close(torch.cat((out, torch.stack(steps, -1)), -1), whole, rtol=3e-6, atol=3e-6)


def test_forward_only():
    x, state, weight, bias = _inputs(2, 5, 1, 4, 4)
    x.requires_grad_()
    out = tileport.causal_conv1d_update(x, state, weight, bias, backend="torch")
    assert not out.requires_grad  # the step is not differentiated, as causal-conv1d's
    out_f, new = tileport.causal_conv1d_update_fwd(x.detach(), state, weight, bias, backend="torch")
    assert new.data_ptr() != state.data_ptr() and not torch.equal(new, state)  # the derived form leaves it alone


def test_custom_op_passes_opcheck():
    x, state, weight, bias = _inputs(2, 5, 3, 4, 4)
    for args in ((x, state, weight, bias, "silu", "torch"), (x, state[..., 1:], weight, None, "none", "torch")):
        torch.library.opcheck(torch.ops.tileport.causal_conv1d_update_fwd.default, args)


@pytest.mark.parametrize("backend", ["torch", *[b for b in BACKENDS if b != "torch"][:1]])
def test_fullgraph_compile_keeps_the_in_place_update(backend):
    from torch._dynamo.testing import CompileCounter

    counter = CompileCounter()

    def step(x, state, weight, bias):
        return tileport.causal_conv1d_update(x, state, weight, bias, "silu", backend=backend) * 2

    compiled = torch.compile(step, fullgraph=True, backend=counter, dynamic=True)
    x, state, weight, bias = _inputs(2, 16, 1, 4, 4)
    eager_state = state.clone()
    for t in range(3):
        xt = x[..., 0] + t
        got = compiled(xt, state, weight, bias)
        want = step(xt, eager_state, weight, bias)
        torch.testing.assert_close(got, want, rtol=0, atol=0)
        assert torch.equal(state, eager_state)  # the compiled graph updated the state in place too
    assert counter.frame_count == 1
