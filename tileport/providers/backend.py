"""A tileport backend through the operator's public interface (or, for a reference function, the function
itself); timed through its public call and, where the spec's forward writes into given outputs, its kernel-only
row ``<name>:kernel``."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from ..backends.registry import REGISTRY
from ..ops.spec import OpSpec
from .base import Defaults
from .timed import in_mode


@dataclass(frozen=True)
class Backend(Defaults):
    name: str

    def run(self, spec: OpSpec, inputs: dict, backward: bool) -> dict[str, torch.Tensor]:
        return spec.run(inputs, self.name, backward)

    def timed(self, spec: OpSpec, inputs: dict, dy: torch.Tensor, mode: str, grads: list[str]) -> dict[str, Callable]:
        b = self.name
        forward, function = spec.forward, spec.function  # looked up once: the timed call is the operator's alone
        if mode != "fwd":
            return {b: in_mode(lambda **kw: function(**kw, backend=b), inputs, dy, mode, grads)}
        out = {}
        if spec.kernel_out:  # preallocated outputs of the same shapes
            outs = tuple(None if o is None else o.clone() for o in forward(**inputs, backend=b))
            out[f"{b}:kernel"] = lambda: forward(**inputs, backend=b, out=outs)
        out[b] = lambda: forward(**inputs, backend=b)
        return out

    def untimed(self, spec: OpSpec) -> str:
        note = REGISTRY.stub(self.name, spec.kernel_op)  # a composed operator: the kernels it runs on
        return f"not implemented: {note}" if note else ""
