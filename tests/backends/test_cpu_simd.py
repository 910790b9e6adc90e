"""The CPU kernels' hot loops are packed SIMD, read from the disassembly of the library built on this machine.

A kernel whose column loops came out scalar (as g++ 12 built the first kernels on an AMD Zen 4) fails here on
whatever CPU CI runs, before any benchmark. Besides the native build, the same kernels are built (not run) for
AVX2 (x86-64-v3) and for the flags g++ 12 gives a Zen 4 with -march=native (znver3 tuning plus AVX-512).
"""

import importlib
import platform
import shutil

import pytest
import torch

from tileport.backends.registry import kernel_modules
from tileport.backends.tilelang import _CPU_SUPPORT, cpu
from tileport.backends.tilelang.cpu import disasm, geglu, l2norm, runtime, settings, swiglu

DTYPES = [torch.float32, torch.float16, torch.bfloat16]
# Every CPU kernel module states its kernels to check (PACKED_CHECKS): a new operator's join without a list here.
KERNELS = [
    (name, build)
    for module in kernel_modules(cpu.__file__, _CPU_SUPPORT)
    for name, build in importlib.import_module(f"{cpu.__name__}.{module}").PACKED_CHECKS
]
ZEN4_AS_GXX12_SEES_IT = (
    "znver3 -mavx512f -mavx512dq -mavx512cd -mavx512bw -mavx512vl -mavx512ifma -mavx512vbmi -mavx512vbmi2 "
    "-mavx512vnni -mavx512bitalg -mavx512vpopcntdq -mavx512bf16"
)
X86 = platform.machine() in ("x86_64", "AMD64")

pytestmark = pytest.mark.skipif(shutil.which("objdump") is None, reason="objdump (binutils) is not installed")


def _check_packed(name: str, build, dtype) -> None:
    launcher = runtime.compile_kernel(build(dtype))
    loops = disasm.kernel_loops(launcher.lib._name, name)
    width = disasm.register_of(settings.isa().lanes)
    assert any(lp.fp_arith() for lp in loops), f"{name} {dtype}: no loop with floating-point arithmetic"
    assert disasm.unpacked(loops, width) == [], f"{name} {dtype} ({settings.isa().summary()})"


@pytest.mark.skipif(not X86, reason="x86 register names")
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("name,build", KERNELS, ids=[f"{name}-{i}" for i, (name, _) in enumerate(KERNELS)])
def test_native_build_is_packed(name, build, dtype):
    _check_packed(name, build, dtype)


@pytest.mark.skipif("__AVX512BW__" not in settings.isa().macros, reason="masked 16-bit moves need AVX512BW")
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_row_tails_are_masked_moves_not_library_calls(dtype):
    """A row's tail (D % 16 columns) is moved with masked loads and stores: a variable-length memcpy per tail
    and pass (a libc call, and a store-forwarding stall) made a row of D = 15 cost 4x a row of D = 16."""
    for name, build in KERNELS:
        launcher = runtime.compile_kernel(build(dtype))
        called = disasm.calls(disasm.function(launcher.lib._name, f"{name}_kernel"))
        assert not [c for c in called if c.startswith(("memcpy", "memset", "memmove"))], f"{name} {dtype}: {called}"


@pytest.mark.slow
@pytest.mark.skipif(not X86, reason="x86 -march targets")
@pytest.mark.parametrize("arch", ["x86-64-v3", ZEN4_AS_GXX12_SEES_IT], ids=["avx2", "zen4-gxx12"])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_other_x86_targets_are_packed(arch, dtype, monkeypatch, tmp_path):
    monkeypatch.setenv(settings.ARCH_ENV, arch)
    monkeypatch.setenv("TILEPORT_CACHE_DIR", str(tmp_path))
    kinds = (
        "l2norm_fwd",
        "l2norm_bwd",
        "l2norm_bwd_eps",
        "rms_norm_bwd",
        "rms_norm_bwd_eps",
    )  # sums, maps, fp64, partials
    for name, build in dict((n, b) for n, b in reversed(KERNELS) if n in kinds).items():
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
    assert disasm.unpacked([loop], "zmm") == [
        "loop at 0x10 is scalar: vfmadd231ss",
        "no packed FMA on zmm registers in any loop",
        "no packed multiply on zmm registers in any loop",
    ]


def test_out_of_line_code_jumping_back_past_the_return_is_not_a_loop():
    """g++ places a row's rarely taken scalar branch after the function's return and jumps back from it: that
    backward jump spans the return and is not a loop (layer_norm's backward has one: a per-row vsubsd)."""
    insns = [
        (0x10, "vfmadd231ps", "%zmm1,%zmm2,%zmm0"),
        (0x16, "jne", "10 <k_kernel+0x10>"),  # the column loop
        (0x18, "je", "30 <k_kernel+0x30>"),
        (0x1A, "add", "$0x1,%rax"),
        (0x1E, "ret", ""),
        (0x30, "vsubsd", "%xmm0,%xmm5,%xmm5"),
        (0x34, "jmp", "1a <k_kernel+0x1a>"),
    ]
    assert [(lp.start, lp.end) for lp in disasm.innermost_loops(insns)] == [(0x10, 0x16)]


