from typing import NamedTuple

import pytest
import torch

from tileport.backends import platform


class NpuDevice(NamedTuple):
    """A device description: torch.device("npu") exists only once torch_npu is imported."""

    index: int
    type: str = "npu"


@pytest.mark.parametrize(
    "name,arch35",
    [
        ("Ascend950PR", True),
        ("Ascend950DT", True),
        ("Ascend910_9591", True),
        ("Ascend910B2", False),
        ("Ascend910_9392", False),
        ("Ascend310P3", False),
    ],
)
def test_is_arch35(name, arch35):
    assert platform.is_arch35(name) is arch35


@pytest.mark.parametrize(
    "name,kind",
    [
        ("Ascend950PR", platform.NPU_ARCH35),
        ("Ascend910_9591", platform.NPU_ARCH35),
        ("Ascend910B4", platform.NPU_ARCH32),
        ("Ascend910_9382", platform.NPU_ARCH32),
        ("Ascend910C", platform.NPU_ARCH32),
    ],
)
def test_npu_kind(name, kind):
    assert platform.npu_kind(name) == kind


def test_unknown_npu_is_rejected_by_name():
    with pytest.raises(ValueError, match="unsupported Ascend device 'Ascend310P3'"):
        platform.npu_kind("Ascend310P3")


def test_device_kind_uses_npu_name_only_for_npus():
    def name(index):
        assert index == 1
        return "Ascend950PR"

    assert platform.device_kind(NpuDevice(1), name) == platform.NPU_ARCH35
    assert platform.device_kind(torch.device("cpu"), name) == platform.CPU
    assert platform.device_kind(torch.device("cuda", 0), name) == platform.CUDA


def test_cpu_tag_is_file_name_safe():
    tag = platform.cpu_tag()
    assert tag and all(c.isalnum() or c in "-_" for c in tag)


def test_cpu_isa_names_the_widest_vector_extension():
    assert platform.cpu_isa(frozenset({"sse2", "avx", "avx2", "fma", "f16c"})) == "AVX2, FMA, F16C"
    assert platform.cpu_isa(frozenset({"avx2", "avx512f", "avx512_bf16", "fma"})) == "AVX-512, FMA, AVX512-BF16"
    assert platform.cpu_isa(frozenset()) == "no SIMD flags"
