"""The known causes of a Triton kernel not lowering (or not fitting) on Ascend A2/A3, each with the change that
fixes it: the one table ``tileport lower --impl`` reads. The compiler's error itself (never the source lines its
message quotes) matches a cause by its patterns; an error no cause matches is reported as unknown with the error
itself, never guessed."""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Cause:
    key: str
    what: str  # the cause, in words
    fix: str  # the change that fixes it
    patterns: tuple[str, ...] = ()  # regular expressions on the compiler's error (empty: found by tileport's checks)
    fails: bool = True  # False: a note (the kernel lowers and runs; it could run better)


CAUSES = (
    Cause(
        "fp64",
        "fp64 math: the A2/A3 vector units have no fp64 (triton-ascend takes bf16, fp16, fp32, fp8 only)",
        "compensated fp32: carry a value and its rounding error as two fp32 (two-sum, fma for products), as "
        "tileport's backends/triton/common.py does for its sums",
        (r"got fp64", r"\bfp64\b", r"float64"),
    ),
    Cause(
        "cuda-libdevice",
        "CUDA's libdevice (tl.extra.cuda.libdevice): triton-ascend has no CUDA extras",
        "tl.extra.ascend.libdevice.<fn> (triton-ascend's own), or tl.math.<fn> / a tl expression",
        (r"extra' has no attribute 'cuda'", r"libdevice"),
    ),
    Cause(
        "libdevice-stub",
        "a dispatch stub of triton.language.extra.libdevice: GPU backends swap the stubs for their own libdevice, "
        "triton-ascend swaps none, so the call returns None (a package takes this import where it sees no NPU: "
        "Liger-Kernel's rsqrt)",
        "tl.math.<fn> (tl.math.rsqrt), or triton-ascend's libdevice (from triton.language.extra.ascend import "
        "libdevice); or have the package take its NPU path",
    ),
    Cause(
        "inline-asm",
        "inline PTX assembly (tl.inline_asm_elementwise): the NPU runs no PTX",
        "the same operation in tl expressions (or tl.extra.ascend.libdevice)",
        (r"inline_asm",),
    ),
    Cause(
        "tensor-descriptor",
        "tensor descriptors (TMA: tl.make_tensor_descriptor): a Hopper copy engine",
        "plain pointer loads and stores with masks (tl.load(ptr + offsets, mask=...))",
        (r"tensor_descriptor", r"TensorDescriptor"),
    ),
    Cause(
        "grid",
        "a grid past 65535 programs: the launch is refused on A2/A3",
        "a persistent loop over blocks: launch the vector-core count of programs and let each take blocks "
        "pid, pid + num_programs, ... (``for blk in range(tl.program_id(0), n_blocks, tl.num_programs(0))``)",
    ),
    Cause(
        "ub",
        "tiles past the unified buffer (192 KB per vector core on A2/A3): the NPU binary does not build",
        "a smaller block: the largest that fits the budget with every live tile (see the figures), the row "
        "walked in blocks with a running reduction where a whole row does not fit",
    ),
    Cause(
        "cores",
        "more programs than vector cores: they run in waves, each a launch's worth of set-up",
        "a persistent loop over blocks (grid = the vector-core count), as for the grid limit",
        fails=False,
    ),
    Cause(
        "double-buffer",
        "tiles past half the unified buffer: no room to double-buffer the loads",
        "a block of half the size, so loads overlap compute",
        fails=False,
    ),
    Cause(
        "num-warps",
        "configurations that differ only in num_warps / num_stages: GPU warp tuning, which means "
        "nothing on Ascend (they compile to one kernel)",
        "tune the block sizes and the grid (the core count) instead; keep one configuration per block size",
        fails=False,
    ),
    Cause(
        "tail",
        "a block whose last dimension is not a multiple of 32 bytes: unaligned vector loads",
        "a block of a multiple of 32 bytes in its last dimension (16 fp16/bf16, 8 fp32 elements), the row's "
        "tail masked",
        fails=False,
    ),
)
# A TileLang kernel written for GPUs, lowered for Ascend (the wheel's ascend target) or built for the CPU (C).
TILE_CAUSES = (
    Cause(
        "vf-block",
        "a T.Parallel loop outside a vector-function block: Ascend runs vector code in VF blocks",
        "import tilelang.ascend.language as T and put the loop in `with T.SimtVF(threads=...):` (per element, as "
        "tileport's Ascend kernels do) or `with T.SimdVF():`",
        (r"must be inside a VF block",),
    ),
    Cause(
        "dma-cast",
        "a T.copy that converts dtypes: Ascend's DMA moves bytes only",
        "copy in the storage dtype into a UB buffer (T.alloc_shared), convert inside a VF block",
        (r"DMA copies cannot perform type casting",),
    ),
    Cause(
        "fragment",
        "register fragments (T.alloc_fragment): a GPU warp's registers, laid out by the MMA/thread layout inference",
        "UB buffers (T.alloc_shared) on Ascend; T.alloc_local for a reduction on the CPU's C target",
        (r"local\.fragment", r"layout for fragment"),
    ),
    Cause(
        "warp",
        "warp-level primitives (shuffles, warp reductions): no Ascend counterpart",
        "T.reduce_sum / T.reduce_max over a UB buffer",
        (r"shfl", r"warp_shuffle"),
    ),
    Cause(
        "ub-tile",
        "buffers past the unified buffer (192 KB per vector core)",
        "smaller blocks, or the row streamed through UB in chunks with a running reduction",
    ),
    Cause(
        "threads",
        "GPU threads per block (T.Kernel(..., threads=N)): an Ascend kernel's grid is its vector cores",
        "T.Kernel(CORES) with a persistent loop over blocks; the threads go to T.SimtVF(threads=...)",
        fails=False,
    ),
    Cause(
        "rsqrt",
        "T.rsqrt: the NPU's hardware rsqrt is approximate (about 3e-3 relative, as the A2/A3 practice met)",
        "one or two Newton-Raphson steps, y * (1.5 - 0.5 * s * y * y), as tileport's Ascend kernels do (--nr-steps)",
        fails=False,
    ),
    Cause(
        "gemm",
        "T.gemm: the cube unit takes its operands from its own buffers, in 16 x 16 fractal tiles",
        "tile shapes in multiples of 16 (K too), the operands staged for the cube unit as the wheel's Ascend GEMM "
        "examples do",
        fails=False,
    ),
    Cause(
        "c-vector-math",
        "a math function (T.exp, T.log, ...) in a T.Parallel loop of static extent: the C target vectorizes the "
        "loop and has no vector form of the function",
        "leave the kernel's sizes symbolic (T.dynamic, or a @tilelang.jit size without --arg: `tileport verify "
        "--impl` builds them so), or write the loop as T.serial",
        (r"Unresolved call .*name=\"tirx\.(exp|log|tanh|sigmoid|sqrt|rsqrt|pow|erf|sin|cos)",),
    ),
    Cause(
        "c-bf16",
        "bfloat16: the C target prints no bfloat16 type",
        "build it for float32 or float16 (verify with --dtype fp32 / fp16); tileport's own CPU kernels carry bf16 as "
        "uint16 bits",
        (r"Cannot convert type bfloat16 to C type",),
    ),
)
BY_KEY = {c.key: c for c in CAUSES + TILE_CAUSES}


def classify(message: str, table: tuple[Cause, ...] = CAUSES) -> Cause | None:
    """The known cause the compiler's error names, or None (unknown). ``message`` is the error itself
    (``lowering.compiler_error``): the source a Triton error quotes would match its comments."""
    for cause in table:
        if any(re.search(p, message) for p in cause.patterns):
            return cause
    return None
