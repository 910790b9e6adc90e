"""CUDA and Ascend arch35 kernels lower here for every dtype and a spread of D (one kernel per width bucket,
D a runtime value); CUDA source builds a cubin; Ascend lowering is free of ThreadSync race warnings."""

import re
import shutil

import pytest
import torch
from typer.testing import CliRunner

from tileport.backends.registry import REGISTRY
from tileport.cli import app
from tileport.ops.catalog import kernel_specs


@pytest.fixture(scope="module")
def backend():
    if not REGISTRY.availability("tilelang").ok:
        pytest.skip(REGISTRY.availability("tilelang").reason)
    return REGISTRY.load("tilelang")


# every dtype, small and large buckets (one chunk and several), without the full cross product: an Ascend
# lowering takes 10-18 s here, a CUDA one 2-4 s
SPREAD = [(torch.float16, 1), (torch.bfloat16, 100), (torch.float32, 4097), (torch.bfloat16, 65536)]


@pytest.mark.parametrize("dtype,dim", SPREAD)
def test_cuda_lowering(backend, dtype, dim):
    src = backend.device_sources("l2norm", "cuda", dtype, dim)
    fwd, bwd = src["l2norm_fwd"], src["l2norm_bwd"]
    assert 'extern "C" __global__' in fwd and "int D, int M" in fwd  # one kernel for every row count and width
    assert "tl::AllReduce" in fwd and "tl::AllReduce" in bwd  # T.reduce_sum across threads
    assert "__frsqrt_rn" in fwd  # the correctly rounded rsqrt by default
    assert re.search(r"\) < D\)", fwd) and re.search(r"\) < D\)", bwd)  # the bucket's tile is masked at the runtime D


def test_cuda_approx_rsqrt(backend):
    fwd = backend.device_sources("l2norm", "cuda", torch.float16, 512, rsqrt="approx")["l2norm_fwd"]
    assert "__frsqrt_rn" not in fwd and "rsqrtf" in fwd


def test_one_kernel_per_width_bucket(backend):
    from tileport.backends.tilelang.ascend.l2norm import bucket as ascend_bucket
    from tileport.backends.tilelang.cuda.l2norm import bucket as cuda_bucket

    assert [cuda_bucket(d) for d in (1, 32, 33, 100, 2048, 2049, 65536)] == [32, 32, 64, 128, 2048, 2048, 2048]
    assert [ascend_bucket(d) for d in (1, 128, 129, 4096, 4097, 65536)] == [128, 128, 256, 4096, 4096, 4096]
    from tileport.backends.tilelang.cuda import l2norm
    from tileport.backends.tilelang.targets import cuda_target, lower_source

    # lowered directly (device_sources memoizes per bucket): the source does not depend on D within a bucket
    a, b = (lower_source(l2norm.lowered(torch.float16, d)["l2norm_fwd"], cuda_target()) for d in (65, 127))
    assert a == b


@pytest.mark.parametrize(
    "dtype,dim", [SPREAD[0], SPREAD[2], SPREAD[3]]
)  # (bf16, 100): its bucket is (fp16, 1)'s, bf16 is at 65536
def test_ascend_lowering(backend, dtype, dim, capfd):
    src = backend.device_sources("l2norm", "ascend", dtype, dim)
    out, err = capfd.readouterr()
    assert "ThreadSync" not in out + err, "lowering reports a data race: " + (out + err)[-400:]
    assert "int32_t D, int32_t M" in src["l2norm_fwd"]  # one kernel for every row count and width in the bucket
    for s in src.values():
        assert "asc_copy_gm2ub_align" in s and "asc_copy_ub2gm_align" in s  # GM <-> UB tiles
        assert "asc_vf_call" in s and "tl::AscendAllReduce" in s  # SIMT vector sub-kernels, row reduction
        assert "asc_sync_wait" in s
    assert "rsqrtf" in src["l2norm_fwd"] and "0x1.8p+0f" in src["l2norm_fwd"]  # one NR step by default


@pytest.mark.parametrize("steps", [0, 3])  # 1, the default: test_ascend_lowering
def test_ascend_refinement_steps_in_source(backend, steps):
    fwd = backend.device_sources("l2norm", "ascend", torch.float16, 512, nr_steps=steps, only=("l2norm_fwd",))[
        "l2norm_fwd"
    ]
    assert fwd.count("0x1.8p+0f") == steps  # the 1.5 of y * (1.5 - 0.5 * s * y^2), once per step
    assert fwd.count("rsqrtf(") == 1  # the steps reuse one hardware rsqrt


def test_double_buffered_chunks_for_long_rows(backend):
    fwd = backend.device_sources("l2norm", "ascend", torch.bfloat16, 65536)["l2norm_fwd"]  # test_ascend_lowering's
    assert "version_counter" in fwd  # T.Pipelined's two UB stages


