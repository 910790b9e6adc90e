"""The chip stood in for while a user's package is imported and called without an NPU. triton-ascend's own
driver finds no device (``triton.runtime.driver.active`` raises "0 active drivers"), torch has no ``npu`` and
torch_npu is absent, so fla's and Liger-Kernel's imports stop, or take their CPU/GPU path. Inside ``standing_in``
Triton's active driver, ``torch.npu`` and a ``torch_npu`` module answer with the chip's properties (vector
cores, arch, name), and every question the package asks is noted (``Path``): it takes the path it takes on
that chip, and the report says which. Nothing runs here: launches are recorded (``capture``)."""

from __future__ import annotations

import contextlib
import importlib.machinery
import sys
import types
from dataclasses import dataclass, field

import torch

from ..backends.triton.ascend import Chip


@dataclass
class Path:
    """What the package asked about the device while it was imported and called (each question once)."""

    asked: list[str] = field(default_factory=list)

    def note(self, question: str) -> None:
        if question not in self.asked:
            self.asked.append(question)

    def npu(self) -> bool:
        """Whether the package looked for an NPU (and so found the stand-in)."""
        return bool(self.asked)


def _properties(chip: Chip) -> types.SimpleNamespace:
    return types.SimpleNamespace(
        name=chip.name,
        total_memory=64 << 30,
        vector_core_num=chip.vector_cores,
        cube_core_num=chip.vector_cores // 2,
        L2_cache_size=192 << 20,
    )


def _npu_module(chip: Chip, path: Path) -> types.ModuleType:
    """``torch.npu`` as torch_npu gives it, for one device of ``chip``."""
    npu = types.ModuleType("torch.npu")

    def asked(name, value):
        def answer(*args, **kwargs):
            path.note(f"torch.npu.{name}")
            return value(*args, **kwargs) if callable(value) else value

        return answer

    class Stub:
        """What torch_npu's classes (Event, Stream, ...) stand for here: made, called and asked anything."""

        def __init__(self, *args, **kwargs):
            pass

        def __call__(self, *args, **kwargs):
            return Stub()

        def __getattr__(self, name):
            return Stub()

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

    def anything(
        name,
    ):  # an attribute the table below lacks: a stub, and the question noted
        if name.startswith("__"):
            raise AttributeError(name)
        path.note(f"torch.npu.{name}")
        return Stub

    npu.__getattr__ = anything  # type: ignore[attr-defined]
    for name, value in {
        "is_available": True,
        "device_count": 1,
        "current_device": 0,
        "set_device": None,
        "synchronize": None,
        "get_device_name": chip.name,
        "get_device_properties": _properties(chip),
        "is_bf16_supported": True,
        "empty_cache": None,
        "manual_seed": None,
        "manual_seed_all": None,
        "current_stream": types.SimpleNamespace(npu_stream=0),
        "device": lambda *a, **k: contextlib.nullcontext(),
        "stream": lambda *a, **k: contextlib.nullcontext(),
    }.items():
        setattr(npu, name, asked(name, value))
    return npu


def _driver(chip: Chip, path: Path, npu: types.ModuleType):
    """A Triton driver for ``chip``: its target, properties and a benchmarker that launches once (so an
    autotuner launches, and so records, every configuration)."""
    # triton: optional (tileport[triton]), kept out of start-up
    from triton.backends.compiler import GPUTarget
    from triton.backends.driver import DriverBase

    class Utils:
        def get_device_properties(self, device=0):
            path.note("triton driver: device properties")
            return {
                "max_shared_mem": 1,
                "num_aicore": chip.vector_cores // 2,
                "num_vectorcore": chip.vector_cores,
            }

        def get_arch(self):
            return chip.arch

        def get_aicore_num(self):
            return chip.vector_cores // 2

        def get_aivector_core_num(self):
            return chip.vector_cores

    class StandIn(DriverBase):
        @classmethod
        def is_active(cls):
            return True

        def __init__(self):
            super().__init__()
            self.utils = Utils()

        def get_current_target(self):
            path.note("triton driver: target")
            return GPUTarget("npu", chip.arch, 0)

        def get_benchmarker(self):
            def bench(kernel_call, quantiles=None, **kwargs):
                kernel_call()
                return [1.0] * len(quantiles) if quantiles else 1.0

            return bench

        def get_current_device(self):
            return 0

        def set_current_device(self, device):
            return None

        def get_current_stream(self, device=None):
            return 0

        def get_device_interface(self):
            return npu

        def get_active_torch_device(self):
            return torch.device("cpu")

        def get_empty_cache_for_benchmark(self):
            return torch.empty(1)

        def clear_cache(self, cache):
            return None

    return StandIn()


def _clear_npu_caches() -> None:
    """Forget what transformers cached about the NPU (Liger-Kernel asks it whether torch_npu is there)."""
    utils = sys.modules.get("transformers.utils.import_utils")
    for name in ("is_torch_npu_available",):
        fn = getattr(utils, name, None)
        if hasattr(fn, "cache_clear"):
            fn.cache_clear()


@contextlib.contextmanager
def standing_in(chip: Chip):
    """Inside the block the chip is stood in for (module docstring); yields the ``Path`` the package took.
    Everything replaced is restored on the way out."""
    # triton: optional (tileport[triton]), kept out of start-up
    import triton

    path = Path()
    npu = _npu_module(chip, path)
    torch_npu = types.ModuleType("torch_npu")
    torch_npu.__spec__ = importlib.machinery.ModuleSpec("torch_npu", None)
    torch_npu.npu = npu  # type: ignore[attr-defined]
    had_npu, old_npu = hasattr(torch, "npu"), getattr(torch, "npu", None)
    old_module = sys.modules.get("torch_npu")
    torch.npu = npu  # type: ignore[attr-defined]
    sys.modules["torch_npu"] = torch_npu
    triton.runtime.driver.set_active(_driver(chip, path, npu))
    _clear_npu_caches()
    try:
        yield path
    finally:
        triton.runtime.driver.reset_active()
        if old_module is None:
            sys.modules.pop("torch_npu", None)
        else:
            sys.modules["torch_npu"] = old_module
        if had_npu:
            torch.npu = old_npu  # type: ignore[attr-defined]
        else:
            del torch.npu
        _clear_npu_caches()
