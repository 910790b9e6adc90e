"""causal_conv1d's and causal_conv1d_update's TileLang device kernels lower here without their devices: the
CUDA kernels for each variant the options select (silu, initial states, seq_idx, widths), batches, tokens and
channels runtime values; a cubin builds where nvcc is; the Ascend arch35 kernels' tiles move GM <-> UB within the
unified buffer (the widest-tile lowering of every kernel is tests/backends/test_tilelang_lowering.py's)."""

import re
import shutil

import pytest
import torch
from typer.testing import CliRunner

from tileport.backends.registry import REGISTRY
from tileport.cli import app


@pytest.fixture(scope="module")
def backend():
    if not REGISTRY.availability("tilelang").ok:
        pytest.skip(REGISTRY.availability("tilelang").reason)
    return REGISTRY.load("tilelang")


@pytest.mark.parametrize(
    "dtype,options",
    [
        (torch.bfloat16, {}),
        (torch.float16, {"initial_states": True, "width": 2}),
        (torch.float32, {"seq_idx": True, "activation": "none", "width": 1}),
    ],
    ids=["bf16-silu", "fp16-states-w2", "fp32-seq-none-w1"],
)
def test_cuda_kernels_lower_for_every_variant(backend, dtype, options):
    src = backend.device_sources("causal_conv1d", "cuda", dtype, 4096, **options)
    assert set(src) == {f"causal_conv1d_{k}" for k in ("fwd", "grad", "dx", "dweight")}
    for name, text in src.items():  # one kernel for every batch, length and channel count
        params = re.search(rf"{name}_kernel\(([^)]*)\)", text).group(1)
        assert {"int B", "int D", "int L"} <= {p.strip() for p in params.split(",")}, (name, params)
    silu = options.get("activation", "silu") == "silu"
    assert ("exp" in src["causal_conv1d_fwd"]) == silu and ("exp" in src["causal_conv1d_grad"]) == silu
    assert ("IDS[" in src["causal_conv1d_fwd"]) == options.get("seq_idx", False)  # ids read only with seq_idx
    assert ("H[" in src["causal_conv1d_fwd"]) == options.get("initial_states", False)


def test_the_update_step_lowers_on_the_forward_kernel(backend):
    src = backend.device_sources("causal_conv1d_update", "cuda", torch.bfloat16, 4096, width=4)
    assert list(src) == ["causal_conv1d_update_fwd"] and "causal_conv1d_fwd_kernel" in src["causal_conv1d_update_fwd"]


def test_lower_cli_cuda_builds_cubins(tmp_path):
    if shutil.which("nvcc") is None:
        pytest.skip("nvcc not on PATH: the cubin step needs the CUDA toolkit")
    result = CliRunner().invoke(
        app, ["lower", "causal_conv1d", "--target", "cuda", "--dim", "4096", "--dtype", "bf16", "--out", str(tmp_path)]
    )
    assert result.exit_code == 0, result.output
    for k in ("fwd", "grad", "dx", "dweight"):
        assert (tmp_path / f"causal_conv1d_{k}_bfloat16_D4096.cubin").read_bytes()[:4] == b"\x7fELF"


def test_ascend_forward_moves_tiles_through_the_unified_buffer(backend, capfd):
    from tileport.backends.tilelang.ascend import causal_conv1d as ascend
    from tileport.backends.tilelang.targets import ON_CHIP_BUDGET, lower_kernel

    text, used = lower_kernel(ascend.build("fwd", torch.bfloat16, 4, True, True, False), "ascend")
    out, err = capfd.readouterr()
    assert "ThreadSync" not in out + err, "lowering reports a data race: " + (out + err)[-400:]
    assert "asc_copy_gm2ub_align" in text and "asc_copy_ub2gm_align" in text and "asc_vf_call" in text
    assert 0 < used <= ON_CHIP_BUDGET["ascend"]
    with pytest.raises(ValueError, match="the Ascend kernels take widths 1 to 65"):
        ascend.build("fwd", torch.bfloat16, 66, True, False, False)
