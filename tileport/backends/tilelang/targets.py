"""What the device-target kernel modules share: TileLang dtype names, and lowering a prim_func to source
for a target without its device (CUDA source needs no GPU; Ascend C source needs no NPU or CANN)."""

from __future__ import annotations

import torch

from .cache import KernelCache

TL_DTYPE = {torch.float32: "float32", torch.float16: "float16", torch.bfloat16: "bfloat16"}


def cuda_target(arch: str = "sm_90") -> dict:
    return {"kind": "cuda", "arch": arch}


# On-chip memory one kernel instance may address, per target: Ascend's unified buffer per vector core (192 KB on
# A2/A3, the size the arch35 kernels are written for: two pipeline stages of 96 KB), a CUDA block's dynamic shared
# memory on sm_90 (227 KB). `tileport lower` fails a kernel past it.
ON_CHIP_BUDGET = {"ascend": 192 * 1024, "cuda": 227 * 1024}
ON_CHIP_NAME = {"ascend": "unified buffer (UB)", "cuda": "shared memory"}
# The cube side's memories an Ascend kernel that runs matrix products also addresses (its L0A/L0B are staged by the
# wheel's GEMM template, not allocated by the kernel): L1 and the L0C accumulator, at the Ascend 950 family's sizes
# (CANN ops-transformer's arch.h for __NPU_ARCH__ 3101: L1 512 KB, L0C 256 KB; A2/A3's L0C is 128 KB).
CUBE_BUDGET = {"ascend": {"L1": 512 * 1024, "L0C": 256 * 1024}}
_CUBE_SCOPE = {"shared.l1": "L1", "shared.l0c": "L0C"}  # a scope and its merged ``.dyn`` pool


class OnChip(int):
    """A lowered kernel's bytes of its target's budgeted on-chip memory (UB / shared memory: the int itself, as
    every caller reads it), and in ``cube`` the bytes of each cube memory it also addresses ({"L1": n, "L0C": m};
    empty for a vector-only or CUDA kernel)."""

    cube: dict

    def __new__(cls, used: int, cube: dict | None = None):
        made = int.__new__(cls, used)
        made.cube = dict(cube or {})
        return made


def _cube_bytes(device_mod) -> dict:
    """{memory: bytes} of the L1 / L0C buffers the device functions allocate (each pool once: the merged ``.dyn``
    buffer already holds its buffers' reuse)."""
    # tilelang: seconds to import, kept out of start-up
    from tilelang import tvm

    found: dict[str, int] = {}

    def visit(node):
        if isinstance(node, tvm.tirx.AllocBuffer):
            buf = node.buffer
            name = _CUBE_SCOPE.get(buf.scope().removesuffix(".dyn"))
            if name is not None:
                size = tvm.DataType(buf.dtype).bits // 8
                for extent in buf.shape:
                    size *= int(extent)
                found[name] = found.get(name, 0) + size

    for f in device_mod.functions.values():
        tvm.tirx.stmt_functor.post_order_visit(f.body, visit)
    return found


def lower_kernel(func, target) -> tuple[str, OnChip]:
    """The generated device source of ``func`` for ``target`` ("ascend" or a CUDA target dict), and the bytes of
    on-chip memory it addresses (its planned dynamic shared memory: the UB on Ascend; with an Ascend kernel's L1 and
    L0C bytes in ``.cube``)."""
    # tilelang: seconds to import, kept out of start-up
    import tilelang
    from tilelang import tvm

    tgt = tvm.target.Target(target)
    with tgt:  # layout inference asks for the current target
        art = tilelang.lower(func, target=tgt)
    planned = [
        int(f.attrs["dyn_shared_memory_buf"])
        for f in art.device_mod.functions.values()
        if f.attrs is not None and "dyn_shared_memory_buf" in f.attrs
    ]
    cube = _cube_bytes(art.device_mod) if target == "ascend" else {}
    return art.kernel_source, OnChip(max(planned, default=0), cube)


def lower_source(func, target) -> str:
    """The generated device source of ``func`` for ``target``."""
    return lower_kernel(func, target)[0]


def vectors_or_defaults(weight, bias, x):
    """(weight, bias) as contiguous [D] vectors of one dtype (promoted: exact), ones and zeros for those not
    given (x's dtype for neither): device kernels that always scale and shift."""
    given = [p.dtype for p in (weight, bias) if p is not None] or [x.dtype]
    dt = given[0] if len(given) == 1 else torch.promote_types(*given)
    w = torch.ones(x.shape[1], dtype=dt, device=x.device) if weight is None else weight.to(dt).contiguous()
    b = torch.zeros(x.shape[1], dtype=dt, device=x.device) if bias is None else bias.to(dt).contiguous()
    return w, b


def ceil_to(n: int, multiple: int) -> int:
    return -(-n // multiple) * multiple


class DeviceKernelCache:
    """Compiles prim_funcs for one device target through TileLang's JIT (run where the device is)."""

    def __init__(self, target: str, execution_backend: str):

        target_name, backend = target, execution_backend

        class _Cache(KernelCache):
            def compile(self, op, key, build):
                # tilelang: seconds to import, kept out of start-up
                import tilelang

                return tilelang.compile(build(), target=target_name, execution_backend=backend)

        self.cache = _Cache(f"tilelang-{target}")

    def kernel(self, name: str, build, *args):
        """The compiled ``build(*args)`` (args: the bucket, dtypes and options; never M or D, both runtime)."""
        return self.cache.get(name, args, lambda: build(*args))


RUNNERS = {"cuda": DeviceKernelCache("cuda", "tvm_ffi"), "ascend": DeviceKernelCache("ascend", "tvm_ffi")}
