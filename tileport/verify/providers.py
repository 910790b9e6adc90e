"""Everything that produces outputs for a case is a provider: a tileport backend (or a reference function run by
itself), an implementation under test (``--impl``), an upstream original. Each has the name the report shows,
runs a case's inputs (the forward, and with ``backward`` the inputs' gradients), says what it does not give,
and whether it is judged (an original is a side of the cross-backend comparison only). The accuracy stage runs
and judges providers and never asks their kind; a request's names become providers once per process
(``resolve``, held by the ``Judge``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import torch

from .. import external
from ..bench import originals
from ..ops.spec import OpSpec


class Provider(Protocol):
    name: str
    judged: bool

    def run(self, spec: OpSpec, inputs: dict, backward: bool) -> dict[str, torch.Tensor]: ...

    def not_judged(self) -> dict[str, str]:
        """{output: why} of the outputs it did not give (listed in the report, never passed)."""
        ...


@dataclass(frozen=True)
class Backend:
    """A tileport backend through the operator's interface (or, for a reference function, the function itself)."""

    name: str
    judged: bool = True

    def run(self, spec: OpSpec, inputs: dict, backward: bool) -> dict[str, torch.Tensor]:
        return spec.run(inputs, self.name, backward)

    def not_judged(self) -> dict[str, str]:
        return {}


@dataclass(frozen=True)
class Implementation:
    """A user's implementation of the operator's contract (``external.Impl``), named ``impl:<target>``."""

    impl: external.Impl
    judged: bool = True

    @property
    def name(self) -> str:
        return self.impl.provider

    def run(self, spec: OpSpec, inputs: dict, backward: bool) -> dict[str, torch.Tensor]:
        return self.impl.run(spec, inputs, backward)

    def not_judged(self) -> dict[str, str]:
        return dict(self.impl.not_judged)


@dataclass(frozen=True)
class Original:
    """An upstream kernel (Liger-Kernel's, flash-linear-attention's) in the operator's convention: compared with
    the others, not judged."""

    key: str
    fn: object
    judged: bool = False

    @property
    def name(self) -> str:
        return self.name_of(self.key)

    @staticmethod
    def name_of(key: str) -> str:
        """The name the report shows for original ``key`` (known before it is loaded)."""
        return f"{key} (original)"

    def run(self, spec: OpSpec, inputs: dict, backward: bool) -> dict[str, torch.Tensor]:
        return originals.run(spec, self.fn, inputs, backward)

    def not_judged(self) -> dict[str, str]:
        return {}


def resolve(spec: OpSpec, name: str, impls: dict[str, dict]) -> Provider:
    """The provider a request's name stands for: ``impl:<target>`` an implementation (with its ``--arg``
    overrides from ``impls``, by target), any other name a backend."""
    if external.is_impl(name):
        target = external.parse_provider(name)
        return Implementation(external.resolve(spec, target, impls.get(target, {})))
    return Backend(name)


def upstream(spec: OpSpec) -> dict[str, Original]:
    """{original's key: its provider} of the spec's upstream originals (loaded; one that did not load is left out
    by the caller, which asks ``originals.probe`` which run here)."""
    return {key: Original(key, fn) for key, (fn, _) in originals.load(spec).items()}
