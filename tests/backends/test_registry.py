"""Dispatch decisions, on a registry of fake backends (no global state touched) and on the real one."""

from typing import NamedTuple

import pytest
import torch

from tileport.backends import platform
from tileport.backends.registry import REGISTRY, Availability, BackendUnavailableError, Registry, declared_support
from tileport.ops.catalog import kernel_specs


class NpuDevice(NamedTuple):
    """A device description: torch.device("npu") exists only once torch_npu is imported."""

    index: int
    type: str = "npu"


F32, F64 = torch.float32, torch.float64


class Fake:
    def __init__(self, name, kinds, dtypes=(F32,), ok=True, reason=""):
        self.name = name
        self.device_kinds = frozenset(kinds)
        self.dtypes = {"l2norm": frozenset(dtypes)}
        self._avail = Availability(ok, reason)

    def available(self):
        return self._avail

    def supports(self, op, device_kind, dtypes):
        return declared_support(self, op, device_kind, dtypes)

    def kernels(self, op, device_kind="cpu"):
        return self.name

    def cache_info(self):
        return []


def make_registry(*backends):
    reg = Registry()
    for b in backends:
        reg.register(b.name, b)
    return reg


ALL = [platform.CPU, platform.CUDA, platform.NPU_ARCH35, platform.NPU_ARCH32]


def full_registry(**unavailable):
    return make_registry(
        Fake(
            "tilelang",
            [platform.CPU, platform.CUDA, platform.NPU_ARCH35],
            ok="tilelang" not in unavailable,
            reason="no g++",
        ),
        Fake(
            "triton",
            [platform.CUDA, platform.NPU_ARCH32],
            ok="triton" not in unavailable,
            reason="triton not installed",
        ),
        Fake("torch", ALL, dtypes=(F32, F64)),
    )


def npu(name):
    return lambda index: name


@pytest.mark.parametrize(
    "device,npu_name,expected",
    [
        (torch.device("cpu"), None, "tilelang"),
        (torch.device("cuda", 0), None, "tilelang"),
        (NpuDevice(0), npu("Ascend950PR"), "tilelang"),
        (NpuDevice(0), npu("Ascend910B3"), "triton"),  # triton-ascend on A2/A3
    ],
)
def test_first_choice_per_device(device, npu_name, expected, monkeypatch):
    monkeypatch.delenv("TILEPORT_BACKEND", raising=False)
    assert full_registry().resolve("l2norm", device, (F32,), npu_name=npu_name).name == expected


def test_fallbacks_in_priority_order(monkeypatch):
    monkeypatch.delenv("TILEPORT_BACKEND", raising=False)
    reg = full_registry(tilelang=True)
    assert reg.resolve("l2norm", torch.device("cuda"), (F32,)).name == "triton"
    assert reg.resolve("l2norm", torch.device("cpu"), (F32,)).name == "torch"
    reg = full_registry(tilelang=True, triton=True)
    assert reg.resolve("l2norm", torch.device("cuda"), (F32,)).name == "torch"
    reg = full_registry(triton=True)
    assert reg.resolve("l2norm", NpuDevice(0), (F32,), npu_name=npu("Ascend910_9382")).name == "torch"


def test_dtype_decides_too(monkeypatch):
    monkeypatch.delenv("TILEPORT_BACKEND", raising=False)
    assert full_registry().resolve("l2norm", torch.device("cpu"), (F64,)).name == "torch"
    assert full_registry().resolve("l2norm", torch.device("cpu"), (F32, F64)).name == "torch"


def test_no_candidate_lists_every_reason(monkeypatch):
    monkeypatch.delenv("TILEPORT_BACKEND", raising=False)
    reg = make_registry(Fake("tilelang", [platform.CPU], ok=False, reason="no g++"))
    with pytest.raises(BackendUnavailableError) as info:
        reg.resolve("l2norm", torch.device("cpu"), (F32,))
    msg = str(info.value)
    assert "'tilelang' is unavailable: no g++" in msg and "'torch' is not registered" in msg


def test_forced_backend(monkeypatch):
    monkeypatch.delenv("TILEPORT_BACKEND", raising=False)
    reg = full_registry(triton=True)
    assert reg.resolve("l2norm", torch.device("cpu"), (F32,), backend="torch").name == "torch"
    with pytest.raises(BackendUnavailableError, match="forced backend='triton' cannot run: .*triton not installed"):
        reg.resolve("l2norm", torch.device("cuda"), (F32,), backend="triton")
    with pytest.raises(BackendUnavailableError, match="does not run on 'cpu' devices"):
        full_registry().resolve("l2norm", torch.device("cpu"), (F32,), backend="triton")
    with pytest.raises(TypeError, match="backend must be a string"):
        reg.resolve("l2norm", torch.device("cpu"), (F32,), backend=3)


def test_environment_variable_forces(monkeypatch):
    monkeypatch.setenv("TILEPORT_BACKEND", "torch")
    assert full_registry().resolve("l2norm", torch.device("cpu"), (F32,)).name == "torch"


def test_broken_backend_import_is_a_reason_not_a_crash():
    reg = Registry()
    reg.register("broken", "tileport.no_such_module")
    avail = reg.availability("broken")
    assert not avail.ok and "import of tileport.no_such_module failed" in avail.reason


def test_real_registry_sends_device_tensors_to_the_device_kernels(monkeypatch):
    """CUDA and Ascend 950 tensors go to the TileLang kernels of their target; A2/A3 to Triton where triton-ascend
    is the installed Triton, else to torch (here: upstream Triton). Decided from device descriptions: no device
    is here."""
    monkeypatch.delenv("TILEPORT_BACKEND", raising=False)
    monkeypatch.setattr(REGISTRY, "memo", {})  # the fake devices' decisions stay out of the real registry's memo
    cuda = REGISTRY.resolve("l2norm", torch.device("cuda"), (F32,))
    assert cuda.name == "tilelang"
    assert cuda.kernels("l2norm", "cuda").__name__ == "tileport.backends.tilelang.cuda.l2norm"
    a35 = REGISTRY.resolve("l2norm", NpuDevice(0), (F32,), npu_name=npu("Ascend950PR"))
    assert a35.kernels("l2norm", "npu-arch35").__name__ == "tileport.backends.tilelang.ascend.l2norm"
    assert REGISTRY.resolve("l2norm", NpuDevice(0), (F32,), npu_name=npu("Ascend910B2")).name == "torch"
    assert REGISTRY.kernels("l2norm", torch.device("cpu"), (F32,)).__name__ == "tileport.backends.tilelang.cpu.l2norm"
    with pytest.raises(BackendUnavailableError, match="does not support float64"):
        REGISTRY.resolve("l2norm", torch.device("cuda"), (torch.float64,), backend="tilelang")


def test_available_backends_report():
    import tileport

    infos = {b.name: b for b in tileport.available_backends()}
    assert infos["torch"].available and "torch" in infos["torch"].reason
    assert infos["tilelang"].available, infos["tilelang"].reason
    # every operator has a TileLang kernel module (the list is the specs', so a new operator keeps this true), but
    # one composed over another's kernels (it runs on those)
    kernel_ops = tuple(sorted(kernel_specs()))
    assert infos["tilelang"].device_kinds == ("cpu", "cuda", "npu-arch35") and infos["tilelang"].ops == kernel_ops
