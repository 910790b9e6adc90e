"""The generated interface is readable source in real files: each operator's ``_interface.py`` is what its spec
generates (``tileport generate --check``), tracebacks and ``inspect`` land in it, a spec changed since the file
was written is warned about and served from a fresh file, and an operator without a file in its package (a
plugin's) gets one under the cache folder."""

import dataclasses
import inspect
import traceback
import warnings

import pytest
import torch
from typer.testing import CliRunner

import tileport
from tileport.backends.registry import REGISTRY
from tileport.cli import app
from tileport.ops import catalog, interface
from tileport.ops.interface import derive, files

runner = CliRunner()


@pytest.mark.parametrize("op", sorted(catalog.kernel_specs()))  # a composed operator derives no interface
def test_each_file_is_what_its_spec_generates(op):
    spec = catalog.get(op)
    path = files.package_file(spec)
    assert path is not None and path.exists(), f"run `tileport generate {op}`"
    assert path.read_text() == files.text(spec), f"{path} is stale: run `tileport generate {op}`"


def test_generate_check_passes_and_names_a_stale_file(tmp_path, monkeypatch):
    assert runner.invoke(app, ["generate", "--check"]).exit_code == 0
    spec = catalog.get("softmax")
    stale = tmp_path / "_interface.py"
    stale.write_text(files.text(spec).replace("def softmax(", "def softmax_changed("))
    real = files.package_file
    monkeypatch.setattr(files, "package_file", lambda sp: stale if sp is spec else real(sp))
    result = runner.invoke(app, ["generate", "--check", "softmax"])
    assert result.exit_code == 1
    assert "softmax: " in result.output and "differs from what its spec generates" in result.output
    assert "run `tileport generate softmax`" in result.output


def test_tracebacks_and_inspect_land_in_the_operators_file():
    with pytest.raises(TypeError) as info:
        tileport.rms_norm("not a tensor")
    frames = traceback.extract_tb(info.value.__traceback__)
    assert any(f.filename.endswith("ops/rms_norm/_interface.py") and "_c.floating_tensor" in f.line for f in frames)
    source_file = inspect.getsourcefile(tileport.rope_fwd)
    assert source_file.endswith("ops/rope/_interface.py")
    assert "def rope_fwd(" in inspect.getsource(tileport.rope_fwd)


def test_a_spec_without_a_current_file_gets_one_under_the_cache_folder(tmp_path, monkeypatch):
    monkeypatch.setenv("TILEPORT_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(interface, "_DERIVED", dict(interface._DERIVED))  # leave no operator behind
    monkeypatch.setattr(REGISTRY, "plugin", dict(REGISTRY.plugin))
    monkeypatch.setattr(REGISTRY, "memo", {})
    base = catalog.get("softmax")
    spec = dataclasses.replace(
        base, name="softmax_elsewhere", aliases=(), kernels={"torch": "tileport.backends.torch.softmax"}
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no file in a package to be stale: nothing to warn about
        api = derive(spec)
    written = list((tmp_path / "interfaces").glob("softmax_elsewhere-*.py"))
    assert len(written) == 1 and written[0].read_text() == api.source
    assert inspect.getsourcefile(api.forward) == str(written[0])
    x = torch.randn(3, 5)
    torch.testing.assert_close(api.forward(x, backend="torch"), torch.softmax(x, -1))


def test_files_are_marked_generated_and_bind_their_spec():
    for op in catalog.kernel_specs():
        text = files.text(catalog.get(op))
        assert text.startswith(f'"""The interface of {op}, generated from its spec by `tileport generate`.')
        assert "from .spec import SPEC\n" in text  # go-to-definition reaches the spec
