"""A patched model where models run: generation with a cache (rotary positions offset by the cache length; the gated
DeltaNet layers' decode step and conv state) and torch.compile without a graph break from tileport."""

from pathlib import Path

import pytest
import torch

pytest.importorskip("transformers")

import tileport
from tileport.cases import capture
from tileport.transformers import zoo

TILEPORT = str(Path(tileport.__file__).parent)
DECODE = {"fused_recurrent_gated_delta_rule", "causal_conv1d_update"}  # a gated DeltaNet layer's decode step


@pytest.mark.parametrize("family", ["llama", "phi3", "gemma2", *zoo.HYBRID])
def test_generate_with_a_kv_cache_gives_the_original_tokens(family):
    model = zoo.model(family, seed=5).eval()
    prompt = torch.randint(1, 128, (2, 7), generator=torch.Generator().manual_seed(1))
    kw = {"max_new_tokens": 8, "do_sample": False, "pad_token_id": 0}
    want = model.generate(prompt, **kw)
    tileport.patch(model)
    try:
        with capture.record() as seen:
            got = model.generate(prompt, **kw)
    finally:
        tileport.unpatch(model)
    assert torch.equal(got, want)
    if family in zoo.HYBRID:  # the prompt through the chunked operators, each new token through the decode step
        calls = {}
        for call, n in seen.calls.items():
            calls[call.op] = calls.get(call.op, 0) + n
        assert all(calls.get(op) == 7 for op in DECODE), calls
        assert calls["chunk_gated_delta_rule"] == 1 and calls["causal_conv1d"] == 1, calls


def _breaks(model, tokens):
    """(graph breaks, those whose stack passes through tileport's files)."""
    with torch.no_grad():
        explained = torch._dynamo.explain(model)(tokens)
    torch._dynamo.reset()
    ours = [str(b.reason) for b in explained.break_reasons if any(TILEPORT in f.filename for f in b.user_stack)]
    return explained.graph_break_count, ours


@pytest.mark.parametrize("family", ["llama", *zoo.HYBRID])
def test_compiled_patched_model_has_no_graph_break_from_tileport(family):
    model = zoo.model(family, seed=6).eval()
    tokens = torch.randint(1, 128, (2, 9), generator=torch.Generator().manual_seed(2))
    unpatched, _ = _breaks(model, tokens)
    tileport.patch(model, loss=None)
    try:
        patched, ours = _breaks(model, tokens)
        assert not ours and patched == unpatched, (patched, unpatched, ours)
        with torch.no_grad():
            want = model(tokens).logits
            got = torch.compile(model)(tokens).logits
    finally:
        torch._dynamo.reset()
        tileport.unpatch(model)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def test_compiled_decode_steps_carry_the_states():
    """Decode steps of a gated DeltaNet model under torch.compile (tileport's recurrent step and causal_conv1d_update,
    the conv state written in place through the cache): no graph break from tileport, the eager tokens' logits."""
    model = zoo.model("olmo_hybrid", seed=6).eval()
    prompt = torch.randint(1, 128, (2, 9), generator=torch.Generator().manual_seed(2))

    def decode(run, steps=3):
        with torch.no_grad():
            out = model(prompt, use_cache=True)
            logits = []
            for _ in range(steps):
                out = run(out.logits[:, -1:].argmax(-1), cache=out.past_key_values, use_cache=True)
                logits.append(out.logits)
        return torch.cat(logits, 1)

    tileport.patch(model, loss=None)
    try:
        with torch.no_grad():
            out = model(prompt, use_cache=True)
            explained = torch._dynamo.explain(model)(out.logits[:, -1:].argmax(-1), cache=out.past_key_values)
        torch._dynamo.reset()
        assert explained.graph_break_count == 0, [str(b.reason) for b in explained.break_reasons]
        want = decode(model)
        got = decode(torch.compile(model))
    finally:
        torch._dynamo.reset()
        tileport.unpatch(model)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def _training_graphs(model, tokens) -> int:
    """The graphs dynamo makes of a training step (forward with labels, the loss's backward)."""
    from torch._dynamo.testing import CompileCounter

    torch._dynamo.reset()
    counter = CompileCounter()
    out = torch.compile(model, backend=counter)(tokens, labels=tokens)
    out.loss.backward()
    torch._dynamo.reset()
    return counter.frame_count


@pytest.mark.parametrize("family", zoo.FAMILIES)
def test_a_compiled_training_step_patched_by_default_has_no_more_graphs(family):
    """tileport.patch with its defaults (the fused linear loss included) adds no graph to a compiled training step:
    the unpatched model's count or fewer, for every family patch knows."""
    model = zoo.model(family, seed=6).train()
    tokens = torch.randint(1, 128, (2, 9), generator=torch.Generator().manual_seed(2))
    unpatched = _training_graphs(model, tokens)
    tileport.patch(model)
    try:
        patched = _training_graphs(model, tokens)
    finally:
        tileport.unpatch(model)
    assert patched <= unpatched, (family, patched, unpatched)
