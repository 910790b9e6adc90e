"""gated DeltaNet's chunk and recurrent operators through their public (flash-linear-attention) forms: every output
and gradient against the float64 token-by-token recurrence (grouped value heads, K != V, T off the chunk size, T = 1,
packed sequences with segments of one token and of none, initial states given or not, q/k normalized in the kernel,
decays from 0 to -20, 16-bit q/k/v beside fp32 g and beta), the errors fla's users meet, non-contiguous inputs,
torch.compile without a graph break or a recompile per sequence length, and the custom ops under opcheck. Every
backend that serves the operators here (not interpreted) runs the numerics."""

import pytest
import torch

import tileport
from tileport.backends.registry import available_backends
from tileport.ops.chunk_gated_delta_rule.spec import recurrence

BACKENDS = [
    b.name for b in available_backends() if b.available and "chunk_gated_delta_rule" in b.serves and not b.interpreted
]
STEP_BACKENDS = [
    b.name
    for b in available_backends()
    if b.available and "fused_recurrent_gated_delta_rule" in b.serves and not b.interpreted
]
# (B, T, H, HV, K, V, cu_seqlens): grouped values, K != V, T off the chunk, T = 1, packed (segments of 1 and 0)
SHAPES = [
    (2, 70, 2, 4, 16, 8, None),
    (1, 64, 1, 1, 8, 8, None),
    (3, 1, 2, 2, 8, 12, None),
    (1, 150, 2, 2, 8, 8, [0, 1, 65, 65, 66, 150]),
    (1, 129, 1, 3, 4, 6, [0, 128, 129]),
]
TOL = {torch.float32: 2e-5, torch.bfloat16: 3e-2, torch.float16: 4e-3}  # of the golden's largest magnitude


def _inputs(B, T, H, HV, K, V, cu, dtype=torch.float32, seed=0, normalized=True, state=True, g_low=-2.0):
    gen = torch.Generator().manual_seed(seed)

    def rand(*shape):
        return torch.randn(*shape, generator=gen)

    k = rand(B, T, H, K)
    g = torch.rand(B, T, HV, generator=gen) * g_low
    g[:, ::5] = 0.0  # no decay at all for some tokens
    n = B if cu is None else len(cu) - 1
    return dict(
        q=rand(B, T, H, K).to(dtype),
        k=(torch.nn.functional.normalize(k, dim=-1) if normalized else k).to(dtype),
        v=rand(B, T, HV, V).to(dtype),
        g=g,  # fp32 beside 16-bit q, k, v, as fla's users pass it
        beta=torch.rand(B, T, HV, generator=gen).to(dtype),
        initial_state=rand(n, HV, K, V) if state else None,
        cu_seqlens=None if cu is None else torch.tensor(cu),
    )


def _golden(inp, l2norm=False, scale=None):
    up = {k: v.double() if isinstance(v, torch.Tensor) and v.is_floating_point() else v for k, v in inp.items()}
    scale = up["q"].shape[-1] ** -0.5 if scale is None else scale
    return recurrence(
        up["q"], up["k"], up["v"], up["g"], up["beta"], up["initial_state"], up["cu_seqlens"], scale, l2norm
    )


def _close(got, want, dtype, what):
    err = (got.double() - want).abs().max().item()
    top = want.abs().max().item()
    assert err <= TOL[dtype] * max(top, 1e-30), f"{what}: max error {err:.3g} against |golden| {top:.3g}"


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16], ids=str)
def test_outputs_and_gradients_against_the_recurrence(backend, shape, dtype):
    inp = _inputs(*shape, dtype=dtype)
    leaves = {n: t.clone().requires_grad_() for n, t in inp.items() if n != "cu_seqlens" and t is not None}
    o, ht = tileport.chunk_gated_delta_rule(
        leaves["q"], leaves["k"], leaves["v"], leaves["g"], leaves["beta"], initial_state=leaves["initial_state"],
        output_final_state=True, cu_seqlens=inp["cu_seqlens"], backend=backend,
    )  # fmt: skip
    assert o.dtype == dtype and ht.dtype == torch.float32
    gold = {n: t.double().detach().requires_grad_() for n, t in leaves.items()}
    go, ght = recurrence(*(gold[n] for n in ("q", "k", "v", "g", "beta", "initial_state")),
                         inp["cu_seqlens"], shape[4] ** -0.5)  # fmt: skip
    _close(o, go, dtype, "o")
    _close(ht, ght, torch.float32 if dtype == torch.float32 else torch.float16, "final_state")
    gen = torch.Generator().manual_seed(9)
    do, dht = torch.randn(o.shape, generator=gen), torch.randn(ht.shape, generator=gen)
    torch.autograd.backward([o, ht], [do.to(o.dtype), dht])
    torch.autograd.backward([go, ght], [do.to(o.dtype).double(), dht.double()])
    for n, t in leaves.items():
        assert t.grad.dtype == t.dtype, n
        _close(t.grad, gold[n].grad, dtype, f"d{n}")