def test_a_lowering_is_kept_on_disk_with_what_it_printed(backend, tmp_path, monkeypatch, capfd):
    """A kernel lowered once is read back from the disk cache (source, on-chip bytes and what the lowering printed,
    printed again); another kernel is a key of its own."""
    from tileport.backends.tilelang import lowered, targets

    monkeypatch.setenv("TILEPORT_CACHE_DIR", str(tmp_path))
    funcs = backend.kernels("l2norm", "cuda").lowered(torch.float16, 64)
    calls = []
    real = lowered.lower_kernel

    def lower_kernel(func, target):
        calls.append(target)
        print("a warning the lowering printed")
        return real(func, target)

    monkeypatch.setattr(lowered, "lower_kernel", lower_kernel)
    first = lowered.lower(funcs["l2norm_fwd"], targets.cuda_target())
    assert "a warning the lowering printed" in "".join(capfd.readouterr())
    again = lowered.lower(funcs["l2norm_fwd"], targets.cuda_target())
    assert len(calls) == 1 and again == first and isinstance(again[1], targets.OnChip)
    assert "a warning the lowering printed" in "".join(capfd.readouterr())  # printed again from the cache
    lowered.lower(funcs["l2norm_bwd"], targets.cuda_target())
    assert len(calls) == 2 and len(list(lowered.folder(__import__("tilelang").__version__).glob("*.json"))) == 2


def test_lowered_sources_are_memoized_per_width_bucket(backend):
    from tileport.backends import tilelang

    first = backend.device_sources("l2norm", "cuda", torch.float16, 65)
    keys = set(tilelang._LOWERED)
    assert backend.device_sources("l2norm", "cuda", torch.float16, 127) == first and set(tilelang._LOWERED) == keys
    backend.device_sources("l2norm", "cuda", torch.float16, 127, rsqrt="approx")  # other options: lowered anew
    assert len(tilelang._LOWERED) == len(keys) + 2


@pytest.mark.parametrize("op,dtype", [("l2norm", "bf16"), ("rms_norm", "bfloat16")])
def test_lower_cli_cuda_builds_a_cubin(tmp_path, op, dtype):
    if shutil.which("nvcc") is None:
        pytest.skip("nvcc not on PATH: the cubin step needs the CUDA toolkit")
    result = CliRunner().invoke(
        app, ["lower", op, "--target", "cuda", "--dim", "4097", "--dtype", dtype, "--out", str(tmp_path)]
    )
    assert result.exit_code == 0, result.output
    cubin = tmp_path / f"{op}_fwd_bfloat16_D4097.cubin"  # both spellings of the dtype are accepted, one printed
    assert cubin.read_bytes()[:4] == b"\x7fELF" and (tmp_path / f"{op}_bwd_bfloat16_D4097.cubin").exists()


