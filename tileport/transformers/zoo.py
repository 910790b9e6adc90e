"""Small configurations of the model families patching is tested on (built from a config, no weights
downloaded): a few layers, small widths, the family's own features kept (Gemma's offset norm, Gemma 2's
softcapped logits, Phi-3's fused gate_up_proj and partial rotary, the gated DeltaNet layers of Qwen3-Next, Qwen3.5
and OLMo-hybrid beside their full-attention layers)."""

from __future__ import annotations

from pathlib import Path

import torch

FAMILIES = (
    "llama",
    "mistral",
    "qwen2",
    "qwen3",
    "gemma",
    "gemma2",
    "phi3",
    "qwen3_next",
    "qwen3_5",
    "olmo_hybrid",
)
HYBRID = ("qwen3_next", "qwen3_5", "olmo_hybrid")  # the families with gated DeltaNet (linear attention) layers
MODEL_TYPES = {"qwen3_5": "qwen3_5_text"}  # a family's config model_type, where the two differ (Qwen3.5's text model)


def _linear(hidden: int) -> dict:
    """A hybrid family's linear-attention layers: two key heads, four value heads (two values per key head, so the
    grouping is exercised), heads of hidden / 4 columns within 16 and 128 (16 at the tests' width 64, 128 as the
    released models' at the bench's 512)."""
    dim = min(128, max(16, hidden // 4))
    return {
        "linear_num_value_heads": 4,
        "linear_num_key_heads": 2,
        "linear_key_head_dim": dim,
        "linear_value_head_dim": dim,
    }


def _layer_types(layers: int) -> list[str]:
    return ["linear_attention", "full_attention"] * (layers // 2) + ["linear_attention"] * (layers % 2)


def config(
    family: str,
    *,
    vocab: int = 128,
    hidden: int = 64,
    layers: int = 2,
    intermediate: int | None = None,
):
    """A transformers config of ``family`` at the given sizes (heads of 16 columns, two key/value heads), built by
    ``AutoConfig.for_model`` from the family's model type."""
    # transformers: optional (tileport[models]), kept out of start-up
    import transformers

    if family not in FAMILIES:
        raise ValueError(f"unknown model family {family!r}; known: {', '.join(FAMILIES)}")
    heads = max(2, hidden // 16)
    common = {
        "vocab_size": vocab,
        "hidden_size": hidden,
        "intermediate_size": intermediate or hidden * 3 // 2,
        "num_hidden_layers": layers,
        "num_attention_heads": heads,
        "num_key_value_heads": 2,
        "head_dim": 16,
        "max_position_embeddings": 256,
        "tie_word_embeddings": False,
    }
    extra = {
        "gemma2": {"final_logit_softcapping": 30.0, "attn_logit_softcapping": 50.0, "attn_implementation": "eager"},
        "phi3": {"partial_rotary_factor": 0.5, "pad_token_id": 0},
        "qwen3_next": {
            "layer_types": _layer_types(layers),
            **_linear(hidden),
            "num_experts": 0,
            "decoder_sparse_step": 1,
            "partial_rotary_factor": 0.5,
        },
        "qwen3_5": {"layer_types": _layer_types(layers), **_linear(hidden)},
        # OLMo-hybrid's defaults name token ids of its 100k vocabulary; beta scaled by 2 (allow_neg_eigval) kept
        "olmo_hybrid": {
            "layer_types": _layer_types(layers),
            **_linear(hidden),
            "pad_token_id": 0,
            "eos_token_id": None,
        },
    }.get(family, {})
    return transformers.AutoConfig.for_model(MODEL_TYPES.get(family, family), **common, **extra)


def model(family: str, *, seed: int = 0, **sizes):
    """A ``*ForCausalLM`` of ``family`` from ``config``, its weights from ``seed``."""
    # transformers: optional (tileport[models]), kept out of start-up
    import transformers

    cfg = config(family, **sizes)
    torch.manual_seed(seed)
    return transformers.AutoModelForCausalLM.from_config(cfg)


# A family's size in ``tileport bench --model``: where the vocabulary's loss matters (the real vocabularies: Llama
# 2's 32000, Qwen's 151936), two layers of width 512 so a training step takes well under a second on 2 cores.
BENCH = {"hidden": 512, "layers": 2, "intermediate": 1536}
BENCH_VOCAB = {"qwen2": 151936, "qwen3": 151936, "qwen3_next": 151936, "qwen3_5": 248320, "olmo_hybrid": 100352}


def load(name: str, *, bench: bool = False):
    """A config from ``name``: a family of this zoo (``llama``; at the bench's size with ``bench``), a
    ``config.json`` file or a directory holding one (no download). ValueError naming what was looked for."""
    path = Path(name)
    if name in FAMILIES:
        return config(name, vocab=BENCH_VOCAB.get(name, 32000), **BENCH) if bench else config(name)
    if path.is_dir():
        path = path / "config.json"
    if path.is_file():
        # transformers: optional (tileport[models]), kept out of start-up
        import transformers

        return transformers.AutoConfig.from_pretrained(str(path))
    raise ValueError(
        f"no config {name!r}: give a config.json, a directory holding one, or a family ({', '.join(FAMILIES)})"
    )


def skeleton(cfg):
    """The causal LM of ``cfg`` on the meta device (no memory for its weights: patching's probes do not read them)."""
    # transformers: optional (tileport[models]), kept out of start-up
    import transformers

    with torch.device("meta"):
        return transformers.AutoModelForCausalLM.from_config(cfg)
