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


class DeviceKernelCache:
    """Compiles prim_funcs for one device target through TileLang's JIT (run where the device is)."""

    def __init__(self, target: str, execution_backend: str):
        from .cache import KernelCache

        target_name, backend = target, execution_backend

        class _Cache(KernelCache):
            def compile(self, op, key, build):
                import tilelang

                return tilelang.compile(build(), target=target_name, execution_backend=backend)

        self.cache = _Cache(f"tilelang-{target}")

    def forward(self, build, bucket, x: torch.Tensor, eps: float, output_dtype: torch.dtype, out=None, **options):
        """(y, rstd) for a non-empty 2-D x on the device; ``build(bucket(D), x_dtype, y_dtype, **options)`` makes
        the kernel, which serves every row of a D in that bucket (M and D are runtime values)."""
        M, D = x.shape
        x = x.contiguous()  # the device kernels index rows with stride D
        if out is None:
            out = (torch.empty_like(x, dtype=output_dtype), x.new_empty((M,), dtype=torch.float32))
        y, rstd = out
        b = bucket(D)
        key = (b, x.dtype, output_dtype, tuple(sorted(options.items())))
        self.cache.get("l2norm_fwd", key, lambda: build(b, x.dtype, output_dtype, **options))(x, y, rstd, eps)
        return y, rstd

    def backward(self, build, bucket, x: torch.Tensor, rstd: torch.Tensor, dy: torch.Tensor) -> torch.Tensor:
        M, D = x.shape
        x, dy, rstd = x.contiguous(), dy.contiguous(), rstd.to(torch.float32).contiguous()
        dx = torch.empty_like(x)
        b = bucket(D)
        self.cache.get("l2norm_bwd", (b, x.dtype, dy.dtype), lambda: build(b, x.dtype, dy.dtype))(x, rstd, dy, dx)
        return dx
