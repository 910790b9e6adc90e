"""tileport as a kernel source for transformers' own kernel mechanism (the ``kernels`` package's ``kernelize``),
without a network: the layers transformers marks (``@use_kernel_forward_from_hub("RMSNorm")``,
``"RMSNormGated"``) mapped to tileport's operators by local repositories.

    from kernels import Mode, kernelize, use_kernel_mapping
    from tileport.transformers import hub

    with use_kernel_mapping(hub.mapping()):
        kernelize(model, mode=Mode.TRAINING, device="cpu")

A hub layer is stateless and reads the module's own attributes, as ``kernels`` requires; it replaces every marked
module of that name (Llama's ``weight * x_normed.to(dtype)`` form: ``casting="llama"``), where ``tileport.patch``
probes each module's form itself.
"""

from __future__ import annotations

import torch

from .. import ops


class RMSNorm(torch.nn.Module):
    """transformers' marked ``RMSNorm`` (``weight``, ``variance_epsilon``) on ``tileport.rms_norm``."""

    can_torch_compile = True
    has_backward = True

    def forward(self, hidden_states):
        return ops.rms_norm(hidden_states, self.weight, self.variance_epsilon, casting="llama")


class RMSNormGated(torch.nn.Module):
    """transformers' marked ``RMSNormGated`` (Qwen3-Next: norm, weight, then silu(gate)) on
    ``tileport.gated_rms_norm``."""

    can_torch_compile = True
    has_backward = True

    def forward(self, hidden_states, gate=None):
        return ops.gated_rms_norm(
            hidden_states,
            gate,
            self.weight,
            self.variance_epsilon,
            norm_before_gate=True,
        )


class Repository:
    """A ``kernels`` repository holding one tileport layer (``load`` gives its class; nothing is downloaded)."""

    def __init__(self, layer: type[torch.nn.Module]):
        self.layer, self.layer_name = layer, layer.__name__

    def load(self) -> type[torch.nn.Module]:
        return self.layer

    def __repr__(self) -> str:
        return f"tileport:{self.layer_name}"


LAYERS = (RMSNorm, RMSNormGated)


def mapping(devices=("cpu", "cuda")) -> dict:
    """The kernel mapping for ``kernels.use_kernel_mapping``: each tileport layer for each device, every mode."""
    return {layer.__name__: dict.fromkeys(devices, Repository(layer)) for layer in LAYERS}
