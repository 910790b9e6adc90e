"""The providers ``tileport bench`` times side by side for one (operator, mode, shape, dtype): the ones under
test (tileport's backends, a user's implementations) and the baselines the spec names (torch's own fused op
where one exists, the torch composite users write, eager and torch.compile, the upstream originals on a GPU),
each giving its timed calls for the group's inputs, drawn once from a fixed seed."""

from __future__ import annotations

from collections.abc import Callable

import torch

import tileport

from ..ops.catalog import get as get_spec
from ..ops.spec import OpSpec
from ..providers import Compiled, Function, Provider, upstream


def group_inputs(spec: OpSpec, shape, dtype, device="cpu") -> tuple[dict, torch.Tensor, list[str]]:
    """(inputs, dy, the differentiable tensor inputs' names: those with a gradient ``d<name>`` in the spec) of one
    group, drawn from a fixed seed: every provider, and any other harness timing the same group, gets the same
    tensors."""
    g = torch.Generator().manual_seed(0)
    inputs = spec.example(shape, dtype, device, g)
    first = inputs.get(spec.inputs[0].name)  # dy in the primary input's shape (a benchmark shape may name more sizes)
    dy = torch.randn(first.shape if isinstance(first, torch.Tensor) else shape, generator=g).to(dtype).to(device)
    differentiable = {t.name for t in spec.grads}
    return (
        inputs,
        dy,
        [
            t.name
            for t in spec.inputs
            if isinstance(inputs.get(t.name), torch.Tensor) and f"d{t.name}" in differentiable
        ],
    )


def baselines(spec: OpSpec, compile_baseline: bool = True, device="cpu") -> list[Provider]:
    """What the providers under test are timed against: the spec's competitors, the composite eager and
    compiled, and on a GPU the upstream originals (under the CPU interpreter they are no contender)."""
    out: list[Provider] = [Function(name, fn) for name, fn in spec.competitors.items()]
    out.append(Function("torch-eager", spec.composite))
    if compile_baseline:
        out.append(Compiled("torch-compile", spec.composite))
    if device != "cpu":
        out += upstream(spec).values()
    return out


def providers(
    spec: OpSpec, shape, dtype, mode: str, tested: list[Provider], compile_baseline: bool = True, device="cpu"
) -> tuple[dict[str, Callable], set[str]]:
    """({provider name: zero-argument call}, the names whose first call may fail as their own finding) for one
    group: ``tested`` first, then the baselines, on inputs drawn once from a fixed seed."""
    inputs, dy, grads = group_inputs(spec, shape, dtype, device)
    calls: dict[str, Callable] = {}
    excused: set[str] = set()
    for p in [*tested, *baselines(spec, compile_baseline, device)]:
        given = p.timed(spec, inputs, dy, mode, grads)
        calls |= given
        if p.excused:
            excused |= set(given)
    return calls, excused


def tileport_backends(op: str, device_kind: str = "cpu") -> list[str]:
    """The available tileport backends that serve ``op`` (its kernels, or those of the operator it is composed over)
    on that device kind, except the torch reference and interpreters (milliseconds per call: not a contender)."""
    kernels = get_spec(op).kernel_op
    return [
        b.name
        for b in tileport.available_backends()
        if b.available
        and kernels in b.serves
        and device_kind in b.device_kinds
        and b.name != "torch"
        and not b.interpreted
    ]
