"""Kernel outputs: large CPU outputs on transparent huge pages (where the kernel offers them), a switch to turn
that off, and the NaN poison either way."""

import math
import re

import pytest
import torch

import tileport
from tileport.backends import outputs

BIG = (4096, 2048)  # 32 MiB of fp32: the threshold


def _vm_flags(t: torch.Tensor) -> set[str]:
    """The VmFlags of the mapping holding t's first byte (/proc/self/smaps)."""
    addr, flags, inside = t.data_ptr(), set(), False
    for line in open("/proc/self/smaps"):
        m = re.match(r"^([0-9a-f]+)-([0-9a-f]+) ", line)
        if m:
            inside = int(m.group(1), 16) <= addr < int(m.group(2), 16)
        elif inside and line.startswith("VmFlags:"):
            flags = set(line.split()[1:])
    return flags


@pytest.fixture
def huge_on():
    previous = outputs.set_huge_page_outputs(True)
    yield
    outputs.set_huge_page_outputs(previous)


@pytest.mark.skipif(not outputs.huge_pages_offered(), reason="this kernel offers no transparent huge pages")
def test_a_large_cpu_output_is_advised_huge_pages_and_2mib_aligned(huge_on):
    t = outputs.empty(BIG, torch.float32)
    assert "hg" in _vm_flags(t)  # MADV_HUGEPAGE
    assert t.data_ptr() % (2 << 20) == 0 and t.is_contiguous() and t.shape == BIG


def test_small_outputs_and_the_switch_use_torch_empty(huge_on):
    small = outputs.empty((BIG[0], BIG[1] // 2 - 1), torch.float32)
    assert small.untyped_storage().resizable()  # torch's allocator, not a mapping
    outputs.set_huge_page_outputs(False)
    assert not outputs.huge_page_outputs()
    assert outputs.empty(BIG, torch.float32).untyped_storage().resizable()


@pytest.mark.skipif(not outputs.huge_pages_offered(), reason="this kernel offers no transparent huge pages")
def test_poisoned_huge_outputs_are_nan(huge_on):
    with outputs.poisoned():
        t = outputs.empty(BIG, torch.float32)
    assert not t.untyped_storage().resizable() and bool(torch.isnan(t).all())


def test_an_operator_gives_the_same_bits_on_huge_pages_and_off(huge_on):
    x = torch.randn(BIG, generator=torch.Generator().manual_seed(0))
    y_huge, r_huge = tileport.rms_norm_fwd(x, None, 1e-6, backend="tilelang")
    outputs.set_huge_page_outputs(False)
    y, r = tileport.rms_norm_fwd(x, None, 1e-6, backend="tilelang")
    assert torch.equal(y_huge, y) and torch.equal(r_huge, r)
    assert math.prod(y_huge.shape) * 4 >= outputs.HUGE_MIN_BYTES
