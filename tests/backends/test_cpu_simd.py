"""The CPU kernels' hot loops are packed SIMD, read from the disassembly of the library built on this machine.

A kernel whose column loops came out scalar (as g++ 12 built the first kernels on an AMD Zen 4) fails here on
whatever CPU CI runs, before any benchmark. Besides the native build, the same kernels are built (not run) for
AVX2 (x86-64-v3) and for the flags g++ 12 gives a Zen 4 with -march=native (znver3 tuning plus AVX-512).
"""

import platform
import shutil

import pytest
import torch

from tileport.backends.tilelang.cpu import disasm, l2norm, runtime, settings

DTYPES = [torch.float32, torch.float16, torch.bfloat16]
KERNELS = [
    ("l2norm_fwd", lambda dt: l2norm.build_forward(dt, dt)),
    ("l2norm_fwd", lambda dt: l2norm.build_forward(dt, dt, streaming=True)),
    ("l2norm_bwd", lambda dt: l2norm.build_backward(dt, dt)),
]
ZEN4_AS_GXX12_SEES_IT = (
    "znver3 -mavx512f -mavx512dq -mavx512cd -mavx512bw -mavx512vl -mavx512ifma -mavx512vbmi -mavx512vbmi2 "
    "-mavx512vnni -mavx512bitalg -mavx512vpopcntdq -mavx512bf16"
)
X86 = platform.machine() in ("x86_64", "AMD64")

pytestmark = pytest.mark.skipif(shutil.which("objdump") is None, reason="objdump (binutils) is not installed")


def _register(isa: settings.Isa) -> str:
    return {16: "zmm", 8: "ymm", 4: "xmm"}[isa.lanes]


def _check_packed(name: str, build, dtype) -> None:
    launcher = runtime.compile_kernel(build(dtype))
    loops = disasm.kernel_loops(launcher.lib._name, name)
    width = _register(settings.isa())
    arith = [lp for lp in loops if lp.fp_arith()]
    assert arith, f"{name} {dtype}: no loop with floating-point arithmetic"
    for lp in arith:  # a scalarized column loop is all ...ss; a row loop may hold the few scalar adds of the tree
        assert len(lp.scalar_fp()) <= len(lp.packed(width)), (
            f"{name} {dtype}: loop at {lp.start:#x} is scalar: {[m for m, _ in lp.fp_arith()]}"
        )
    fma = [m for lp in arith for m in lp.packed(width) if "fmadd" in m or "fnmadd" in m]
    mul = [m for lp in arith for m in lp.packed(width) if m.startswith("vmulp")]
    assert fma, f"{name} {dtype}: no packed FMA on {width} registers in any loop (the row sum is not packed)"
    assert mul, f"{name} {dtype}: no packed multiply on {width} registers in any loop (the scale is not packed)"


@pytest.mark.skipif(not X86, reason="x86 register names")
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("name,build", KERNELS, ids=["fwd", "fwd-stream", "bwd"])
def test_native_build_is_packed(name, build, dtype):
    _check_packed(name, build, dtype)


@pytest.mark.slow
@pytest.mark.skipif(not X86, reason="x86 -march targets")
@pytest.mark.parametrize("arch", ["x86-64-v3", ZEN4_AS_GXX12_SEES_IT], ids=["avx2", "zen4-gxx12"])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_other_x86_targets_are_packed(arch, dtype, monkeypatch, tmp_path):
    monkeypatch.setenv(settings.ARCH_ENV, arch)
    monkeypatch.setenv("TILEPORT_CACHE_DIR", str(tmp_path))
    for name, build in KERNELS[::2]:
        _check_packed(name, build, dtype)


def test_loop_finder_flags_a_scalar_loop():
    """The check itself can fail: a hand-written scalar loop is found and reported as scalar."""
    insns = [
        (0x10, "vmovss", "(%rdi,%rax,4),%xmm1"),
        (0x15, "vfmadd231ss", "%xmm1,%xmm1,%xmm0"),
        (0x1A, "add", "$0x1,%rax"),
        (0x1E, "cmp", "%rax,%rsi"),
        (0x21, "jne", "10 <k_kernel+0x10>"),
        (0x23, "vmulps", "%zmm1,%zmm2,%zmm3"),
    ]
    (loop,) = disasm.innermost_loops(insns)
    assert loop.scalar_fp() == ["vfmadd231ss"] and loop.packed("zmm") == []
