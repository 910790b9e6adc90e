"""What the softmax operators' specs share: the run, bytes moved, example inputs and the spec itself, from
each operator's public functions and its composite."""

from __future__ import annotations

import torch

from . import spec as s


def make_spec(name: str, summary: str, math: str, function, forward, backward, composite, fused, aliases, usage) -> s.OpSpec:
    def run(inputs: dict, backend: str | None, backward_too: bool) -> dict[str, torch.Tensor]:
        """y from the forward; dx from the backward given that y (the cascade: what the forward saved)."""
        dim = inputs.get("dim", -1)
        y = forward(inputs["x"], dim, backend=backend)
        out = {"y": y}
        if backward_too:
            out["dx"] = backward(y, inputs["dy"], dim, backend=backend)
        return out

    def example(shape, dtype, device, generator) -> dict:
        return {"x": (2.0 * torch.randn(shape, generator=generator)).to(dtype).to(device), "dim": -1}

    def bytes_moved(shape, dtype, mode: str) -> int:
        """fwd reads x and writes y; bwd reads y and dy and writes dx."""
        fwd, bwd = s.rows_bytes(shape, dtype, 1, 1), s.rows_bytes(shape, dtype, 2, 1)
        return {"fwd": fwd, "bwd": bwd, "fwdbwd": fwd + bwd}[mode]

    return s.OpSpec(
        name=name,
        model_sites={},  # the captured decoders' sites are norm inputs; attention scores are not captured
        aliases=aliases,
        summary=summary,
        math=math,
        inputs=(s.Tensor("x", s.ROWS),),
        attrs=(s.Attr("dim", -1, "an int in [-x.dim(), x.dim())"),),
        outputs=(s.Tensor("y", s.ROWS),),
        grads=(s.Tensor("dx", s.ROWS),),
        function=function,
        forward=lambda x, dim=-1, backend=None, out=None: (forward(x, dim, backend=backend),),
        run=run,
        composite=composite,
        example=example,
        bytes_moved=bytes_moved,
        dtypes=s.FLOATS,
        workloads={"attention-scores-4k": (4096, 4096), "vocab-logits-32k": (64, 32768), **s.MODEL_WORKLOADS},
        bar=s.ROWWISE_BAR,
        competitors={f"torch-{name}": fused},
        usage=usage,
    )
