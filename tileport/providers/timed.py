"""A provider's timed call: a zero-argument callable running a function on one group's inputs in a bench mode
(``fwd`` the forward outputs, ``bwd`` the backward through autograd with the graph built once, ``fwdbwd``
both), the gradients flowing to the differentiable inputs only and each output given one in its own shape."""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch._functorch.config  # noqa: F401  (donated_buffer, patched for the bwd mode)


def output_grads(outs: tuple, dy: torch.Tensor) -> tuple:
    """The gradient of each output: ``dy`` where the output has its shape (a row-wise operator's outputs), else
    a tensor drawn in that output's own shape and dtype from a fixed seed (a loss, a rotated q beside k)."""
    g = torch.Generator().manual_seed(1)
    return tuple(
        dy if o.shape == dy.shape else torch.randn(o.shape, generator=g).to(o.dtype).to(o.device) for o in outs
    )


def in_mode(fn: Callable, inputs: dict, dy: torch.Tensor, mode: str, grads: list[str]) -> Callable:
    """A callable running ``fn(**inputs)`` in ``mode``; grads flow to the tensor inputs named in ``grads`` (the
    differentiable ones). Each output present gets a gradient in its own shape (``output_grads``), drawn once."""
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
            dys.append(output_grads(outs, dy))
        return torch.autograd.grad(outs, wrt, dys[0], **kw)

    if mode == "fwdbwd":
        return lambda: grad(fn(**args))
    # bwd: the graph is built once and each call only runs the backward; retain_graph=True needs AOT autograd's
    # donated buffers off for the torch.compile provider (it compiles on this first call)
    with torch._functorch.config.patch(donated_buffer=False):
        y = fn(**args)
    return lambda: grad(y, retain_graph=True)
