"""A function in the operator's convention (its spec's input and attribute names as keywords) run on a case: its
forward outputs and, with ``backward``, the gradients of its differentiable inputs. How an upstream original, a
competitor or any other plain function joins a comparison."""

from __future__ import annotations

import inspect
from collections.abc import Callable

import torch

from ..ops.spec import OpSpec


class Unsupported(ValueError):
    """The case sets an attribute the original has no parameter for, at a value other than the default."""


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
