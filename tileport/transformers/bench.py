"""``tileport bench --model CONFIG``: a model's training step (forward, loss, backward, AdamW) and its forward-only
step, tokens per second and peak memory, for the unpatched model, the unpatched model under torch.compile and the
model patched by tileport (eager, and under torch.compile), interleaved in one run (``bench.timing.interleave``),
with what patching replaced."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..bench.memory import peak_bytes, resident_peak_bytes
from ..bench.timing import interleave
from . import zoo
from .patch import patch, unpatch

# "tileport, eager loss": patched but for the loss, so the table says what the fused loss costs or saves apart;
# "tileport, torch.compile": the patched model compiled (tileport's operators are custom ops there)
PROVIDERS = ("eager", "torch.compile", "tileport", "tileport, eager loss", "tileport, torch.compile")


def _compiled(provider: str) -> bool:
    return provider.endswith("torch.compile")


@dataclass(frozen=True)
class ModelRow:
    step: str  # "train" or "forward"
    provider: str
    tokens_per_s: float
    median_ms: float
    tensor_peak_mb: float | None  # tensors allocated through the dispatcher (None: compiled code allocates outside it)
    resident_peak_mb: float | None  # the process's resident rise over one step


def _build(cfg, provider: str, dtype: torch.dtype, seed: int, backend: str | None):
    # transformers: optional (tileport[models]), kept out of start-up
    import transformers

    torch.manual_seed(seed)
    model = transformers.AutoModelForCausalLM.from_config(cfg).to(dtype)
    report = None
    if provider.startswith("tileport"):
        report = patch(model, backend=backend, loss=None if provider == "tileport, eager loss" else "fused_linear")
    return model, report


def _train_step(model, batch, compiled: bool):
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    run = torch.compile(model) if compiled else model

    def step():
        loss = run(input_ids=batch, labels=batch).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss.detach()

    return step


def _forward_step(model, batch, compiled: bool):
    run = torch.compile(model) if compiled else model

    def step():
        with torch.no_grad():
            return run(input_ids=batch).logits

    return step


def run(
    config: str,
    *,
    batch: int = 2,
    seq: int = 256,
    dtype: torch.dtype = torch.bfloat16,
    budget_s: float = 20.0,
    seed: int = 0,
    backend: str | None = None,
    progress=None,
) -> tuple[list[ModelRow], str]:
    """Rows for each step and provider, and the patch report's table. torch.compile may recompile per decorated
    forward: transformers' ``deprecate_kwarg`` wrapper is one code object over every forward it wraps, whose
    guards fail from one to the next, so dynamo's recompile limit is raised for the run (at its default of 8 the
    later forwards fall back to eager and the compiled provider is not what it says)."""
    with torch._dynamo.config.patch(recompile_limit=256, accumulated_recompile_limit=4096):
        return _run(config, batch, seq, dtype, budget_s, seed, backend, progress)


def _run(config, batch, seq, dtype, budget_s, seed, backend, progress):
    cfg = zoo.load(config, bench=True)
    tokens = torch.randint(1, cfg.vocab_size, (batch, seq), generator=torch.Generator().manual_seed(seed))
    models = {p: _build(cfg, p, dtype, seed, backend) for p in PROVIDERS}
    try:
        return _timed(models, tokens, batch, seq, budget_s, progress)
    finally:
        for model, report in models.values():
            if report is not None:
                unpatch(model)  # the modeling module as it was now (a patched model holds itself in a cycle)


def _timed(models, tokens, batch, seq, budget_s, progress):
    rows: list[ModelRow] = []
    for step_name, make in (("train", _train_step), ("forward", _forward_step)):
        if progress:
            progress(f"{step_name} step: {', '.join(PROVIDERS)} interleaved for {budget_s:.0f} s")
        steps = {p: make(models[p][0].train(step_name == "train"), tokens, _compiled(p)) for p in PROVIDERS}
        timings = interleave(steps, budget_s=budget_s, min_rounds=3, max_rounds=200)
        for p in PROVIDERS:
            tensor = None if _compiled(p) else peak_bytes(steps[p]) / 2**20
            resident = resident_peak_bytes(steps[p])
            median = timings[p].median_us / 1e3
            rows.append(
                ModelRow(
                    step_name,
                    p,
                    batch * seq / (median / 1e3),
                    median,
                    tensor,
                    None if resident is None else resident / 2**20,
                )
            )
    return rows, models["tileport"][1].table()


def table(rows: list[ModelRow]) -> str:
    """Markdown: tokens/s and memory per step and provider, speed-up and memory against eager."""
    base = {r.step: r for r in rows if r.provider == "eager"}
    lines = [
        "| step | provider | tokens/s | median ms | vs eager | tensor peak MB | resident rise MB |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]

    def mb(v):
        return "n/a" if v is None else f"{v:.0f}"

    for r in rows:
        lines.append(
            f"| {r.step} | {r.provider} | {r.tokens_per_s:.0f} | {r.median_ms:.1f} | "
            f"{r.tokens_per_s / base[r.step].tokens_per_s:.2f}x | {mb(r.tensor_peak_mb)} | {mb(r.resident_peak_mb)} |"
        )
    return "\n".join(lines)
