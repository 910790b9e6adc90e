"""The causal-LM loss: a ``*ForCausalLM`` (a decoder under ``.model``, an ``lm_head`` Linear) whose forward makes
``[tokens, vocab]`` logits and hands them to transformers' loss gets a forward that, given labels with gradients
on, turns the decoder's hidden states into the loss with tileport's fused linear cross-entropy (no logits made),
or (``loss="cross_entropy"``) makes the logits and takes tileport's cross-entropy. transformers' conventions:
labels shifted by one (or ``shift_labels`` given), ignore index -100, ``num_items_in_batch`` divides a sum,
Gemma 2's ``final_logit_softcapping``."""

from __future__ import annotations

import inspect
from collections.abc import Callable

import torch
import torch.nn.functional as F

from .. import ops

IGNORE = -100
_OUTPUT_FIELDS = ("cache", "past_key_values", "hidden_states", "attentions")


def candidate(module: torch.nn.Module) -> str | None:
    """None for a causal LM this forward fits, else why not (or "not a causal LM")."""
    if not isinstance(getattr(module, "lm_head", None), torch.nn.Linear) or not isinstance(
        getattr(module, "model", None), torch.nn.Module
    ):
        return "not a causal LM"
    params = inspect.signature(type(module).forward).parameters
    if "labels" not in params:
        return "its forward takes no labels"
    return None


def _targets(labels, shift_labels):
    if shift_labels is None:
        shift_labels = F.pad(labels, (0, 1), value=IGNORE)[..., 1:]
    return shift_labels.reshape(-1)


def _softcap(config) -> float | None:
    return getattr(config, "final_logit_softcapping", None)


def forward_for(module: torch.nn.Module, mode: str, backend: str | None) -> Callable:
    """The replacement forward (``mode`` "fused_linear" or "cross_entropy"); the original where no labels are
    given or gradients are off (inference and generation keep their logits)."""
    original = type(module).forward
    signature = inspect.signature(original)
    var_kw = next((n for n, p in signature.parameters.items() if p.kind is p.VAR_KEYWORD), None)

    def forward(self, *args, **kwargs):
        bound = signature.bind(self, *args, **kwargs)
        named = {k: v for k, v in bound.arguments.items() if k not in ("self", var_kw)}
        extra = dict(bound.arguments.get(var_kw, {})) if var_kw else {}
        labels, shift_labels = (
            named.pop("labels", None),
            extra.pop("shift_labels", None),
        )
        if (labels is None and shift_labels is None) or not torch.is_grad_enabled():
            return original(self, *args, **kwargs)
        named.pop("logits_to_keep", None)
        named.pop("return_dict", None)
        items = extra.pop("num_items_in_batch", None)
        outputs = self.model(**named, **extra)
        hidden = outputs[0]
        target = _targets(labels, shift_labels).to(hidden.device)
        reduction = "sum" if items is not None else "mean"
        cap = _softcap(self.config)
        logits = None
        if mode == "fused_linear":
            loss = ops.fused_linear_cross_entropy(
                hidden.reshape(-1, hidden.shape[-1]),
                self.lm_head.weight,
                target,
                bias=self.lm_head.bias,
                ignore_index=IGNORE,
                reduction=reduction,
                softcap=cap,
                backend=backend,
            )
        else:
            logits = self.lm_head(hidden)
            if cap is not None:
                logits = torch.tanh(logits / cap) * cap
            loss = ops.cross_entropy(
                logits.float().reshape(-1, logits.shape[-1]),
                target,
                ignore_index=IGNORE,
                reduction=reduction,
                backend=backend,
            )
        if items is not None:
            loss = loss / (items.to(loss.device) if isinstance(items, torch.Tensor) else items)
        # transformers: optional (tileport[models]), kept out of start-up
        from transformers.modeling_outputs import CausalLMOutputWithPast

        fields = CausalLMOutputWithPast.__dataclass_fields__
        rest = {f: getattr(outputs, f, None) for f in _OUTPUT_FIELDS if f in fields}
        return CausalLMOutputWithPast(loss=loss, logits=logits, **rest)

    return forward
