"""The concatenated form of a gated activation (vLLM's ``silu_and_mul(x)``): ``x [..., 2F]`` holds the gate in
the first half of its last dimension and up in the second; ``y [..., F]``. The halves are views of x (where x has
stride 1 in its last dimension no copy is made: the kernels take rows of any stride), the two-tensor operator
runs on them, and ``dx`` is its ``(dgate, dup)`` side by side (one concatenation)."""

from __future__ import annotations

import torch


def halves(fn: str, x: object) -> tuple[torch.Tensor, torch.Tensor]:
    """``(gate, up)``: views of x's two halves; TypeError / ValueError naming ``fn`` for an x that holds none."""
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{fn}: x must be a torch.Tensor [..., 2F] (gate then up), got {type(x).__name__}")
    if not x.dtype.is_floating_point:
        raise TypeError(f"{fn}: x must have a floating dtype (float16, bfloat16, float32, float64), got {x.dtype}")
    if x.dim() == 0:
        raise ValueError(f"{fn}: x must be [..., 2F] (gate then up in its last dimension), got a 0-dim tensor")
    n = x.shape[-1]
    if n % 2:
        raise ValueError(
            f"{fn}: x's last dimension holds gate then up and must be even, got {n} (x of shape {tuple(x.shape)})"
        )
    return x[..., : n // 2], x[..., n // 2 :]


def function(fn: str, forward, backward, option_names: tuple[str, ...]):
    """``call(x, *options)``: y = forward(gate, up, **options), differentiable in x through ``backward(dy, gate,
    up, **options) -> (dgate, dup)``. ``option_names`` name the options' keywords, in order."""

    class Concatenated(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, *options):
            ctx.save_for_backward(x)
            ctx.options = options
            return forward(*halves(fn, x), **dict(zip(option_names, options)))

        @staticmethod
        def backward(ctx, dy):
            (x,) = ctx.saved_tensors
            dgate, dup = backward(dy, *halves(fn, x), **dict(zip(option_names, ctx.options)))
            return (torch.cat((dgate, dup), -1), *(None for _ in ctx.options))

    Concatenated.__name__ = Concatenated.__qualname__ = f"{fn}_function"

    def call(x, *options):
        gate, up = halves(fn, x)
        if not (x.requires_grad and torch.is_grad_enabled()):
            return forward(gate, up, **dict(zip(option_names, options)))  # no graph to record
        return Concatenated.apply(x, *options)

    return call
