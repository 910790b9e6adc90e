"""The readiness check on the originals users move from (installed in .ci/run's triton-ascend environment,
without their dependencies): flash-linear-attention's l2norm_fwd takes fla's Ascend path under the stand-in and
lowers; Liger-Kernel's LigerRMSNormFunction.apply writes a verdict per kernel, its backward's too, and on its
generic path (no transformers to tell it of the NPU) its forward's cause is the libdevice stub it imports."""

import importlib.util
import json
import subprocess
import sys

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


@pytest.mark.skipif(
    importlib.util.find_spec("liger_kernel") is None,
    reason="liger-kernel is not installed (.ci/run installs it)",
)
def test_liger_rms_norm_on_its_generic_path_names_the_libdevice_stub(tmp_path):
    """Without transformers (a new user's environment) Liger asks no NPU and imports rsqrt from
    triton.language.extra.libdevice; the forward stops at its store of the stub's None, a line a comment about
    float64 precedes: the cause is the stub, never fp64. A process of its own: Liger's modules import once."""
    hide = "import sys; sys.modules['transformers'] = None; from tileport.cli import app; app()"
    args = ["lower", "--impl", "liger_kernel.ops:LigerRMSNormFunction.apply", "--target", "ascend-a2"]
    args += ["--arg", "X=4096x2048:bfloat16", "--arg", "W=2048:bfloat16", "--arg", "eps=1e-6", "--out", str(tmp_path)]
    res = subprocess.run([sys.executable, "-c", hide, *args], capture_output=True, text=True, timeout=300)
    assert res.returncode == 1, res.stdout + res.stderr
    report = json.loads((tmp_path / "lower.json").read_text())
    assert report["path"] == []
    kernels = {k["kernel"].rsplit(".", 1)[-1]: k for k in report["kernels"]}
    fwd = kernels["_rms_norm_forward_kernel"]
    assert not fwd["lowered"] and [f["cause"] for f in fwd["findings"]] == ["libdevice-stub"]
    assert fwd["findings"][0]["what"].startswith("rsqrt (triton.language.extra.libdevice.rsqrt)")
    assert "float64" not in fwd["error"] and "TypeError: cannot convert None" in fwd["error"]
    assert "tl.math.rsqrt" in res.stdout + res.stderr and kernels["_rms_norm_backward_kernel"]["lowered"]
