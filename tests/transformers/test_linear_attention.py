"""tileport.patch on the gated DeltaNet layers of Qwen3-Next, Qwen3.5 and OLMo-hybrid: their kernel functions replaced
on each layer instance (the wrappers transformers attaches, ``_kernel_funcs``), the layer's output and gradients as
the original's, packed sequences (which transformers' torch fallback refuses) kept apart, other models untouched,
unpatch putting back exactly what was there, and a layer is found by what its functions compute, not its name."""

import types

import pytest
import torch

transformers = pytest.importorskip("transformers")
kernels = pytest.importorskip("kernels")  # transformers attaches the functions through it (a dependency of 5.x)

import tileport
from tileport.cases import capture
from tileport.ops.chunk_gated_delta_rule.spec import recurrence
from tileport.transformers import zoo

# the largest error over the largest magnitude: fp32 within its rounding (the parameter gradients of A_log and
# dt_bias, sums over every token, reach 1.8e-5), bf16 within 4 of its ulps at the largest element (1.5e-2 seen)
TOL = {torch.float32: 1e-4, torch.bfloat16: 3e-2}


def own_forwards(model):
    """Instance forwards on the model's modules and their kernel wrappers (as in test_patch): none as built."""
    return [
        w
        for m in model.modules()
        for w in (m, *m.__dict__.get("_kernel_funcs", {}).values())
        if "forward" in w.__dict__
    ]


def _layer(model):
    return next(m for m in model.modules() if "_kernel_funcs" in m.__dict__)


def _ops(recording) -> set[str]:
    return {call.op for call in recording.calls}


def _step(layer, x):
    """The layer's output, and the gradients of its input and parameters from a fixed cotangent."""
    x = x.clone().requires_grad_()
    y = layer(x)
    (y.float() * torch.linspace(-1, 1, y.numel()).view_as(y)).sum().backward()
    return {"y": y.detach(), "dx": x.grad, **{n: p.grad for n, p in layer.named_parameters()}}


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("family", zoo.HYBRID)
def test_the_patched_layer_computes_and_differentiates_as_the_original(family, dtype):
    base, mine = (zoo.model(family, seed=7).to(dtype) for _ in range(2))
    tileport.patch(mine)
    x = torch.randn(2, 70, 64, generator=torch.Generator().manual_seed(0)).to(dtype)  # 70 tokens: two chunks
    want = _step(_layer(base), x)
    try:
        with capture.record() as seen:
            got = _step(_layer(mine), x)
    finally:
        tileport.unpatch(mine)
    assert {"chunk_gated_delta_rule", "causal_conv1d"} <= _ops(seen)
    for name, w in want.items():
        err = (got[name].float() - w.float()).abs().max() / w.float().abs().max()
        assert got[name].dtype == w.dtype and err <= TOL[dtype], (name, float(err))


def test_the_decode_step_under_autograd_takes_the_chunked_operator():
    """tileport's decode step is forward only (as fla's): asked for a gradient (a cache in training), the patched
    recurrent function computes the same recurrence through the chunked operator, differentiable."""
    gen = torch.Generator().manual_seed(1)
    inputs = {
        "query": torch.randn(2, 3, 2, 16, generator=gen),
        "key": torch.randn(2, 3, 2, 16, generator=gen),
        "value": torch.randn(2, 3, 4, 16, generator=gen),
        "g": -torch.rand(2, 3, 4, generator=gen),
        "beta": torch.rand(2, 3, 4, generator=gen),
        "initial_state": torch.randn(2, 4, 16, 16, generator=gen),
    }
    base, mine = (zoo.model("qwen3_next", seed=7) for _ in range(2))
    tileport.patch(mine)
    results = []
    try:
        for model in (base, mine):
            leaves = {n: t.clone().requires_grad_() for n, t in inputs.items()}
            step = _layer(model)._kernel_funcs["fused_recurrent_gated_delta_rule"]
            with capture.record() as seen:
                o, final = step(**leaves, output_final_state=True, use_qk_l2norm_in_kernel=True)
            (o.sum() + final.square().sum()).backward()
            results.append(({"o": o.detach(), "final": final.detach()} | {n: t.grad for n, t in leaves.items()}, seen))
    finally:
        tileport.unpatch(mine)
    (want, _), (got, seen) = results
    assert "chunk_gated_delta_rule" in _ops(seen) and "fused_recurrent_gated_delta_rule" not in _ops(seen)
    for name, w in want.items():
        err = (got[name] - w).abs().max() / w.abs().max()
        assert err <= TOL[torch.float32], (name, float(err))


