"""What the device-target kernel modules share: TileLang dtype names, and lowering a prim_func to source
for a target without its device (CUDA source needs no GPU; Ascend C source needs no NPU or CANN)."""

from __future__ import annotations

import torch

TL_DTYPE = {torch.float32: "float32", torch.float16: "float16", torch.bfloat16: "bfloat16"}


def cuda_target(arch: str = "sm_90") -> dict:
    return {"kind": "cuda", "arch": arch}


def lower_source(func, target) -> str:
    """The generated device source of ``func`` for ``target`` ("ascend" or a CUDA target dict)."""
    import tilelang
    from tilelang import tvm

    tgt = tvm.target.Target(target)
    with tgt:  # layout inference asks for the current target
        return tilelang.lower(func, target=tgt).kernel_source


def ceil_to(n: int, multiple: int) -> int:
    return -(-n // multiple) * multiple
