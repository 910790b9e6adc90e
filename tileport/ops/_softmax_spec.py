"""What the softmax operators' specs share: the declaration (x and a dim in, y out, the backward from y),
bytes moved, example inputs and the spec itself, from each operator's composite."""

from __future__ import annotations

import torch

from . import spec as s


def make_spec(name: str, summary: str, math: str, composite, fused, aliases, usage) -> s.OpSpec:
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
        attrs=(s.Attr("dim", -1, "an int in [-x.dim(), x.dim())", s.DIM, kw_only=False),),
        outputs=(s.Tensor("y", s.ROWS),),
        backward=s.Backward(("y", "dy"), ("dim",)),  # from the forward's output (what it saves)
        grads=(s.Tensor("dx", s.ROWS),),
        composite=composite,
        example=example,
        bytes_moved=bytes_moved,
        dtypes=s.FLOATS,
        workloads={"attention-scores-4k": (4096, 4096), "vocab-logits-32k": (64, 32768), **s.MODEL_WORKLOADS},
        bar=s.with_causes(
            s.ROWWISE_BAR,
            {
                "fwd in cache: kernel-only share of copy": "an exp per element (about 25 instructions per 16 lanes; "
                "16-bit softmax computes it twice, as its y cannot hold the "
                "fp32 exp) and three passes (max, sum, y)",
                "fwd in cache vs torch.compile": "an exp per element, twice for 16-bit softmax",
                "fwd in cache vs eager": "an exp per element, twice for 16-bit softmax",
            },
        ),
        competitors={f"torch-{name}": fused},
        usage=usage,
    )
