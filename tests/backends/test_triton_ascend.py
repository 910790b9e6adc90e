"""Ascend A2/A3 through triton-ascend. Where triton-ascend is the installed Triton (.ci/run's second environment):
every operator's Triton forward and backward lowers to Linalg IR for A2 and A3, fp16/bf16/fp32, a few D per
block-width bucket, with no fp64 left in it; ``tileport lower --target ascend-a2`` writes the files and their
manifest. Everywhere: the missing triton-ascend is one clear error, dispatch and the tools say which path an
A2/A3 chip gets, the NPU device parts run with the NPU stood in by the CPU, and the device check's plan."""

import importlib.util
import json
import sys
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from tileport import devices
from tileport.backends.triton import ascend
from tileport.cli import app
from tileport.ops.catalog import get, kernel_specs

runner = CliRunner()
ROOT = Path(__file__).resolve().parents[2]
HAVE = ascend.triton_ascend_version() is not None
needs_triton_ascend = pytest.mark.skipif(
    not HAVE, reason="triton-ascend is not the installed Triton here (.ci/run lowers in its second environment)"
)
DTYPES = (torch.float16, torch.bfloat16, torch.float32)
WIDTHS = (1, 100, 3000, 65536)  # block widths 1, 128, the widest bucket, and chunked rows


@pytest.mark.ascend
@needs_triton_ascend
@pytest.mark.parametrize("target", ["ascend-a2", "ascend-a3"])
@pytest.mark.parametrize("op", sorted(kernel_specs()))
def test_every_kernel_lowers_for_a2_and_a3(op, target):
    """A module whose inputs are no rows (gated DeltaNet's) names its kernels (KERNELS) and the head dims to lower
    at (LOWERING_DIMS), and gives the inputs (lowering_examples)."""
    from tileport.backends.triton import BACKEND, lowering

    chip = ascend.CHIPS[target]
    module = BACKEND.kernels(op)
    want = set(getattr(module, "KERNELS", ("_fwd_kernel", "_bwd_kernel")))
    for dtype in DTYPES:
        for dim in getattr(module, "LOWERING_DIMS", WIDTHS):
            done = lowering.lower(get(op), target, dtype, dim)
            names = {k.launch.name for k in done}
            assert want <= names, (op, dtype, dim, names)
            for k in done:
                assert "ttir" in k.files and "ttadapter" in k.files
                assert "f64" not in k.files["ttadapter"], f"{op} {k.launch.name}: fp64 reached the Ascend build"
                assert k.launch.grid[0] <= chip.vector_cores and k.launch.constants.get("F64", False) is not True


@pytest.mark.ascend
@needs_triton_ascend
def test_lower_command_writes_ir_and_manifest(tmp_path):
    result = runner.invoke(
        app, ["lower", "rms_norm", "--target", "ascend-a2", "--dtype", "bf16", "--dim", "4096", "--out", str(tmp_path)]
    )
    assert result.exit_code == 0, result.output
    manifest = json.loads((tmp_path / "lower.json").read_text())
    assert manifest["arch"] == "Ascend910B3" and manifest["triton_ascend"] == ascend.triton_ascend_version()
    kernels = {k["kernel"].rsplit(".", 1)[1]: k for k in manifest["kernels"]}
    assert {"_fwd_kernel", "_bwd_kernel"} <= set(kernels)
    for k in kernels.values():
        assert k["constants"]["BLOCK_D"] > 0 and all((tmp_path / f).is_file() for f in k["files"])
        assert "no NPU binary" in k["binary"] or "built" in k["binary"]


@pytest.mark.skipif(HAVE, reason="triton-ascend is installed here")
def test_lower_for_a2_without_triton_ascend_names_the_install():
    result = runner.invoke(app, ["lower", "rms_norm", "--target", "ascend-a2", "--dim", "128"])
    text = " ".join(result.output.replace("│", " ").split())
    assert result.exit_code == 2 and "triton-ascend, which is not installed here" in text and "tileport[ascend]" in text


def test_a2_a3_dispatch_and_the_paths_the_tools_print():
    from tileport.backends import ascend_paths

    flavour, _, missing, rows = ascend_paths()
    by_op = {op: (a35, a32) for op, a35, a32 in rows}
    assert set(by_op) == set(kernel_specs())  # a composed operator runs on another's kernels
    want = "triton (triton-ascend)" if HAVE else "torch"
    assert all(a32 == want for _, a32 in by_op.values())
    assert ("triton-ascend" in flavour) == HAVE and (any("triton-ascend" in m for m in missing) != HAVE)
    result = runner.invoke(app, ["backends"])
    assert result.exit_code == 0 and "arch32 (A2/A3" in result.output and "Triton here:" in result.output


