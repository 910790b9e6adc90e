"""The readiness check on the originals users move from (installed in .ci/run's triton-ascend environment,
without their dependencies): flash-linear-attention's l2norm_fwd takes fla's Ascend path under the stand-in and
lowers; Liger-Kernel's LigerRMSNormFunction.apply writes a verdict per kernel, its backward's too."""

import importlib.util
import json

import pytest
from typer.testing import CliRunner

from tileport.backends.triton import ascend
from tileport.cli import app

runner = CliRunner()
pytestmark = [
    pytest.mark.ascend,
    pytest.mark.skipif(
        ascend.triton_ascend_version() is None,
        reason="triton-ascend is not the installed Triton here",
    ),
]


def _run(tmp_path, impl: str, *args: str) -> tuple[int, dict]:
    cmd = ["lower", "--impl", impl, "--target", "ascend-a2", "--out", str(tmp_path)]
    for a in args:
        cmd += ["--arg", a]
    res = runner.invoke(app, cmd)
    return res.exit_code, json.loads((tmp_path / "lower.json").read_text())


@pytest.mark.skipif(
    importlib.util.find_spec("fla") is None,
    reason="fla-core is not installed (.ci/run installs it)",
)
def test_fla_l2norm_fwd_takes_its_ascend_path(tmp_path):
    status, report = _run(tmp_path, "fla.modules.l2norm:l2norm_fwd", "x=4096x2048:bfloat16")
    assert status == 0, report
    assert "triton driver: target" in report["path"]
    (kernel,) = report["kernels"]
    assert "triton_ascend" in kernel["kernel"] and kernel["lowered"]


@pytest.mark.skipif(
    importlib.util.find_spec("liger_kernel") is None,
    reason="liger-kernel is not installed (.ci/run installs it)",
)
def test_liger_rms_norm_gets_a_verdict_per_kernel(tmp_path):
    status, report = _run(
        tmp_path,
        "liger_kernel.ops:LigerRMSNormFunction.apply",
        "X=4096x2048:bfloat16",
        "W=2048:bfloat16",
        "eps=1e-6",
    )
    assert status == 0, report
    names = sorted(k["kernel"].rsplit(".", 1)[-1] for k in report["kernels"])
    assert names == ["_rms_norm_backward_kernel", "_rms_norm_forward_kernel"] and report["backward"] == "captured"
    assert all(k["lowered"] and k["ok"] for k in report["kernels"])
