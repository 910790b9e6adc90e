"""A plain function in the operator's convention as a provider: the torch composite users write, a spec's
competitor (torch's own fused op), torch.compile's build of the composite, an upstream original (Liger-Kernel's,
flash-linear-attention's kernel)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from ..ops.spec import OpSpec
from . import convention
from .base import Defaults
from .timed import in_mode


@dataclass(frozen=True)
class Function(Defaults):
    name: str
    fn: Callable

    def run(self, spec: OpSpec, inputs: dict, backward: bool) -> dict[str, torch.Tensor]:
        return convention.run(spec, self.fn, inputs, backward)

    def timed(self, spec: OpSpec, inputs: dict, dy: torch.Tensor, mode: str, grads: list[str]) -> dict[str, Callable]:
        return {self.name: in_mode(self.fn, inputs, dy, mode, grads)}


@dataclass(frozen=True)
class Compiled(Function):
    """``torch.compile(fn, dynamic=False)``, built afresh for each group (a static-shape compile per shape, never
    the recompile limit)."""

    def timed(self, spec: OpSpec, inputs: dict, dy: torch.Tensor, mode: str, grads: list[str]) -> dict[str, Callable]:
        torch._dynamo.reset()
        return {self.name: in_mode(torch.compile(self.fn, dynamic=False), inputs, dy, mode, grads)}


@dataclass(frozen=True)
class Original(Function):
    """An upstream kernel under its spec key (its ``name``, the bench's); verify's report names it
    ``name_of(key)``."""

    @staticmethod
    def name_of(key: str) -> str:
        """The name verify's report shows for original ``key`` (known before it is loaded)."""
        return f"{key} (original)"
