"""add_rms_norm for Ascend arch35 (Ascend 950): an add kernel writing residual_out = x + residual (fp32 add,
rounded once; l2norm's persistent grid of ``CORES`` vector cores walking blocks of rows, GM -> UB copies of
runtime length, a SIMT sub-kernel, double buffering), then rms_norm's kernels (``ascend/rms_norm.py``, with
the refined rsqrt) over residual_out. Not fused: residual_out makes one more trip through GM than a fused
kernel's; the backward adds the direct gradient to rms_norm's dx with torch.
"""

# No `from __future__ import annotations`: it breaks T.prim_func annotations.
import tilelang.ascend.language as T
import torch

from ... import outputs
from ..targets import RUNNERS, TL_DTYPE
from . import rms_norm
from ._common import CORES, NR_STEPS, bucket, rows_per_block
from ._walk import Walk

RUNNER = RUNNERS["ascend"]


def build_add(width: int, x_dtype: torch.dtype, r_dtype: torch.dtype, s_dtype: torch.dtype):
    xt, rt, st = TL_DTYPE[x_dtype], TL_DTYPE[r_dtype], TL_DTYPE[s_dtype]
    block_M = rows_per_block(width, x_dtype.itemsize + r_dtype.itemsize + s_dtype.itemsize)
    M, D = T.dynamic("M"), T.dynamic("D")
    walk = Walk(width, block_M)

    @T.prim_func
    def add_rms_norm_add(X: T.Tensor((M, D), xt), R: T.Tensor((M, D), rt), S: T.Tensor((M, D), st)):
        with T.Kernel(CORES) as core:
            xu, ru, su = walk.tiles(xt, rt, st)
            for _ in walk.blocks(core, M, D):
                for _ in walk.chunks(((X, xu), (R, ru)), ((su, S),)):
                    for i, j in walk.each():
                        su[i, j] = (xu[i, j].astype("float32") + ru[i, j].astype("float32")).astype(st)

    return add_rms_norm_add


def lowered(dtype: torch.dtype, dim: int, nr_steps: int = NR_STEPS) -> dict:
    """{kernel name: prim_func} serving rows of ``dim`` columns, for ``tileport lower``."""
    b = bucket(dim)
    return {
        "add_rms_norm_add": build_add(b, dtype, dtype, dtype),
        "add_rms_norm_fwd": rms_norm.build_forward(b, dtype, dtype, dtype, "fp32", nr_steps),
        "add_rms_norm_bwd": rms_norm.build_backward(b, dtype, dtype, dtype),
    }


def forward(
    x,
    residual,
    weight,
    eps: float,
    offset: float,
    residual_dtype: torch.dtype,
    output_dtype: torch.dtype,
    nr_steps: int = NR_STEPS,
):
    """(y, residual_out, rstd) on an Ascend 950 NPU (torch_npu tensors) for non-empty 2-D rows."""
    x, residual = x.contiguous(), residual.contiguous()
    s = outputs.empty_like(x, residual_dtype)
    RUNNER.kernel("add_rms_norm_add", build_add, bucket(x.shape[1]), x.dtype, residual.dtype, residual_dtype)(
        x, residual, s
    )
    y, rstd = rms_norm.forward(s, weight, eps, offset, "fp32", output_dtype, nr_steps=nr_steps)
    return y, s, rstd


def backward(residual_out, rstd, dy, dresidual_out, weight, offset: float, eps: float):
    """(dsum in residual_out's dtype, dweight or None): rms_norm's kernel, then the direct gradient added."""
    dsum, dw = rms_norm.backward(residual_out, rstd, dy, weight, offset, "fp32", eps)
    return (dsum if dresidual_out is None else dsum.add_(dresidual_out)), dw
