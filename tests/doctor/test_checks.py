"""Each doctor check against faked environments: missing compiler, old glibc, no NPU, unwritable cache..."""

import dataclasses
import json
import types
from pathlib import Path

from typer.testing import CliRunner

from tileport.cli import app
from tileport.doctor import checks, default_backend_runs, run_checks
from tileport.doctor.probe import Probe


def probe(**kw):
    return dataclasses.replace(Probe(), **kw)


def no_import(*missing):
    real = Probe().import_module

    def imp(name):
        if name in missing:
            raise ImportError(f"No module named {name!r}")
        return real(name)

    return imp


def test_this_machine_runs_the_default_backend():
    findings = run_checks()
    assert default_backend_runs(findings), [f for f in findings if f.status == "fail"]
    by = {f.check: f for f in findings}
    assert by["TileLang CPU kernel"].status == "ok" and by["tilelang"].detail.startswith("tilelang 0.1.")
    assert by["torch_npu and NPUs"].status == "info"  # no NPU stack on these machines


def test_missing_compiler_fails_with_fix():
    p = probe(which=lambda name: None)
    f = checks.compiler(p)
    assert f.status == "fail" and "'g++' not on PATH" in f.detail and "apt install g++" in f.fix
    assert checks.openmp(p).status == "fail"
    assert not default_backend_runs([f])


def test_openmp_build_failure_is_reported():
    f = checks.openmp(probe(run=lambda cmd: None))
    assert f.status == "fail" and "-fopenmp" in f.detail


def test_old_python_and_missing_headers(tmp_path):
    assert checks.python(probe(python_version=(3, 9, 1))).status == "fail"
    f = checks.python_headers(probe(python_include=tmp_path))
    assert f.status == "fail" and "python3-devel" in f.fix


def test_tilelang_missing_or_out_of_range():
    f = checks.tilelang(probe(import_module=no_import("tilelang")))
    assert f.status == "fail" and "import tilelang failed" in f.detail and "tilelang>=0.1.15,<0.2" in f.fix
    fake = types.SimpleNamespace(__version__="0.2.3")
    f = checks.tilelang(probe(import_module=lambda n: fake))
    assert f.status == "fail" and "0.2.3" in f.detail


def test_old_glibc_warns_for_ascend_wheels():
    f = checks.glibc(probe(glibc=lambda: "2.36"))
    assert f.status == "warn" and ">= 2.38" in f.detail and "Ubuntu 24.04" in f.fix
    assert checks.glibc(probe(glibc=lambda: "2.39")).status == "ok"
    assert checks.glibc(probe(glibc=lambda: None)).status == "info"


def test_glibcxx_symbol_version():
    lib = Path("/usr/lib/libstdc++.so.6")
    f = checks.glibcxx(probe(libstdcxx=lambda: lib, glibcxx_versions=lambda p: {"GLIBCXX_3.4.30", "GLIBCXX_3.4.29"}))
    assert f.status == "warn" and "newest GLIBCXX_3.4.30" in f.detail and "gcc-toolset" in f.fix
    f = checks.glibcxx(probe(libstdcxx=lambda: lib, glibcxx_versions=lambda p: {"GLIBCXX_3.4.32"}))
    assert f.status == "ok"


def test_no_npu_and_a_broken_npu_stack():
    assert checks.npu(probe(can_import=lambda n: False)).status == "info"

    def broken(name):
        raise RuntimeError("libascendcl.so: cannot open shared object file")

    f = checks.npu(probe(can_import=lambda n: True, import_module=broken))
    assert f.status == "warn" and "libascendcl" in f.detail and "set_env.sh" in f.fix
    npu_mod = types.SimpleNamespace(
        npu=types.SimpleNamespace(device_count=lambda: 2, get_device_name=lambda i: ["Ascend910B2", "Ascend950PR"][i])
    )
    f = checks.npu(probe(can_import=lambda n: True, import_module=lambda n: npu_mod))
    assert f.status == "ok" and "Ascend910B2 (npu-arch32)" in f.detail and "Ascend950PR (npu-arch35)" in f.detail
    npu_310 = types.SimpleNamespace(
        npu=types.SimpleNamespace(device_count=lambda: 1, get_device_name=lambda i: "Ascend310P3")
    )
    f = checks.npu(probe(can_import=lambda n: True, import_module=lambda n: npu_310))
    assert f.status == "warn" and "Ascend310P3 (unsupported architecture" in f.detail  # named, not "the check failed"