@pytest.mark.slow
@pytest.mark.skipif(not X86, reason="x86 -march targets that run on any x86-64")
@pytest.mark.parametrize("arch", ["x86-64", "x86-64-v3"], ids=["sse2-scalar-f16", "avx2"])
def test_other_isas_give_the_same_bits_as_the_native_build(arch, monkeypatch, tmp_path):
    """The portable paths of simd.h (SSE2 registers, scalar fp16 conversion, integer bf16 rounding) run here.
    A row's sum has one order on every ISA: with FMA (AVX2) the outputs are bit-identical to the native build's;
    without it (baseline x86-64) each a + b * c rounds twice, so they agree to rounding."""
    gen = torch.Generator().manual_seed(3)
    cases = [
        (dt, torch.randn(5, d, generator=gen).to(dt), torch.randn(5, d, generator=gen).to(dt))
        for dt in DTYPES
        for d in (1, 37, 100, 1000, 5000)
    ]

    def run(build_fwd, build_bwd):
        out = []
        for dt, x, dy in cases:
            y, r, dx = torch.empty_like(x), torch.empty(x.shape[0]), torch.empty_like(x)
            build_fwd[dt](1, x=x, y=y, rstd=r, eps=1e-6)
            build_bwd[dt](1, x=x, dy=dy, rstd=r, dx=dx, eps=1e-6)
            out.append((y, r, dx))
        return out

    native = run(
        {dt: runtime.compile_kernel(l2norm.build_forward(dt, dt)) for dt in DTYPES},
        {dt: runtime.compile_kernel(l2norm.build_backward_eps(dt, dt)) for dt in DTYPES},
    )
    monkeypatch.setenv(settings.ARCH_ENV, arch)
    monkeypatch.setenv("TILEPORT_CACHE_DIR", str(tmp_path))
    other = run(
        {dt: runtime.compile_kernel(l2norm.build_forward(dt, dt)) for dt in DTYPES},
        {dt: runtime.compile_kernel(l2norm.build_backward_eps(dt, dt)) for dt in DTYPES},
    )
    fma = "__FMA__" in settings.isa({settings.ARCH_ENV: arch}).macros
    for (dt, x, _), a, b in zip(cases, native, other):
        for name, u, v in zip(("y", "rstd", "dx"), a, b):
            where = f"{arch} {dt} D={x.shape[1]} {name}"
            if fma:
                assert torch.equal(u, v), f"{where} differs from the native build"
            else:
                tol = 1e-4 if u.dtype == torch.float32 else 1e-2
                torch.testing.assert_close(
                    v.double(), u.double(), rtol=tol, atol=tol * u.double().abs().max().item(), msg=where
                )


_EXP_HARNESS = r"""
#include <cmath>
#include <cstdio>
#include <random>
template <typename T, int N> struct vec_type;
#include "threads.h"  // the prelude's order (runtime.HEADER): simd.h uses its parallel loop
#include "simd.h"
int main() {  // worst error of tp_exp in units of the fp32 result's ulp, against fp64 exp, and special values
  std::mt19937 g(0);
  std::uniform_real_distribution<float> wide(-110.f, 90.f), near(-10.f, 10.f);
  double worst = 0;
  for (int it = 0; it < 200000; ++it) {
    float xs[16], ys[16];
    for (int i = 0; i < 16; ++i) xs[i] = (it % 2) ? wide(g) : near(g);
    tp_v16 x, y;
    memcpy(&x, xs, 64);
    y = tp_exp(x);
    memcpy(ys, &y, 64);
    for (int i = 0; i < 16; ++i) {
      double ref = exp((double)xs[i]);
      if (ref < 1.2e-38 || ref > 3.4e38) continue;  // subnormal and overflowing results: below
      float rf = (float)ref;
      double e = fabs(ys[i] - ref) / (std::nextafter(rf, INFINITY) - rf);
      worst = e > worst ? e : worst;
    }
  }
  float xs[16] = {-INFINITY, INFINITY, NAN, 0.f, -105.f, 89.f, -103.9f, 88.72f}, ys[16];
  tp_v16 x, y;
  memcpy(&x, xs, 64);
  y = tp_exp(x);
  memcpy(ys, &y, 64);
  printf("%.4f %g %g %g %g %g %g %g %g\n", worst, ys[0], ys[1], ys[2], ys[3], ys[4], ys[5], ys[6], ys[7]);
}
"""


