"""Gated MLPs, found by structure and confirmed by a probe: ``down_proj(act(gate_proj(x)) * up_proj(x))``
(Llama, Mistral, Qwen, Gemma) and Phi-3's fused ``down_proj(up * act(gate))`` with ``gate, up =
gate_up_proj(x).chunk(2)``; the activation (silu, or gelu exact or tanh) fused with the product by tileport's
swiglu / geglu in eager casting (the activation rounded to the input's dtype first, as the module does)."""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from .. import ops
from . import probe

H, I = 32, 48


@dataclass(frozen=True)
class MlpForm:
    fused: bool  # gate_up_proj (Phi-3) rather than gate_proj and up_proj
    activation: str  # "silu", "gelu", "gelu_tanh"

    @property
    def operator(self) -> str:
        return (
            ("silu_and_mul" if self.fused else "swiglu")
            if self.activation == "silu"
            else ("gelu_and_mul" if self.fused else "geglu")
        )

    def describe(self) -> str:
        return f"{self.activation}, casting='eager'"


def _linear(m, name) -> bool:
    return isinstance(getattr(m, name, None), torch.nn.Linear)


def candidate(module: torch.nn.Module) -> str | None:
    """None where ``module`` has a gated MLP's projections and activation, else why not (or "not an MLP")."""
    separate = _linear(module, "gate_proj") and _linear(module, "up_proj")
    fused = _linear(module, "gate_up_proj")
    if not (separate or fused) or not _linear(module, "down_proj"):
        return "not an MLP"
    if _activation_module(module) is None:
        return "no activation module (act_fn or activation_fn)"
    return None


def _activation_module(module):
    return next(
        (getattr(module, n) for n in ("act_fn", "activation_fn") if callable(getattr(module, n, None))),
        None,
    )


def _activation(act) -> str | None:
    """Which activation ``act`` computes (silu, gelu, gelu_tanh), by a probe."""
    x = torch.linspace(-8, 8, 257)
    with torch.no_grad():
        got = act(x)
    for name, f in (
        ("silu", F.silu),
        ("gelu", F.gelu),
        ("gelu_tanh", lambda v: F.gelu(v, approximate="tanh")),
    ):
        if probe.same(got, f(x), exact=False):
            return name
    return None


def _apply(form: MlpForm, gate, up, backend):
    if form.activation == "silu":
        return ops.swiglu(gate, up, casting="eager", backend=backend)
    approximate = "tanh" if form.activation == "gelu_tanh" else "none"
    return ops.geglu(gate, up, approximate, casting="eager", backend=backend)


def _apply_fused(form: MlpForm, x, backend):
    """The concatenated form (Phi-3's ``gate_up_proj``: gate first, up second)."""
    if form.activation == "silu":
        return ops.silu_and_mul(x, casting="eager", backend=backend)
    approximate = "tanh" if form.activation == "gelu_tanh" else "none"
    return ops.gelu_and_mul(x, approximate, casting="eager", backend=backend)


def _compute(proj, form: MlpForm, x, backend):
    """The MLP with ``proj(name, x)`` for its projections (the module's own, or a probe's random weights)."""
    if form.fused:
        return proj("down_proj", _apply_fused(form, proj("gate_up_proj", x), backend))
    return proj("down_proj", _apply(form, proj("gate_proj", x), proj("up_proj", x), backend))


def identify(module: torch.nn.Module) -> MlpForm | str:
    """The form ``module`` computes, or why it is left: an activation tileport has no fused form of, or an output
    that differs from the form on a probe (a module whose forward does more, such as a dropout or a bias term)."""
    name = _activation(_activation_module(module))
    if name is None:
        return "its activation is not silu or gelu"
    form = MlpForm(fused=not _linear(module, "gate_proj"), activation=name)
    hidden = module.down_proj.out_features
    gen = probe._generator(3)
    params = probe.random_params(module, torch.float32, gen)  # its own weights may be on the meta device
    x = torch.randn(3, hidden, generator=gen)
    was = module.training
    module.eval()
    try:
        want = probe.run_module(module, params, x)
        with torch.no_grad():
            got = _compute(
                lambda n, v: F.linear(v, params[f"{n}.weight"], params.get(f"{n}.bias")),
                form,
                x,
                "torch",
            )
    except Exception as e:  # noqa: BLE001 - a module that does not take [tokens, hidden] is left, with why
        return f"fails on a probe of [tokens, {hidden}]: {type(e).__name__}"
    finally:
        module.train(was)
    if not probe.same(want, got, exact=False):
        return "its output differs from down_proj(act(gate) * up) on a probe"
    return form


def forward_for(form: MlpForm, backend: str | None):
    def forward(self, x):
        return _compute(lambda n, v: getattr(self, n)(v), form, x, backend)

    return forward
