"""Operators outside tileport: a package declares its OpSpec through the ``tileport.ops`` entry point group
(tests/plugins/demo, made visible to a fresh process by a dist-info in a temporary folder, as pip would leave
it); ``tileport ops`` lists it with its package, ``tileport verify`` runs it, its interface is derived; a
broken plugin is reported by name and tileport's own operators keep working."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

DEMO = Path(__file__).resolve().parent / "plugins" / "demo"


def _site(tmp_path: Path, entries: str) -> dict:
    site = tmp_path / "site"
    info = site / "tileport_demo-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: tileport-demo\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[tileport.ops]\n{entries}")
    (info / "top_level.txt").write_text("tileport_demo\n")
    path = os.pathsep.join([str(site), str(DEMO), os.environ.get("PYTHONPATH", "")])
    return dict(os.environ, PYTHONPATH=path)


def _tileport(env, *args, cwd=None):
    return subprocess.run(
        [sys.executable, "-m", "tileport.cli", *args], env=env, capture_output=True, text=True, cwd=cwd
    )


@pytest.mark.slow
def test_a_plugin_operator_is_listed_verified_and_derived(tmp_path):
    env = _site(tmp_path, "demo_scale = tileport_demo.spec:SPEC\n")
    listed = _tileport(env, "ops")
    assert listed.returncode == 0, listed.stderr
    row = next(line for line in listed.stdout.splitlines() if "demo_scale" in line)
    assert "tileport-demo 0.1" in row and "tilelang" in row and "torch" in row
    assert "rms_norm" in listed.stdout and "tileport " in listed.stdout  # tileport's own, still there
    ran = _tileport(env, "verify", "demo_scale", "--level", "quick", "--no-perf", "--out", str(tmp_path / "v"))
    assert ran.returncode == 0, ran.stdout[-3000:] + ran.stderr[-2000:]
    report = (tmp_path / "v" / "report.md").read_text()
    assert "# tileport verify demo_scale (quick): PASS" in report and "| tilelang | float32 |" in report
    code = (
        "import torch, tileport_demo, inspect; x = torch.randn(3, 4, requires_grad=True); tileport_demo.demo_scale(x, "
        "3.0).sum().backward();"
        "print(inspect.signature(tileport_demo.demo_scale), x.grad.unique().tolist())"
    )
    derived = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert derived.stdout.strip() == "(x, scale=2.0, *, backend=None) [3.0]", derived.stderr


@pytest.mark.slow
def test_a_broken_plugin_is_reported_by_name_and_stops_nothing(tmp_path):
    env = _site(
        tmp_path,
        (
            "demo_scale = tileport_demo.spec:SPEC\nbroken_op = tileport_demo.broken:SPEC\nnot_a_spec = "
            "tileport_demo.reference:forward\n"
        ),
    )
    listed = _tileport(env, "ops")
    assert listed.returncode == 0, listed.stderr
    out = " ".join(listed.stdout.split())
    assert (
        "plugin not loaded: tileport-demo 0.1: broken_op = tileport_demo.broken:SPEC: ImportError: this plugin module "
        "is broken"
    ) in out
    assert "not_a_spec = tileport_demo.reference:forward: TypeError: it gives a function, not an OpSpec" in out
    assert "demo_scale" in out and "rms_norm" in out
    doctor = _tileport(env, "doctor")
    assert "plugins" in doctor.stdout and "broken_op" in " ".join(doctor.stdout.split())
