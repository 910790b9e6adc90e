"""A patched model where models run: generation with a KV cache (rotary positions offset by the cache length) and
torch.compile without a graph break from tileport's operators."""

import pytest
import torch

pytest.importorskip("transformers")

import tileport
from tileport.transformers import zoo


@pytest.mark.parametrize("family", ["llama", "phi3", "gemma2"])
def test_generate_with_a_kv_cache_gives_the_original_tokens(family):
    model = zoo.model(family, seed=5).eval()
    prompt = torch.randint(1, 128, (2, 7), generator=torch.Generator().manual_seed(1))
    kw = {"max_new_tokens": 8, "do_sample": False, "pad_token_id": 0}
    want = model.generate(prompt, **kw)
    tileport.patch(model)
    try:
        got = model.generate(prompt, **kw)
    finally:
        tileport.unpatch(model)
    assert torch.equal(got, want)


def test_compiled_patched_model_has_no_graph_break_from_tileport():
    model = zoo.model("llama", seed=6).eval()
    tileport.patch(model, loss=None)
    tokens = torch.randint(1, 128, (2, 9), generator=torch.Generator().manual_seed(2))
    try:
        with torch.no_grad():
            want = model(tokens).logits
            explained = torch._dynamo.explain(model)(tokens)
            reasons = [str(b.reason) for b in explained.break_reasons]
            assert not any("tileport" in r for r in reasons), reasons
            torch._dynamo.reset()
            got = torch.compile(model)(tokens).logits
    finally:
        torch._dynamo.reset()
        tileport.unpatch(model)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