@pytest.mark.parametrize("backend", BACKENDS)
def test_in_kernel_l2norm_scale_and_strong_decay(backend):
    inp = _inputs(1, 100, 2, 4, 16, 16, None, normalized=False, g_low=-20.0)  # decays down to exp(-20) a token
    inp["q"], inp["k"] = inp["q"] * 30, inp["k"] * 0.01  # magnitudes the normalization removes
    leaves = {n: t.clone().requires_grad_() for n, t in inp.items() if n != "cu_seqlens"}
    o, ht = tileport.chunk_gated_delta_rule(
        *(leaves[n] for n in ("q", "k", "v", "g", "beta")), scale=0.3, initial_state=leaves["initial_state"],
        output_final_state=True, use_qk_l2norm_in_kernel=True, backend=backend,
    )  # fmt: skip
    go, ght = _golden(inp, l2norm=True, scale=0.3)
    _close(o, go, torch.float32, "o")
    _close(ht, ght, torch.float32, "final_state")
    (o.square().sum() + ht.sum()).backward()
    gold = {n: t.double().detach().requires_grad_() for n, t in leaves.items()}
    go, ght = recurrence(*(gold[n] for n in ("q", "k", "v", "g", "beta", "initial_state")), None, 0.3, True)
    (go.square().sum() + ght.sum()).backward()
    for n in leaves:
        _close(leaves[n].grad, gold[n].grad, torch.float32, f"d{n}")


@pytest.mark.parametrize("backend", BACKENDS)
def test_final_state_only_when_asked_and_from_zeros(backend):
    inp = _inputs(2, 20, 1, 2, 8, 8, None, state=False)
    args = [inp[n] for n in ("q", "k", "v", "g", "beta")]
    o, ht = tileport.chunk_gated_delta_rule(*args, backend=backend)
    assert ht is None
    o2, ht2 = tileport.chunk_gated_delta_rule(*args, output_final_state=True, backend=backend)
    go, ght = _golden(inp)
    assert torch.equal(o, o2)
    _close(o, go, torch.float32, "o")
    _close(ht2, ght, torch.float32, "final_state")


@pytest.mark.parametrize("backend", BACKENDS)
def test_non_contiguous_inputs(backend):
    """q, k, v as models make them: slices of one projection, transposed views; g and beta strided."""
    B, T, H, K = 2, 67, 2, 8
    gen = torch.Generator().manual_seed(3)
    qkv = torch.randn(B, T, 3 * H * K, generator=gen)
    q, k, v = (x.view(B, T, H, K) for x in qkv.split(H * K, -1))
    k = torch.nn.functional.normalize(k, dim=-1)
    gb = torch.rand(B, H, T, 2, generator=gen)
    g, beta = -gb[..., 0].transpose(1, 2), gb[..., 1].transpose(1, 2)
    o, ht = tileport.chunk_gated_delta_rule(q, k, v, g, beta, output_final_state=True, backend=backend)
    inp = dict(q=q, k=k, v=v, g=g, beta=beta, initial_state=None, cu_seqlens=None)
    go, ght = _golden(inp)
    _close(o, go, torch.float32, "o")
    _close(ht, ght, torch.float32, "final_state")


