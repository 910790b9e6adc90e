"""RMSNorm-like modules, found by what they compute: a module holding one 1-D ``weight`` and an epsilon, whose
output on a probe is one of tileport's RMSNorm forms (Llama's ``weight * x_normed.to(dtype)``, the all-fp32
form, Gemma's ``(1 + weight)``, Qwen3-Next's gated norm ``RMSNormGated`` onto ``gated_rms_norm``)."""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from functools import partial

import torch

from .. import ops
from . import probe

EPS_NAMES = ("variance_epsilon", "eps", "epsilon")
D = 64


@dataclass(frozen=True)
class NormForm:
    """How a norm module maps onto tileport: the operator and its keyword arguments."""

    operator: str
    kwargs: dict

    def describe(self) -> str:
        return ", ".join(f"{k}={v!r}" for k, v in self.kwargs.items()) or "defaults"


_PLAIN = {
    "llama": {"casting": "llama"},
    "fp32": {"casting": "fp32"},
    "gemma": {"offset": 1.0, "casting": "fp32"},
    "gemma-llama": {"offset": 1.0, "casting": "llama"},
}
_GATED = {"before": {"norm_before_gate": True}, "after": {"norm_before_gate": False}}


def epsilon(module: torch.nn.Module) -> float | None:
    for name in EPS_NAMES:
        value = getattr(module, name, None)
        if isinstance(value, float) and not isinstance(value, bool):
            return value
    return None


def _tensor_args(module: torch.nn.Module) -> int:
    """How many positional tensors the module's forward takes (1 plain, 2 gated)."""
    params = [
        p
        for p in inspect.signature(module.forward).parameters.values()
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) and p.default is p.empty
    ]
    return len(params)


def candidate(module: torch.nn.Module) -> str | None:
    """Why ``module`` is not an RMSNorm candidate, or None when it is one (to be probed)."""
    own = dict(module.named_parameters(recurse=False))
    if set(own) != {"weight"} or own["weight"].dim() != 1 or any(True for _ in module.children()):
        return "not a norm"
    if epsilon(module) is None:
        return f"no epsilon attribute ({', '.join(EPS_NAMES)})"
    if _tensor_args(module) not in (1, 2):
        return "forward takes neither (x) nor (x, gate)"
    return None


def identify(module: torch.nn.Module) -> NormForm | str:
    """The tileport form ``module`` computes, or why none."""
    eps, gated = epsilon(module), _tensor_args(module) == 2
    gen = probe._generator(1)
    x32 = torch.randn(probe.PROBE_ROWS, D, generator=gen) * 3
    g32 = torch.randn(probe.PROBE_ROWS, D, generator=gen) * 3
    w32 = torch.randn(D, generator=gen) * 0.5

    def module_out(dtype):
        args = (x32.to(dtype), g32.to(dtype)) if gated else (x32.to(dtype),)
        return probe.run_module(module, {"weight": w32.to(dtype)}, *args)

    def form(kwargs, dtype):
        with torch.no_grad():
            if gated:
                return ops.gated_rms_norm(
                    x32.to(dtype),
                    g32.to(dtype),
                    w32.to(dtype),
                    eps,
                    backend="torch",
                    **kwargs,
                )
            return ops.rms_norm(x32.to(dtype), w32.to(dtype), eps, backend="torch", **kwargs)

    forms = _GATED if gated else _PLAIN
    found = probe.pick(module_out, {name: partial(form, kw) for name, kw in forms.items()})
    if found is None:
        kind = "gated RMSNorm (x, gate)" if gated else "RMSNorm"
        return f"computes no {kind} form tileport has on a probe"
    return NormForm("gated_rms_norm" if gated else "rms_norm", dict(forms[found]))


def forward_for(module: torch.nn.Module, form: NormForm, backend: str | None):
    """The replacement forward: tileport's operator with the module's own weight and epsilon; the original
    forward where the weight's dtype is not the input's (mixed precision it does not define)."""
    eps, original = epsilon(module), type(module).forward

    if form.operator == "gated_rms_norm":

        def forward(self, hidden_states, gate):
            if hidden_states.dtype != self.weight.dtype or gate.dtype != hidden_states.dtype:
                return original(self, hidden_states, gate)
            return ops.gated_rms_norm(hidden_states, gate, self.weight, eps, backend=backend, **form.kwargs)

        return forward

    def forward(self, hidden_states):
        if hidden_states.dtype != self.weight.dtype:
            return original(self, hidden_states)
        return ops.rms_norm(hidden_states, self.weight, eps, backend=backend, **form.kwargs)

    return forward