def test_lower_cli_ascend_stops_at_source_without_bisheng(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    monkeypatch.delenv("BISHENG_HOME", raising=False)
    result = CliRunner().invoke(app, ["lower", "l2norm", "--target", "ascend", "--dim", "100", "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert "stopped at Ascend C source" in result.output
    assert (tmp_path / "l2norm_fwd_float16_D100.cpp").read_text().count("asc_vf_call") >= 1


def test_lower_cli_errors(tmp_path):
    runner = CliRunner()
    for args, message in [
        (["--target", "metal"], "target must be one of cuda, ascend"),
        (["--target", "cuda", "--dim", "0"], "positive row length"),
        (["--target", "cuda", "--rsqrt", "fast"], "rsqrt must be exact or approx"),
    ]:
        result = runner.invoke(app, ["lower", "l2norm", *args, "--out", str(tmp_path)])
        text = " ".join(result.output.replace("│", " ").split())
        assert result.exit_code == 2 and message in text, result.output


def test_rms_norm_cuda_lowering(backend):
    src = backend.device_sources("rms_norm", "cuda", torch.bfloat16, 4097)
    assert set(src) == {"rms_norm_fwd", "rms_norm_bwd", "rms_norm_dweight"}
    assert "__frsqrt_rn" in src["rms_norm_fwd"] and "((float)D)" in src["rms_norm_fwd"]  # a mean, exact rsqrt
    assert (
        "int D, int M" in src["rms_norm_dweight"] and "atomic" not in src["rms_norm_dweight"].lower()
    )  # rows in order


def test_rms_norm_ascend_lowering(backend, capfd):
    src = backend.device_sources("rms_norm", "ascend", torch.float16, 1000, nr_steps=1)
    out, err = capfd.readouterr()
    assert "ThreadSync" not in out + err, "lowering reports a data race: " + (out + err)[-400:]
    assert src["rms_norm_fwd"].count("rsqrtf(") == 1 and src["rms_norm_fwd"].count("0x1.8p+0f") == 1  # one NR step
    bwd = src["rms_norm_bwd"]
    assert "DWP" in bwd and bwd.count("asc_copy_ub2gm_align") >= 3  # dx, and the core's dweight row in and out


def test_layer_norm_cuda_lowering(backend):
    src = backend.device_sources("layer_norm", "cuda", torch.bfloat16, 4097)
    assert set(src) == {"layer_norm_fwd", "layer_norm_bwd", "layer_norm_param_grads"}
    fwd = src["layer_norm_fwd"]
    assert fwd.count("tl::AllReduce") == 2 and "__frsqrt_rn" in fwd  # the mean, then the centred sum of squares
    assert "atomic" not in src["layer_norm_param_grads"].lower()  # dweight and dbias: rows in order


def test_layer_norm_ascend_lowering(backend, capfd):
    src = backend.device_sources("layer_norm", "ascend", torch.float16, 1000, nr_steps=1)
    out, err = capfd.readouterr()
    assert "ThreadSync" not in out + err, "lowering reports a data race: " + (out + err)[-400:]
    assert src["layer_norm_fwd"].count("rsqrtf(") == 1 and src["layer_norm_fwd"].count("0x1.8p+0f") == 1  # one NR step
    bwd = src["layer_norm_bwd"]
    assert "DWP" in bwd and "DBP" in bwd and bwd.count("asc_copy_ub2gm_align") >= 5  # dx, both partial rows in and out


def test_device_sources_only_names_real_kernels(backend):
    with pytest.raises(
        ValueError, match="no cuda kernel named l2norm_fwdd for 'l2norm'; it has l2norm_fwd, l2norm_bwd"
    ):
        backend.device_sources("l2norm", "cuda", torch.float16, 64, only=("l2norm_fwdd",))


@pytest.mark.parametrize("op", ["softmax", "log_softmax"])
def test_softmax_family_cuda_lowering(backend, op):
    src = backend.device_sources(op, "cuda", torch.float16, 100)
    fwd = src[f"{op}_fwd"]
    assert "tl::MaxOp" in fwd and "tl::SumOp" in fwd  # the row's max, then the sum of exp(x - max)
    assert fwd.count("logf(") == (op == "log_softmax")  # the log once per row, not per element
    assert "int D, int M" in src[f"{op}_bwd"]


def test_log_softmax_ascend_lowering(backend, capfd):
    src = backend.device_sources("log_softmax", "ascend", torch.bfloat16, 5000)  # two chunks per row
    out, err = capfd.readouterr()
    assert "ThreadSync" not in out + err, "lowering reports a data race: " + (out + err)[-400:]
    assert "version_counter" in src["log_softmax_fwd"] and "asc_vf_call" in src["log_softmax_bwd"]


def test_add_rms_norm_cuda_lowering(backend):
    fwd = backend.device_sources("add_rms_norm", "cuda", torch.bfloat16, 4097, only=("add_rms_norm_fwd",))[
        "add_rms_norm_fwd"
    ]
    assert (
        "bfloat16_t* __restrict__ S" in fwd and "bfloat16_t* __restrict__ R" in fwd
    )  # residual in, residual_out written
    assert fwd.count("tl::AllReduce") == 1 and "__frsqrt_rn" in fwd  # one sum of squares, of the rounded sum


def test_add_rms_norm_ascend_lowering(backend, capfd):
    src = backend.device_sources("add_rms_norm", "ascend", torch.float16, 1000, only=("add_rms_norm_add",))[
        "add_rms_norm_add"
    ]
    out, err = capfd.readouterr()
    assert "ThreadSync" not in out + err, "lowering reports a data race: " + (out + err)[-400:]
    assert "__float22half2_rn" in src and src.count("asc_copy_ub2gm_align") >= 1  # fp32 add, rounded once, to GM


@pytest.mark.slow
@pytest.mark.parametrize("op", sorted(kernel_specs()))
def test_every_ascend_kernel_fits_the_unified_buffer(backend, op):
    """The widest tiles (D's largest bucket, or the widest dim a module lowers: a head's) in fp32, the most bytes
    per column: each kernel's planned UB bytes (the lowered kernel's dynamic shared memory) within the target's
    budget, stated once in targets.py."""
    from tileport.backends.tilelang.targets import ON_CHIP_BUDGET

    widest = getattr(backend.kernels(op, "npu-arch35"), "WIDEST", 65536)
    kernels = backend.device_kernels(op, "ascend", torch.float32, widest)
    assert kernels
    for name, (_, used) in kernels.items():
        assert 0 < used <= ON_CHIP_BUDGET["ascend"], f"{name}: {used} B"


def test_lower_refuses_a_kernel_past_the_on_chip_budget(tmp_path, monkeypatch):
    from tileport.backends.tilelang import targets

    monkeypatch.setitem(targets.ON_CHIP_BUDGET, "cuda", 64)  # a budget every kernel here exceeds: the check runs
    result = CliRunner().invoke(app, ["lower", "softmax", "--target", "cuda", "--dim", "100", "--out", str(tmp_path)])
    text = " ".join(result.output.split())
    assert result.exit_code == 2 and "softmax_fwd addresses" in text and "of cuda's 0 KB shared memory" in text, (
        result.output
    )
    assert "Traceback" not in result.output