def test_errors_name_the_tensor_and_dimension():
    inp = _inputs(2, 10, 2, 4, 8, 8, None)
    q, k, v, g, beta, h0 = (inp[n] for n in ("q", "k", "v", "g", "beta", "initial_state"))
    f = tileport.chunk_gated_delta_rule
    with pytest.raises(ValueError, match=r"v's HV = 3 heads \(its dim 2\) must be a multiple of q's and k's H = 2"):
        f(q, k, v[:, :, :3], g[..., :3], beta[..., :3])
    with pytest.raises(ValueError, match=r"^initial_state has N = 3 \(its dim 0\) but there are 2 sequences"):
        f(q, k, v, g, beta, initial_state=torch.zeros(3, 4, 8, 8))
    with pytest.raises(ValueError, match=r"^initial_state has K = 7 \(its dim 2\) but q has K = 8 \(its dim 3\)$"):
        f(q, k, v, g, beta, initial_state=torch.zeros(2, 4, 7, 8))
    with pytest.raises(ValueError, match=r"^g has T = 9 \(its dim 1\) but q has T = 10 \(its dim 1\)$"):
        f(q, k, v, g[:, :9], beta)
    packed = {n: t[:1] for n, t in inp.items() if n in ("q", "k", "v", "g", "beta")}
    args = [packed[n] for n in ("q", "k", "v", "g", "beta")]
    with pytest.raises(ValueError, match=r"^with cu_seqlens the batch must be packed as B = 1.*got B = 2$"):
        f(q, k, v, g, beta, cu_seqlens=torch.tensor([0, 10]))
    with pytest.raises(ValueError, match=r"^cu_seqlens must rise from 0 to the T = 10 tokens without decreasing"):
        f(*args, cu_seqlens=torch.tensor([0, 6, 4, 10]))
    with pytest.raises(ValueError, match=r"^cu_seqlens must rise from 0 to the T = 10 tokens"):
        f(*args, cu_seqlens=torch.tensor([0, 4, 9]))
    with pytest.raises(TypeError, match=r"^cu_seqlens must be a 1-dim int64 tensor \[N \+ 1\], got torch.int32"):
        f(*args, cu_seqlens=torch.tensor([0, 10], dtype=torch.int32))
    with pytest.raises(ValueError, match=r"^chunk_size must be 16, 32 or 64"):
        f(*args, chunk_size=128)


@pytest.mark.parametrize(
    "argument,value",
    [
        ("use_gate_in_kernel", True),
        ("A_log", torch.zeros(4)),
        ("dt_bias", torch.zeros(4)),
        ("use_beta_sigmoid_in_kernel", True),
        ("allow_neg_eigval", True),
        ("state_v_first", True),
        ("chunk_indices", torch.zeros(1, 2, dtype=torch.long)),
        ("cp_context", object()),
    ],
)
def test_fla_arguments_tileport_lacks_raise_not_implemented(argument, value):
    inp = _inputs(1, 4, 2, 4, 8, 8, None)
    args = [inp[n] for n in ("q", "k", "v", "g", "beta")]
    with pytest.raises(NotImplementedError, match=rf"^chunk_gated_delta_rule: {argument} = .* is not implemented"):
        tileport.chunk_gated_delta_rule(*args, **{argument: value})
    tileport.chunk_gated_delta_rule(*args, state_v_first=False, use_gate_in_kernel=False)  # their idle values pass


def test_no_token_passes_the_states_through():
    inp = _inputs(1, 0, 1, 2, 4, 4, None)
    o, ht = tileport.chunk_gated_delta_rule(
        *(inp[n] for n in ("q", "k", "v", "g", "beta")), initial_state=inp["initial_state"], output_final_state=True
    )
    assert o.shape == (1, 0, 2, 4) and torch.equal(ht, inp["initial_state"])


@pytest.mark.parametrize("backend", ["tilelang", "torch"])
def test_fullgraph_compile_without_a_graph_break_or_a_recompile_per_length(backend):
    from torch._dynamo.testing import CompileCounter

    counter = CompileCounter()

    def f(q, k, v, g, beta, h0):
        o, ht = tileport.chunk_gated_delta_rule(
            q, k, v, g, beta, initial_state=h0, output_final_state=True, use_qk_l2norm_in_kernel=True,
            backend=backend,
        )  # fmt: skip
        return o.square().sum() + ht.sum()

    compiled = torch.compile(f, fullgraph=True, backend=counter, dynamic=True)
    for t in (9, 70, 130):
        inp = _inputs(1, t, 2, 4, 8, 8, None, normalized=False)
        leaves = [inp[n].clone().requires_grad_() for n in ("q", "k", "v", "g", "beta", "initial_state")]
        compiled(*leaves).backward()
        again = [x.detach().clone().requires_grad_() for x in leaves]
        f(*again).backward()
        for a, b in zip(leaves, again):
            torch.testing.assert_close(a.grad, b.grad, rtol=0, atol=0)
    assert counter.frame_count == 1


def test_custom_ops_pass_opcheck():
    """The CPU default's kernels (the torch reference's backward is torch.func.vjp, whose wrapped tensors opcheck's
    dispatch modes cannot read: it runs under torch.compile in the test below)."""
    inp = _inputs(1, 9, 1, 2, 4, 4, [0, 3, 9])
    args = [inp[n] for n in ("q", "k", "v", "g", "beta", "initial_state", "cu_seqlens")]
    torch.library.opcheck(torch.ops.tileport.chunk_gated_delta_rule_fwd.default, (*args, 0.5, "tilelang"))
    do, dht = torch.randn(1, 9, 2, 4), torch.randn(2, 2, 4, 4)
    torch.library.opcheck(torch.ops.tileport.chunk_gated_delta_rule_bwd.default, (*args, do, dht, 0.5, "tilelang"))
    step = [inp[n][:, :2] if n != "initial_state" else inp[n][:1] for n in ("q", "k", "v", "g", "beta")]
    h0 = inp["initial_state"][:1]
    torch.library.opcheck(
        torch.ops.tileport.fused_recurrent_gated_delta_rule_fwd.default, (*step, h0, None, 0.5, "torch")
    )


