"""A patched model trains like the original: the same seed and batches (synthetic tokens), a few dozen AdamW
steps, the losses at every step, the final top-k log-probabilities and the parameters compared. Tolerances follow
Liger-Kernel's test/convergence (fp32: loss rtol 1e-5, parameters atol 5e-3; bf16: loss atol 1e-2 relative to a
loss of ~5, parameters atol 1e-2), where tileport's are its own they say why."""

import pytest
import torch

pytest.importorskip("transformers")

import tileport
from tileport.transformers import zoo

STEPS, BATCH, SEQ = 24, 2, 16
TOL = {  # dtype -> (loss rtol, loss atol, top-k log-probabilities atol, param atol)
    torch.float32: (1e-5, 1e-6, 5e-3, 5e-3),
    # bf16: every op's rounding differs by an ulp somewhere (fp32 math rounded once against torch's per-op
    # rounding), and AdamW's normalised steps carry that into the parameters; Liger's bf16 tolerances.
    torch.bfloat16: (1e-2, 1e-2, 1e-1, 1e-2),
}


def _batches(vocab):
    g = torch.Generator().manual_seed(7)
    return [torch.randint(1, vocab, (BATCH, SEQ), generator=g) for _ in range(STEPS)]


def _train(model, batches):
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    losses = []
    for b in batches:
        out = model(b, labels=b)
        out.loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(out.loss.item())
    with torch.no_grad():
        logprobs = model(batches[0]).logits.float().log_softmax(-1)
    return (
        losses,
        logprobs.topk(20, -1).values,
        {n: p.detach().float() for n, p in model.named_parameters()},
    )


CASES = [(f, "fused_linear") for f in zoo.FAMILIES] + [("llama", "cross_entropy")]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize(("family", "loss_mode"), CASES, ids=[f"{f}-{m}" for f, m in CASES])
def test_a_patched_model_trains_like_the_original(family, loss_mode, dtype):
    batches = _batches(128)
    base = zoo.model(family, seed=3).to(dtype).train()
    mine = zoo.model(family, seed=3).to(dtype).train()
    report = tileport.patch(mine, loss=loss_mode)
    assert report.replaced and not report.left, report.table()
    want_losses, want_logits, want_params = _train(base, batches)
    try:
        got_losses, got_logits, got_params = _train(mine, batches)
    finally:
        tileport.unpatch(mine)
    rtol, atol, topk_atol, param_atol = TOL[dtype]
    torch.testing.assert_close(torch.tensor(got_losses), torch.tensor(want_losses), rtol=rtol, atol=atol)
    torch.testing.assert_close(got_logits, want_logits, rtol=1e-5, atol=topk_atol)  # the top-20 log-probabilities
    for name, p in want_params.items():
        torch.testing.assert_close(
            got_params[name],
            p,
            rtol=1e-5 if dtype == torch.float32 else 1e-2,
            atol=param_atol,
            msg=name,
        )


def test_a_training_step_with_the_fused_loss_never_calls_lm_head():
    model = zoo.model("qwen3", seed=4).train()
    tileport.patch(model)
    batch = _batches(128)[0]

    def refuse(module, args):
        raise AssertionError("lm_head was called: [tokens, vocab] logits were made")

    handle = model.lm_head.register_forward_pre_hook(refuse)
    try:
        out = model(batch, labels=batch)
        out.loss.backward()
    finally:
        handle.remove()
        tileport.unpatch(model)
    assert out.logits is None and model.lm_head.weight.grad is not None
