"""A user's implementation of the operator's contract (``external.Impl``), named ``impl:<target>``: judged, and
a call of it that raises is its own finding, reported beside the others."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from .. import external
from ..ops.spec import OpSpec
from .base import Defaults
from .timed import in_mode


@dataclass(frozen=True)
class Implementation(Defaults):
    impl: external.Impl
    excused = True

    @property
    def name(self) -> str:
        return self.impl.provider

    def run(self, spec: OpSpec, inputs: dict, backward: bool) -> dict[str, torch.Tensor]:
        return self.impl.run(spec, inputs, backward)

    def timed(self, spec: OpSpec, inputs: dict, dy: torch.Tensor, mode: str, grads: list[str]) -> dict[str, Callable]:
        return {self.name: in_mode(self.impl.call, inputs, dy, mode, grads)}

    def not_judged(self) -> dict[str, str]:
        return dict(self.impl.not_judged)
