"""The upstream kernels an operator was ported from (its spec's ``originals``), as competitors: found or not,
whether they run here (natively on a GPU, under the Triton interpreter on the CPU), and their outputs for a
case, for verify's cross-backend table. Installed with ``pip install tileport[peers]``."""

from __future__ import annotations

import importlib
import importlib.util
import inspect
from collections.abc import Callable
from dataclasses import dataclass
from functools import reduce

import torch

from ..ops.spec import OpSpec

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


class Unsupported(ValueError):
    """The case sets an attribute the original has no parameter for, at a value other than the default."""


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


def run(spec: OpSpec, fn: Callable, inputs: dict, backward: bool) -> dict[str, torch.Tensor]:
    """{output name: tensor} of an original for a case's inputs: its forward outputs in the spec's order and,
    with ``backward`` and a single output, the gradients of the inputs (``dy`` as the output's gradient)."""
    params = inspect.signature(fn).parameters
    kwargs = {t.name: inputs[t.name] for t in spec.inputs if inputs.get(t.name) is not None}
    for a in spec.attrs + spec.case_attrs:
        if a.name in inputs and a.name not in params:
            if inputs[a.name] != a.default:
                raise Unsupported(f"no parameter {a.name} (the case sets {a.name}={inputs[a.name]!r})")
        elif a.name in inputs:
            kwargs[a.name] = inputs[a.name]
    grads = {
        f"d{k}": k for k, v in kwargs.items() if isinstance(v, torch.Tensor) and f"d{k}" in {g.name for g in spec.grads}
    }
    backward = backward and "dy" in inputs
    if backward:
        kwargs |= {k: kwargs[k].detach().requires_grad_(True) for k in grads.values()}
    with torch.enable_grad() if backward else torch.no_grad():
        outs = fn(**kwargs)
    outs = tuple(outs) if isinstance(outs, (tuple, list)) else (outs,)
    result = {t.name: o.detach() for t, o in zip(spec.outputs, outs)}
    if backward and len(outs) == 1:
        leaves = [kwargs[k] for k in grads.values()]
        for name, g in zip(grads, torch.autograd.grad(outs[0], leaves, inputs["dy"], allow_unused=True)):
            if g is not None:
                result[name] = g
    return result


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
            run(spec, fn, inputs, True)
            out.append(Status(spec.name, name, targets[name], True, True))
        except Exception as exc:  # noqa: BLE001 - the reason it cannot take part is the finding
            msg = " ".join(str(exc).split())[:200]
            out.append(
                Status(
                    spec.name, name, targets[name], True, False, f"installed, fails here: {type(exc).__name__}: {msg}"
                )
            )
    return out