def test_autoload_and_cann():
    f = checks.autoload(probe(can_import=lambda n: True, environ={}))
    assert f.status == "warn" and "TORCH_DEVICE_BACKEND_AUTOLOAD=0" in f.fix
    assert (
        checks.autoload(probe(can_import=lambda n: True, environ={"TORCH_DEVICE_BACKEND_AUTOLOAD": "0"})).status == "ok"
    )
    assert checks.cann(probe(which=lambda n: None, environ={})).status == "info"
    f = checks.cann(probe(which=lambda n: None, environ={"ASCEND_HOME_PATH": "/usr/local/Ascend"}))
    assert f.status == "warn" and "bisheng not on PATH" in f.detail
    assert checks.cann(probe(which=lambda n: "/opt/bisheng", environ={})).status == "ok"


def test_nvcc_present_or_absent():
    assert checks.nvcc(probe(which=lambda n: None)).status == "info"
    f = checks.nvcc(
        probe(
            which=lambda n: "/usr/local/cuda/bin/nvcc", run=lambda c: "Cuda compilation tools, release 13.0, V13.0.48"
        )
    )
    assert f.status == "ok" and "release 13.0" in f.detail


def test_unwritable_cache_fails(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    f = checks.kernel_cache(probe(environ={"TILEPORT_CACHE_DIR": str(blocker)}))
    assert f.status == "fail" and "not writable" in f.detail and "TILEPORT_CACHE_DIR" in f.fix
    ok = checks.kernel_cache(probe(environ={"TILEPORT_CACHE_DIR": str(tmp_path / "c")}))
    assert ok.status == "ok" and str(tmp_path / "c") in ok.detail


def test_cli_table_json_and_exit_code(monkeypatch):
    runner = CliRunner()
    result = runner.invoke(app, ["doctor", "--json"])
    assert result.exit_code == 0, result.output
    assert {f["check"] for f in json.loads(result.output)} >= {"python", "tilelang", "kernel cache", "glibc"}
    import tileport.doctor as doctor

    monkeypatch.setattr(doctor, "CHECKS", (lambda p: checks.Finding("compiler", "fail", "no g++", "install g++"),))
    result = runner.invoke(app, ["doctor"])
    assert result.exit_code == 1 and "cannot run here" in result.output


def test_cpu_simd_names_the_isa_and_checks_the_built_loops():
    import platform

    f = checks.cpu_simd(probe())
    if platform.machine() == "x86_64" and Probe().which("objdump"):
        assert f.status == "ok" and "fp32 lanes" in f.detail and "packed" in f.detail, f
    assert checks.cpu_simd(probe(which=lambda name: None, machine="x86_64")).status == "info"
    other = checks.cpu_simd(probe(machine="aarch64"))
    assert other.status == "info" and "x86 only" in other.detail


def test_the_openmp_wait_policy_is_named_with_its_fix():
    spinning = checks.shared_cores(Probe(environ={}))
    assert spinning.status == "info" and "unset" in spinning.detail and "OMP_WAIT_POLICY=passive" in spinning.fix
    assert checks.shared_cores(Probe(environ={"OMP_WAIT_POLICY": "PASSIVE"})).status == "ok"
    assert "ACTIVE" in checks.shared_cores(Probe(environ={"OMP_WAIT_POLICY": "ACTIVE"})).detail
