"""The callables ``tileport bench`` times side by side for one (operator, mode, shape, dtype), built from the
operator's spec: each tileport backend through the public API (and, for fwd, its kernel-only form writing
into preallocated outputs), torch's own fused op where one exists, the torch composite users write (eager and
torch.compile), and the upstream original where it is installed.

Modes: ``fwd`` (the forward outputs, no autograd), ``bwd`` (the backward through autograd, the graph built
once), ``fwdbwd`` (both).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch._functorch.config  # noqa: F401  (donated_buffer, patched for the bwd mode)

import tileport

from ..ops.catalog import get as get_spec
from ..ops.spec import OpSpec
from . import originals


def _output_grads(outs: tuple, dy: torch.Tensor) -> tuple:
    """The gradient of each output: ``dy`` where the output has its shape (a row-wise operator's outputs), else
    a tensor drawn in that output's own shape and dtype from a fixed seed (a loss, a rotated q beside k)."""
    g = torch.Generator().manual_seed(1)
    return tuple(
        dy if o.shape == dy.shape else torch.randn(o.shape, generator=g).to(o.dtype).to(o.device) for o in outs
    )


def _autograd(fn: Callable, inputs: dict, dy: torch.Tensor, mode: str, grads: list[str]):
    """A callable running ``fn(**inputs)`` in ``mode``; grads flow to the tensor inputs named in ``grads`` (the
    differentiable ones). Each output present gets a gradient in its own shape (``_output_grads``), drawn once."""
    if mode == "fwd":
        return lambda: fn(**inputs)
    leaves = {k: inputs[k].detach().requires_grad_(True) for k in grads}
    args = inputs | leaves
    wrt = list(leaves.values())
    dys: list[tuple] = []  # drawn on the first call, from the outputs it gives

    def grad(out, **kw):  # an absent output (None: k_out where k is None) or a statistic (lse) has no gradient
        outs = tuple(
            o for o in (out if isinstance(out, (tuple, list)) else (out,)) if o is not None and o.requires_grad
        )
        if not dys:
            dys.append(_output_grads(outs, dy))
        return torch.autograd.grad(outs, wrt, dys[0], **kw)

    if mode == "fwdbwd":
        return lambda: grad(fn(**args))
    # bwd: the graph is built once and each call only runs the backward; retain_graph=True needs AOT autograd's
    # donated buffers off for the torch.compile provider (it compiles on this first call)
    with torch._functorch.config.patch(donated_buffer=False):
        y = fn(**args)
    return lambda: grad(y, retain_graph=True)


def original(spec: OpSpec) -> dict[str, Callable]:
    """{provider name: callable in the spec's convention} of the upstream originals installed here."""
    return {name: fn for name, (fn, _) in originals.load(spec).items() if fn is not None}


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


def providers(
    spec: OpSpec, shape, dtype, mode: str, backends: list[str], compile_baseline: bool = True, device="cpu", impls=()
) -> dict:
    """{provider: zero-argument callable} for one group; inputs drawn once from a fixed seed. ``impls``:
    external implementations (``tileport.external.Impl``), called with their parameters mapped."""
    inputs, dy, grads = group_inputs(spec, shape, dtype, device)
    out: dict = {}
    forward, function = spec.forward, spec.function  # looked up once: the timed call is the operator's alone
    for b in backends:
        if mode == "fwd":
            if spec.kernel_out:
                outs = tuple(
                    None if o is None else o.clone() for o in forward(**inputs, backend=b)
                )  # preallocated, same shapes
                out[f"{b}:kernel"] = lambda b=b, outs=outs: forward(**inputs, backend=b, out=outs)
            out[b] = lambda b=b: forward(**inputs, backend=b)
        else:
            out[b] = _autograd(lambda b=b, **kw: function(**kw, backend=b), inputs, dy, mode, grads)
    for name, fn in spec.competitors.items():
        out[name] = _autograd(fn, inputs, dy, mode, grads)
    for impl in impls:
        out[impl.provider] = _autograd(impl.call, inputs, dy, mode, grads)
    out["torch-eager"] = _autograd(spec.composite, inputs, dy, mode, grads)
    if compile_baseline:
        torch._dynamo.reset()  # a fresh static-shape compile per shape, never the recompile limit
        out["torch-compile"] = _autograd(torch.compile(spec.composite, dynamic=False), inputs, dy, mode, grads)
    if device != "cpu":  # the originals are GPU kernels (Triton); under the CPU interpreter they are no contender
        for name, fn in original(spec).items():
            out[name] = _autograd(fn, inputs, dy, mode, grads)
    return out


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
