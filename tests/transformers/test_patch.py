"""tileport.patch on the model families it is built for (tiny configs, no download): what it replaces, that the
patched model computes what the original does, that the state dict is unchanged, that unpatch restores the model
bit for bit, and that other models in the process are left alone."""

import pytest
import torch

transformers = pytest.importorskip("transformers")

import tileport
from tileport.transformers import rotary, zoo

# a gated DeltaNet layer's kernel functions: prefill and decode of the delta rule and of the short convolution
LINEAR = {
    "chunk_gated_delta_rule": 1,
    "fused_recurrent_gated_delta_rule": 1,
    "causal_conv1d": 1,
    "causal_conv1d_update": 1,
}
EXPECTED = {  # operators each family's tiny model must have replaced (layers = 2)
    "llama": {"rms_norm": 5, "rope": 2, "swiglu": 2},
    "mistral": {"rms_norm": 5, "rope": 2, "swiglu": 2},
    "qwen2": {"rms_norm": 5, "rope": 2, "swiglu": 2},
    "qwen3": {"rms_norm": 9, "rope": 2, "swiglu": 2},  # q/k norms too
    "gemma": {"rms_norm": 5, "rope": 2, "geglu": 2},
    "gemma2": {"rms_norm": 9, "rope": 2, "geglu": 2},
    "phi3": {"rms_norm": 5, "rope": 2, "silu_and_mul": 2},
    "qwen3_next": {"rms_norm": 7, "gated_rms_norm": 1, "rope": 1, "swiglu": 2, **LINEAR},
    "qwen3_5": {"rms_norm": 7, "gated_rms_norm": 1, "rope": 1, "swiglu": 2, **LINEAR},  # qwen3_5_text
    "olmo_hybrid": {"rms_norm": 7, "gated_rms_norm": 1, "rope": 1, "swiglu": 2, **LINEAR},
}
TOKENS = torch.randint(1, 128, (2, 9), generator=torch.Generator().manual_seed(0))


def _logits(model, tokens=TOKENS):
    with torch.no_grad():
        return model(tokens).logits


def own_forwards(model):
    """The instance forwards bound on the model's modules and on the kernel wrappers transformers attaches to them
    (``_kernel_funcs``): none in a model as built."""
    return [
        w
        for m in model.modules()
        for w in (m, *m.__dict__.get("_kernel_funcs", {}).values())
        if "forward" in w.__dict__
    ]


@pytest.mark.parametrize("family", zoo.FAMILIES)
def test_patch_replaces_by_structure_and_unpatch_restores_bit_for_bit(family):
    model = zoo.model(family).eval()
    before, keys = _logits(model), list(model.state_dict())
    report = tileport.patch(model, loss=None)
    assert report.counts() == EXPECTED[family], report.table()
    assert not report.left, report.table()
    assert list(model.state_dict()) == keys
    torch.testing.assert_close(_logits(model), before, rtol=1e-5, atol=1e-5)
    assert tileport.unpatch(model) and not tileport.unpatch(model)
    assert torch.equal(_logits(model), before)
    assert not own_forwards(model)


def test_other_models_of_the_family_are_left_as_they_were():
    modeling = __import__("transformers.models.llama.modeling_llama", fromlist=["x"])
    rotary_before = rotary.original(modeling.apply_rotary_pos_emb)
    a, b, c = (zoo.model("llama", seed=s).eval() for s in (1, 2, 3))
    want_b = _logits(b)
    tileport.patch(a, loss=None)
    tileport.patch(c, loss=None)
    try:
        assert torch.equal(_logits(b), want_b)
        assert not own_forwards(b)
        tileport.unpatch(a)
        assert modeling.apply_rotary_pos_emb is not rotary_before  # c still patched: the dispatcher stays
    finally:
        tileport.unpatch(a)
        tileport.unpatch(c)
    assert modeling.apply_rotary_pos_emb is rotary_before  # the last unpatch puts the file's global back


def test_the_patched_model_calls_tileport_where_it_says():
    model = zoo.model("llama").eval()
    tileport.patch(model, loss=None, backend="torch")
    seen = []
    from tileport.backends.torch import rms_norm, rope, swiglu

    originals = {m: m.forward for m in (rms_norm, rope, swiglu)}
    try:
        for m, f in originals.items():
            m.forward = lambda *a, _f=f, _n=m.__name__, **k: (
                seen.append(_n),
                _f(*a, **k),
            )[1]
        _logits(model)
    finally:
        for m, f in originals.items():
            m.forward = f
        tileport.unpatch(model)
    assert {n.rsplit(".", 1)[-1] for n in seen} == {"rms_norm", "rope", "swiglu"}


def test_switches_and_dry_run():
    model = zoo.model("qwen3").eval()
    report = tileport.patch(model, rms_norm=False, mlp=False, loss=None, dry_run=True)
    assert report.counts() == {"rope": 2}
    assert not tileport.transformers.patched(model) and not own_forwards(model)


class _CenteredNorm(torch.nn.Module):
    """A LayerNorm without bias dressed as an RMSNorm: weight and eps, but the mean subtracted."""

    def __init__(self, d):
        super().__init__()
        self.weight, self.eps = torch.nn.Parameter(torch.ones(d)), 1e-6

    def forward(self, x):
        x = x - x.mean(-1, keepdim=True)
        return self.weight * x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)


def test_a_module_whose_semantics_differ_is_left_with_why():
    model = torch.nn.Sequential(_CenteredNorm(64))
    report = tileport.patch(model, loss=None)
    assert not report.replaced
    assert [s.detail for s in report.left] == ["computes no RMSNorm form tileport has on a probe"]


def test_bad_arguments():
    with pytest.raises(TypeError, match="torch.nn.Module"):
        tileport.patch("llama")
    with pytest.raises(ValueError, match="loss must be one of"):
        tileport.patch(zoo.model("llama"), loss="focal")