# ---------------------------------------------------------------- the decode step


@pytest.mark.parametrize("backend", STEP_BACKENDS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_decode_steps_carry_the_state_as_one_chunked_call(backend, dtype):
    """Prefill with the chunk operator, then decode token by token carrying the state: the outputs are those of
    the recurrence over all the tokens."""
    inp = _inputs(3, 12, 2, 4, 8, 16, None, dtype=dtype)
    names = ("q", "k", "v", "g", "beta")
    go, ght = _golden(inp)
    o, state = tileport.chunk_gated_delta_rule(
        *(inp[n][:, :8] for n in names), initial_state=inp["initial_state"], output_final_state=True
    )
    outs = [o]
    for t in range(8, 12):
        step = {n: inp[n][:, t : t + 1] for n in names}
        ot, state = tileport.fused_recurrent_gated_delta_rule(
            step["q"], step["k"], step["v"], g=step["g"], beta=step["beta"], initial_state=state,
            output_final_state=True, backend=backend,
        )  # fmt: skip
        outs.append(ot)
    _close(torch.cat(outs, 1), go, dtype, "o")
    _close(state, ght, torch.float32 if dtype == torch.float32 else torch.float16, "final_state")


@pytest.mark.parametrize("backend", STEP_BACKENDS)
def test_decode_step_packed_without_gate_and_beta(backend):
    inp = _inputs(1, 5, 1, 2, 8, 8, [0, 1, 1, 3, 5])
    inp["g"], inp["beta"] = torch.zeros_like(inp["g"]), torch.ones_like(inp["beta"])
    o, ht = tileport.fused_recurrent_gated_delta_rule(
        inp["q"], inp["k"], inp["v"], initial_state=inp["initial_state"], output_final_state=True,
        use_qk_l2norm_in_kernel=True, cu_seqlens=inp["cu_seqlens"], backend=backend,
    )  # fmt: skip
    go, ght = _golden(inp, l2norm=True)
    _close(o, go, torch.float32, "o")
    _close(ht, ght, torch.float32, "final_state")


def test_decode_step_is_forward_only_and_refuses_what_tileport_lacks():
    inp = _inputs(1, 2, 1, 1, 4, 4, None)
    q = inp["q"].requires_grad_()
    o, _ = tileport.fused_recurrent_gated_delta_rule(q, inp["k"], inp["v"], g=inp["g"], beta=inp["beta"])
    with pytest.raises(NotImplementedError, match="fused_recurrent_gated_delta_rule has no backward"):
        o.sum().backward()
    with pytest.raises(NotImplementedError, match=r"^fused_recurrent_gated_delta_rule: gk = a tensor is not"):
        tileport.fused_recurrent_gated_delta_rule(q, inp["k"], inp["v"], gk=inp["k"])


@pytest.mark.parametrize("state", [False, True])
def test_the_benchmarks_fallback_takes_packed_sequences_one_at_a_time(state):
    """The bench's composite, transformers' pure-torch fallback, knows no cu_seqlens: it runs each sequence alone
    (with or without initial states) and agrees with the operator."""
    pytest.importorskip("transformers")
    from tileport.ops.chunk_gated_delta_rule.spec import composite, example

    ins = example((2, 40, 2, 4, 16, 16, 3), torch.float32, "cpu", torch.Generator().manual_seed(3))
    args = [ins[k] for k in ("q", "k", "v", "g", "beta")]
    h0 = torch.randn(3, 4, 16, 16, generator=torch.Generator().manual_seed(4)) if state else None
    o, final = composite(*args, initial_state=h0, cu_seqlens=ins["cu_seqlens"], use_qk_l2norm_in_kernel=True)
    want, want_final = tileport.chunk_gated_delta_rule(
        *args, initial_state=h0, output_final_state=state, use_qk_l2norm_in_kernel=True, cu_seqlens=ins["cu_seqlens"]
    )
    torch.testing.assert_close(o, want, rtol=1e-4, atol=1e-4)
    assert (final is None) == (not state)
    if state:
        torch.testing.assert_close(final, want_final, rtol=1e-4, atol=1e-4)