@pytest.mark.parametrize("family", zoo.HYBRID)
def test_packed_sequences_are_kept_apart(family):
    """One row holding a 70-token and a 9-token sequence (transformers' ``cu_seq_lens_q``, positions restarting)
    gives each sequence's own logits: the delta rule's state and the convolution restart at the boundary."""
    model = zoo.model(family, seed=5).eval()
    gen = torch.Generator().manual_seed(3)
    first, second = torch.randint(1, 128, (1, 70), generator=gen), torch.randint(1, 128, (1, 9), generator=gen)
    cu = torch.tensor([0, 70, 79], dtype=torch.int32)
    packed = {
        "input_ids": torch.cat([first, second], 1),
        "position_ids": torch.cat([torch.arange(70), torch.arange(9)])[None],
        "cu_seq_lens_q": cu,
        "cu_seq_lens_k": cu,
        "max_length_q": 70,
        "max_length_k": 70,
        "use_cache": False,  # transformers builds the full attention's packed mask without a cache
    }
    with torch.no_grad():
        want = torch.cat([model(first).logits, model(second).logits], 1)
        with pytest.raises(ValueError, match="packed sequences"):
            model(**packed)  # transformers' torch fallback cannot keep them apart
    tileport.patch(model)
    try:
        with torch.no_grad():
            got = model(**packed).logits
    finally:
        tileport.unpatch(model)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def test_another_model_of_the_class_keeps_its_functions():
    tokens = torch.randint(1, 128, (2, 9), generator=torch.Generator().manual_seed(0))
    a, b = zoo.model("qwen3_5", seed=1).eval(), zoo.model("qwen3_5", seed=2).eval()
    with torch.no_grad():
        want = b(tokens).logits
    tileport.patch(a)
    try:
        assert (
            _layer(a)._kernel_funcs["chunk_gated_delta_rule"] is not _layer(b)._kernel_funcs["chunk_gated_delta_rule"]
        )
        with capture.record() as seen, torch.no_grad():
            got = b(tokens).logits
        assert not own_forwards(b) and not seen.calls  # b runs none of tileport's operators
        assert torch.equal(got, want)
        with capture.record() as seen, torch.no_grad():
            a(tokens)
        assert "chunk_gated_delta_rule" in _ops(seen)
    finally:
        tileport.unpatch(a)


def test_unpatch_puts_back_what_the_wrapper_had():
    """A wrapper already given a forward (as ``kernels.kernelize`` gives a hub kernel's) gets that same forward
    back; the others lose theirs."""
    model = zoo.model("qwen3_next").eval()
    wrappers = _layer(model)._kernel_funcs
    hub = types.MethodType(lambda self, *args, **kwargs: None, wrappers["causal_conv1d_update"])
    wrappers["causal_conv1d_update"].forward = hub
    report = tileport.patch(model, loss=None)
    assert report.counts()["causal_conv1d_update"] == 1
    assert all("forward" in wrappers[n].__dict__ for n in ("chunk_gated_delta_rule", "causal_conv1d_fn"))
    assert wrappers["causal_conv1d_update"].forward is not hub
    tileport.unpatch(model)
    assert wrappers["causal_conv1d_update"].__dict__.pop("forward") is hub
    assert not own_forwards(model)


def test_the_switch_leaves_the_layers():
    report = tileport.patch(zoo.model("olmo_hybrid"), linear_attention=False, dry_run=True)
    assert not {"chunk_gated_delta_rule", "causal_conv1d"} & set(report.counts()) and not report.left
    report = tileport.patch(zoo.model("olmo_hybrid"), rms_norm=False, rope=False, mlp=False, loss=None, dry_run=True)
    assert report.counts() == {
        "chunk_gated_delta_rule": 1,
        "fused_recurrent_gated_delta_rule": 1,
        "causal_conv1d": 1,
        "causal_conv1d_update": 1,
    }


# Layers of no transformers family, holding their functions through the same mechanism: found by what the
# functions compute.


@kernels.use_kernel_forward_from_hub("chunk_gated_delta_rule")
def token_loop(query, key, value, g, beta, initial_state=None, output_final_state=False, **kwargs):
    """The gated delta rule token by token (tileport's golden recurrence)."""
    l2 = kwargs.get("use_qk_l2norm_in_kernel", False)
    o, final = recurrence(query, key, value, g, beta, initial_state, None, query.shape[-1] ** -0.5, l2)
    return o, final if output_final_state else None


@kernels.use_kernel_forward_from_hub("chunk_gated_delta_rule")
def doubled(query, key, value, g, beta, **kwargs):
    """Not the gated delta rule."""
    return value * 2, None


def _mixer(fn):
    @kernels.use_kernelized_func(fn)
    class Mixer(torch.nn.Module):
        def forward(self, q, k, v, g, beta):
            return fn(q, k, v, g=g, beta=beta, use_qk_l2norm_in_kernel=True)[0]

    return Mixer()


def test_a_layer_is_found_by_what_its_functions_compute():
    report = tileport.patch(torch.nn.Sequential(_mixer(token_loop), _mixer(doubled)), loss=None, dry_run=True)
    assert [(s.path, s.operator) for s in report.replaced] == [("0", "chunk_gated_delta_rule")]
    assert [(s.path, s.detail) for s in report.left] == [
        ("1", "its output differs from the gated delta rule on a probe")
    ]


class _Bare(torch.nn.Module):
    """A gated DeltaNet layer's parameters without transformers' kernel wrappers."""

    def __init__(self):
        super().__init__()
        self.conv1d = torch.nn.Conv1d(8, 8, 4, groups=8, padding=3)
        self.A_log, self.dt_bias = torch.nn.Parameter(torch.zeros(2)), torch.nn.Parameter(torch.ones(2))


def test_a_layer_without_kernel_wrappers_is_left_with_why():
    report = tileport.patch(torch.nn.Sequential(_Bare()), loss=None)
    assert not report.replaced
    assert [s.operator for s in report.left] == ["gated DeltaNet"] and "no kernel functions" in report.left[0].detail


def test_a_convolution_activation_tileport_lacks_is_left_with_why():
    cfg = zoo.config("qwen3_5")
    cfg.hidden_act = "gelu"  # the layer's convolution activation (and the MLP's)
    report = tileport.patch(transformers.AutoModelForCausalLM.from_config(cfg), loss=None, dry_run=True)
    assert {"chunk_gated_delta_rule", "fused_recurrent_gated_delta_rule"} <= set(report.counts())
    assert sorted((s.operator, s.detail) for s in report.left) == [
        ("causal_conv1d", "activation 'gelu': tileport's causal_conv1d has none, silu"),
        ("causal_conv1d_update", "activation 'gelu': tileport's causal_conv1d_update has none, silu"),
    ]
