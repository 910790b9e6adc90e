"""The upstream kernels an operator was ported from (its spec's ``originals``), as competitors: found or not,
whether they run here (natively on a GPU, under the Triton interpreter on the CPU). Installed with
``pip install tileport[peers]``."""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Callable
from dataclasses import dataclass
from functools import reduce

import torch

from ..ops.spec import OpSpec
from . import convention

PROBE_SHAPE = (4, 64)  # the small input an original must handle, forward and backward, to take part


@dataclass(frozen=True)
class Status:
    """One original: where it lives, whether it is installed and runs here, and why not."""

    op: str
    name: str
    target: str  # module:attribute
    found: bool
    runs: bool
    why: str = ""


def load(spec: OpSpec) -> dict[str, tuple[Callable | None, str]]:
    """{original name: (callable in the spec's convention, or None, and why not)}."""
    out: dict[str, tuple[Callable | None, str]] = {}
    for o in spec.originals:
        package = o.module.split(".")[0]
        if importlib.util.find_spec(package) is None:
            out[o.name] = (None, f"not installed (no package {package!r}; pip install tileport[peers])")
            continue
        try:
            fn = reduce(getattr, o.attribute.split("."), importlib.import_module(o.module))
        except Exception as exc:  # noqa: BLE001 - installed but broken or renamed: say how
            out[o.name] = (None, f"installed, does not import: {type(exc).__name__}: {str(exc)[:200]}")
            continue
        out[o.name] = (o.adapt(fn) if o.adapt else fn, "")
    return out


def probe(spec: OpSpec, device: str = "cpu") -> list[Status]:
    """Each original of ``spec``: found, and whether it runs a small forward and backward here."""
    out = []
    targets = {o.name: f"{o.module}:{o.attribute}" for o in spec.originals}
    for name, (fn, why) in load(spec).items():
        if fn is None:
            out.append(Status(spec.name, name, targets[name], "not installed" not in why, False, why))
            continue
        inputs = spec.example(PROBE_SHAPE, torch.float32, device, torch.Generator().manual_seed(0))
        inputs["dy"] = torch.ones(PROBE_SHAPE, device=device)
        try:
            convention.run(spec, fn, inputs, True)
            out.append(Status(spec.name, name, targets[name], True, True))
        except Exception as exc:  # noqa: BLE001 - the reason it cannot take part is the finding
            msg = " ".join(str(exc).split())[:200]
            out.append(
                Status(
                    spec.name, name, targets[name], True, False, f"installed, fails here: {type(exc).__name__}: {msg}"
                )
            )
    return out
