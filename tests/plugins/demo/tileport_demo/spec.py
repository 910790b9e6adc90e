"""demo_scale's declaration: what tileport derives its interface from and its generic layers read."""

import torch

from tileport.ops import spec as s


def composite(x, scale=2.0):
    return x * scale


def example(shape, dtype, device, generator):
    return {"x": torch.randn(shape, generator=generator).to(dtype).to(device), "scale": 2.0}


def bytes_moved(shape, dtype, mode):
    return s.rows_bytes(shape, dtype, 1, 1) * (2 if mode == "fwdbwd" else 1)


SPEC = s.OpSpec(
    name="demo_scale",
    summary="a scale of the rows (a plugin's operator)",
    math="y = x * scale",
    inputs=(s.Tensor("x", s.ROWS),),
    attrs=(s.Attr("scale", 2.0, "finite", s.REAL, kw_only=False),),
    outputs=(s.Tensor("y", s.ROWS),),
    backward=s.Backward(("dy",), ("scale",)),
    grads=(s.Tensor("dx", s.ROWS),),
    composite=composite,
    example=example,
    bytes_moved=bytes_moved,
    kernels={"torch": "tileport_demo.reference", "tilelang": "tileport_demo.kernel"},
    suite="suite.yaml",
)