def test_vector_exp_is_within_one_ulp_and_keeps_special_values(tmp_path):
    """tp_exp (softmax's exp) against fp64 exp over 3.2e6 fp32 inputs in [-110, 90], built with the kernels' flags."""
    import os
    import subprocess
    from pathlib import Path

    src = tmp_path / "exp.cpp"
    src.write_text(_EXP_HARNESS)
    header = Path(runtime.__file__).with_name("simd.h")
    exe = tmp_path / "exp"
    cmd = [
        os.environ.get("CXX", "g++"),
        *settings.COMPILE_FLAGS,
        "-std=c++17",
        f"-I{header.parent}",
        str(src),
        "-o",
        str(exe),
    ]
    subprocess.run(cmd, check=True, capture_output=True)
    worst, *special = subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout.split()
    assert float(worst) < 1.0
    assert special == ["0", "inf", "nan", "1", "0", "inf", "1.4013e-45", "3.39318e+38"]


@pytest.mark.skipif("__AVX512F__" not in settings.isa().macros, reason="tp_exp scales by vscalefps on AVX-512")
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("casting", ["fp32", "eager"])
@pytest.mark.parametrize(
    "name,build",
    [("gated_bwd", swiglu.build_backward), ("geglu_bwd", lambda dt, c: geglu.build_backward(dt, "tanh", c))],
    ids=["swiglu", "geglu-tanh"],
)
def test_gated_backward_takes_one_exp_per_element(name, build, dtype, casting):
    """The activation and its derivative's sigmoids are quotients of one exp (the kernels' preludes): the compiler
    takes it once per lane. Their own exps each made the backward 1.3x (swiglu fp32) to 2.3x (geglu tanh) its
    time now."""
    launcher = runtime.compile_kernel(build(dtype, casting))
    (loop,) = [lp for lp in disasm.kernel_loops(launcher.lib._name, name) if lp.fp_arith()][:1]
    assert [m for m, _ in loop.instructions].count("vscalefps") == 1, loop.instructions


_BF16_HARNESS = r"""
#include <cstdio>
#include <cstring>
#include <vector>
template <typename T, int N> struct vec_type;
#include "threads.h"
#include "simd.h"
int main(int argc, char** argv) {  // fp32 bit patterns in, tp_store_bf16s's bf16 bits out, 16 at a time
  FILE* in = fopen(argv[1], "rb");
  std::vector<uint32_t> x(16);
  std::vector<uint16_t> y(16);
  FILE* out = fopen(argv[2], "wb");
  while (fread(x.data(), 4, 16, in) == 16) {
    tp_v16 v;  // a vector's own alignment (a std::vector's buffer has malloc's 16 bytes: an AVX2 load faulted)
    memcpy(&v, x.data(), sizeof v);
    tp_store_bf16s(&v, y.data());
    fwrite(y.data(), 2, 16, out);
  }
  fclose(out);
}
"""


def test_bf16_store_with_subnormals_is_torchs_rounding_for_every_class_of_value(tmp_path):
    """tp_store_bf16s (the gated kernels' bf16 store) against torch's fp32 -> bf16 rounding, bit for bit: normal
    values (vectors that take vcvtneps2bf16 where AVX512-BF16 is built), and vectors holding subnormals, nans of
    any payload, infinities, ties and values that round to inf (the integer rounding)."""
    import os
    import subprocess
    from pathlib import Path

    import numpy as np

    rng = np.random.default_rng(0)
    normal = np.asarray(rng.standard_normal(1 << 16) * 10.0 ** rng.uniform(-30, 30, 1 << 16), np.float32).view(
        np.uint32
    )
    bits = rng.integers(0, 1 << 32, 1 << 16, dtype=np.uint64).astype(np.uint32)  # every class, in mixed vectors
    special = np.array(
        [
            0,
            0x80000000,
            0x7F800000,
            0xFF800000,
            0x7FC00000,
            0xFFC00001,
            0x7F800001,
            0x7FBFFFFF,
            1,
            0x807FFFFF,
            0x007F8000,
            0x00008000,
            0x3F808000,
            0x3F818000,
            0x7F7FFFFF,
            0xFF7F8000,
            0x3F800000,
            0x00800000,
        ],
        np.uint32,
    )
    special = np.resize(special, 32)  # two vectors of them
    x = np.concatenate([normal, bits, special])
    (tmp_path / "x.bin").write_bytes(x.tobytes())
    src = tmp_path / "bf16.cpp"
    src.write_text(_BF16_HARNESS)
    header = Path(runtime.__file__).with_name("simd.h")
    exe = tmp_path / "bf16"
    cxx = os.environ.get("CXX", "g++")
    subprocess.run(
        [cxx, *settings.COMPILE_FLAGS, "-std=c++17", f"-I{header.parent}", str(src), "-o", str(exe)],
        check=True,
        capture_output=True,
    )
    subprocess.run([str(exe), str(tmp_path / "x.bin"), str(tmp_path / "y.bin")], check=True)
    got = np.frombuffer((tmp_path / "y.bin").read_bytes(), np.uint16)
    f = torch.from_numpy(x.view(np.float32).copy())
    want = f.to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16).copy()
    want[f.isnan().numpy()] = 0x7FC0  # torch's scalar rounding's nan (its vectorized one writes 0xFFFF): simd.h's
    differ = np.flatnonzero(got != want)
    assert differ.size == 0, [(hex(x[i]), hex(got[i]), hex(want[i])) for i in differ[:8]]
