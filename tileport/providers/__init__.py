"""Everything that produces outputs for a case is a provider: a tileport backend (or a reference function run by
itself), an implementation under test (``--impl``), an upstream original, a plain function (the torch composite,
torch.compile's, a spec's competitor). Each has the name the report shows, runs a case's inputs (the forward, and
with ``backward`` the inputs' gradients), gives its timed calls for a bench group, says what it does not give and
why it cannot be timed, and whether a failing first call is its own finding (a user's implementation) rather
than tileport's error. Which sides verify judges is the task's (its backends); the originals are compared only.

verify's stages and bench iterate providers and never ask their kind; a request's names become providers once
per process (``resolve``). Another machine's recorded run is the benchmark side, in ``verify.competitor``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

import torch

from .. import external
from ..ops.spec import OpSpec
from . import originals
from .backend import Backend
from .function import Compiled, Function, Original
from .implementation import Implementation

__all__ = ["Backend", "Compiled", "Function", "Implementation", "Original", "Provider", "resolve", "upstream"]


class Provider(Protocol):
    name: str
    excused: bool  # a first timed call that raises is reported for it and the bench goes on

    def run(self, spec: OpSpec, inputs: dict, backward: bool) -> dict[str, torch.Tensor]: ...

    def timed(self, spec: OpSpec, inputs: dict, dy: torch.Tensor, mode: str, grads: list[str]) -> dict[str, Callable]:
        """{the bench's provider name: a zero-argument call} for one group's inputs in ``mode``."""
        ...

    def not_judged(self) -> dict[str, str]:
        """{output: why} of the outputs it did not give (listed in the report, never passed)."""
        ...

    def untimed(self, spec: OpSpec) -> str:
        """Why it cannot be timed (a scaffold stub), or ``""``."""
        ...


def resolve(spec: OpSpec, name: str, impls: dict[str, dict]) -> Provider:
    """The provider a request's name stands for: ``impl:<target>`` an implementation (with its ``--arg``
    overrides from ``impls``, by target), any other name a backend."""
    if external.is_impl(name):
        target = external.parse_provider(name)
        return Implementation(external.resolve(spec, target, impls.get(target, {})))
    return Backend(name)


def upstream(spec: OpSpec) -> dict[str, Original]:
    """{original's key: its provider} of the spec's upstream originals that load here (``originals.probe`` says
    which of them run)."""
    return {key: Original(key, fn) for key, (fn, _) in originals.load(spec).items() if fn is not None}
