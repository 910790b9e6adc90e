"""A kernel module that is a scaffold stub (``STUB = "TODO(...)"``) is still dispatched to, so that it raises its
TODO, but is not support: ``available_backends`` lists it under ``stubs``, apart from what a backend serves."""

import sys

import torch

from tileport.backends.registry import Registry, available_backends

STUB_MODULE = """STUB = "TODO(fake_op): the torch kernels, in stub_kernels.py"


def forward(x, out=None):
    raise NotImplementedError("TODO(fake_op): the torch forward")
"""


def _registry(tmp_path, monkeypatch, name: str, source: str) -> Registry:
    """A registry of the torch backend alone, with plugin operator fake_op served by module ``name``."""
    (tmp_path / f"{name}.py").write_text(source)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, name, raising=False)
    reg = Registry()
    reg.register("torch", "tileport.backends.torch")
    reg.register_kernels("fake_op", {"torch": name}, (torch.float32,))
    return reg


def test_a_stub_is_listed_apart_and_not_served(tmp_path, monkeypatch):
    reg = _registry(tmp_path, monkeypatch, "stub_kernels", STUB_MODULE)
    (torch_info,) = available_backends(reg)
    assert "fake_op" in torch_info.ops and torch_info.stubs == ("fake_op",)
    assert "fake_op" not in torch_info.serves and "rms_norm" in torch_info.serves
    assert reg.stub("torch", "fake_op") == "TODO(fake_op): the torch kernels, in stub_kernels.py"
    assert reg.rejection("torch", "fake_op", "cpu", [torch.float32]) is None  # dispatched to: it raises its TODO


def test_a_module_without_stub_serves(tmp_path, monkeypatch):
    reg = _registry(
        tmp_path,
        monkeypatch,
        "written_kernels",
        STUB_MODULE.replace('STUB = "TODO(fake_op): the torch kernels, in stub_kernels.py"\n', ""),
    )
    (torch_info,) = available_backends(reg)
    assert torch_info.stubs == () and "fake_op" in torch_info.serves
    assert reg.stub("torch", "rms_norm") is None  # tileport's own kernels are written
