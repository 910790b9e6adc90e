"""`tileport scaffold`: a new operator's files, wired through the seam, whose tests run and fail on the TODOs."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tileport.scaffold import ScaffoldError, class_name, default_root, plan, select

ROOT = default_root()


@pytest.mark.parametrize("name", ["Bad", "2norm", "soft-plus", "class", "x y", ""])
def test_names_that_are_not_lower_case_identifiers_are_refused(name):
    with pytest.raises(ScaffoldError, match="not a valid lower-case Python identifier"):
        plan(name)


@pytest.mark.parametrize("name", ["l2norm", "rms_norm", "available_backends"])
def test_existing_operators_and_api_names_are_never_overwritten(name):
    with pytest.raises(ScaffoldError, match="exists already"):
        plan(name)


def test_like_an_operator_without_a_template_is_refused_naming_what_is_missing():
    with pytest.raises(ScaffoldError, match="layer_norm's inputs and outputs .*bias.* have no template yet"):
        plan("group_norm", like="layer_norm")
    with pytest.raises(ScaffoldError, match="not an operator"):
        plan("group_norm", like="nope")


def test_plan_names_every_layer_and_the_export_line():
    p = plan("soft_sign")
    written = {str(path.relative_to(ROOT)) for path in p.files}
    assert {"tileport/ops/soft_sign/__init__.py", "tileport/backends/tilelang/cpu/soft_sign.py",
            "tileport/backends/triton/soft_sign.py", "tileport/cases/suites/soft_sign.yaml",
            "tests/ops/test_soft_sign_numerics.py", "docs/ops/soft_sign.md"} <= written  # fmt: skip
    assert p.export.startswith("from .soft_sign import SoftSign, soft_sign, soft_sign_bwd, soft_sign_fwd")
    assert class_name("group_norm") == "GroupNorm"
    assert not any("$" in text for text in p.files.values())  # every placeholder filled


@pytest.mark.parametrize("like", ["l2norm", "rms_norm"])
def test_each_signature_gets_its_own_lines_and_valid_python(like):
    """One template set serves both signatures: the weighted one threads the weight through every layer."""
    p = plan("group_rms", like=like)
    for path, text in p.files.items():
        assert "#[" not in text, path  # every marker consumed
        if path.suffix == ".py":
            compile(text, str(path), "exec")
    init = next(t for path, t in p.files.items() if path.match("tileport/ops/group_rms/__init__.py"))
    spec = next(t for path, t in p.files.items() if path.match("tileport/ops/group_rms/spec.py"))
    weighted = like == "rms_norm"
    assert ("def group_rms_bwd(\n    x: torch.Tensor, rstd: torch.Tensor, dy: torch.Tensor, weight" in init) == weighted
    assert ('s.Tensor("dweight", s.REDUCED, optional=True)' in spec) == weighted
    suite = next(t for path, t in p.files.items() if path.suffix == ".yaml")
    assert ("- name: weight" in suite) == weighted and "name: group_rms" in suite


def test_select_keeps_the_lines_of_one_signature():
    text = "a\nb  #[w]\nc  #[-w]\n  #[w]\nd\n"
    assert select(text, True) == "a\nb\n\nd\n"
    assert select(text, False) == "a\nc\nd\n"


def _copy_checkout(dest: Path) -> None:
    for part in ("tileport", "tests", "docs"):
        shutil.copytree(ROOT / part, dest / part, ignore=shutil.ignore_patterns("__pycache__", "*-verify*", "*-bench"))
    shutil.copy(ROOT / "pyproject.toml", dest / "pyproject.toml")
    git = ["git", "-C", str(dest), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run(git[:3] + ["init", "-q"], check=True)
    subprocess.run(git + ["add", "-A"], check=True)
    subprocess.run(git + ["commit", "-qm", "checkout"], check=True)


@pytest.mark.slow
@pytest.mark.parametrize("like", ["l2norm", "rms_norm"])
def test_a_scaffolded_operator_is_wired_and_its_tests_fail_on_the_todos(tmp_path, like):
    _copy_checkout(tmp_path)
    env = dict(os.environ, PYTHONPATH=str(tmp_path))
    cli = [sys.executable, "-m", "tileport.cli"]
    made = subprocess.run(cli + ["scaffold", "soft_sign", "--like", like], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert made.returncode == 0, made.stderr
    status = subprocess.run(["git", "-C", str(tmp_path), "status", "--porcelain"], capture_output=True, text=True).stdout.splitlines()
    assert [s for s in status if not s.startswith("?? ")] == [" M tileport/ops/__init__.py"]  # new files + the export line
    again = subprocess.run(cli + ["scaffold", "soft_sign"], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert again.returncode != 0 and "exists already" in again.stdout + again.stderr
    listed = subprocess.run(cli + ["ops"], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert "soft_sign" in listed.stdout
    tests = ["tests/ops/test_soft_sign_numerics.py", "tests/ops/test_soft_sign_errors.py"]
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *tests], cwd=tmp_path, env=env, capture_output=True, text=True)
    out = run.stdout
    assert run.returncode == 1, out[-3000:]
    assert "NotImplementedError: TODO(soft_sign)" in out
    assert " passed" in out and "test_soft_sign_errors.py" not in "".join(line for line in out.splitlines() if line.startswith("FAILED"))