def test_the_ascend_forms_run_on_the_cpu_interpreter(monkeypatch):
    """$TILEPORT_TRITON_ASCEND runs the kernels' Ascend forms (the chip's grid and blocks, compensated fp32 for
    fp64) under the interpreter: their numbers are measured here, against the float64 golden."""
    pytest.importorskip("triton")
    if HAVE:
        pytest.skip("triton-ascend has no CPU interpreter")
    import tileport
    from tileport.backends.triton.common import blocks, wide

    monkeypatch.setenv(ascend.EMULATE, "ascend-a2")
    cpu = torch.device("cpu")
    assert not wide(cpu) and blocks(30000, 700, cpu, 4)[2] == (ascend.CHIPS["ascend-a2"].vector_cores,)
    x = torch.randn(9, 300, dtype=torch.float32)
    want = torch.softmax(x.double(), -1)
    got = tileport.softmax(x, backend="triton")
    assert (got.double() - want).abs().max() < 1e-6
    y = tileport.layer_norm(x, backend="triton")
    ref = torch.nn.functional.layer_norm(x.double(), (300,))
    assert (y.double() - ref).abs().max() < 1e-5


def test_verify_on_an_npu_keeps_the_golden_on_the_cpu(monkeypatch, tmp_path):
    """``verify --device npu`` with the NPU stood in by the CPU (no torch_npu here): inputs go to the device
    through ``devices.to``, the float64 golden does not."""
    moved = []
    monkeypatch.setattr(devices, "npu_ready", lambda: None)
    monkeypatch.setattr(devices, "to", lambda t, device: (moved.append((device, t.dtype)), t)[1])
    from tileport.cases import generate, load_suite, make_inputs
    from tileport.verify import accuracy

    suite = load_suite("l2norm")
    j = accuracy.Judge(suite, "L0", "npu")
    case = next(c for c in generate(suite, "quick", [torch.bfloat16]) if c.counted)
    j.references(make_inputs(suite, case), True)
    assert moved and all(dtype != torch.float64 for _, dtype in moved) and {d for d, _ in moved} == {"npu"}
    assert devices.check("npu") == "npu"


def test_npu_device_without_torch_npu_is_a_clear_error(tmp_path):
    if importlib.util.find_spec("torch_npu") is not None:
        pytest.skip("torch_npu is installed here")
    result = runner.invoke(app, ["verify", "l2norm", "--device", "npu", "--level", "quick", "--out", str(tmp_path)])
    text = " ".join(result.output.replace("│", " ").split())
    assert result.exit_code == 2 and "device 'npu' is not usable here: torch_npu does not import" in text
    result = runner.invoke(app, ["bench", "l2norm", "--device", "npu", "--quick"])
    assert result.exit_code == 2


def test_the_device_checks_plan_and_arguments(capsys, monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "scripts"))
    sys.modules.pop("ascend_check", None)
    import ascend_check

    assert ascend_check.main(["--dry-run", "--op", "rms_norm", "--out", "x"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[1] == "tileport verify rms_norm --device npu --level quick --no-perf --out x/rms_norm-verify"
    assert any("--shape 16384x4096" in line and "--dtype bf16" in line for line in lines)
    assert ascend_check.main(["--dry-run", "--op", "no_such_op"]) == 2
    if devices.npu_ready() is not None:
        assert ascend_check.main(["--op", "rms_norm", "--out", "x"]) == 2  # not an A2/A3 host: says so, runs nothing


@pytest.mark.ascend
@needs_triton_ascend
@pytest.mark.parametrize("target", ["ascend-a2", "ascend-a3"])
def test_cross_entropy_options_lower_for_a2_and_a3(target):
    """cross_entropy's kernels with what the spec's example leaves out: weights, smoothing, z-loss, softcap (tanh
    by exp only), int32 targets, the fused gradient written in place; fp32 sums (no fp64), the vector-core grid,
    and blocks whose live fp32 tensors fit half the unified buffer."""
    from tileport.backends.triton import cross_entropy as ce
    from tileport.backends.triton import lowering

    chip = ascend.CHIPS[target]
    for dtype in DTYPES:
        for c in (100, 65536):
            x = torch.randn(64, c).to(dtype)
            t = torch.randint(0, c, (64,), dtype=torch.int32)
            w = torch.rand(c).to(dtype)
            with lowering.capturing(chip) as found:
                _, _, lse = ce.forward(x, t, w, -100, 0.1, 1e-4, 30.0, grad=x, scales=(0.5, 0.5))
                ce.backward(torch.ones(64), torch.ones(64), x, t, w, lse, -100, 0.1, 1e-4, 30.0)
            assert [k.name for k in found] == ["_fwd_kernel", "_bwd_kernel"]
            for launch in found:
                k = lowering.compile_launch(launch, chip)
                assert "f64" not in k.files["ttadapter"], f"{launch.name}: fp64 reached the Ascend build"
                block = launch.constants["BLOCK_M"] * launch.constants["BLOCK_D"]
                live = ce.LIVE["fwd" if launch.name == "_fwd_kernel" else "bwd"]
                assert launch.grid[0] <= chip.vector_cores and 4 * live * block <= chip.ub_bytes // 2
                assert launch.constants.get("F64", False) is False and launch.constants["SOFTCAP"] is True
