"""pytest fixtures for an operator's tests, tileport's own and a plugin package's (import them into a
conftest.py: ``from tileport.testing import golden, randn``):

- ``golden(op, **inputs)``: {output name: tensor} of the operator's float64 golden on the inputs upcast to
  float64 (its forward, and its backward when ``dy`` is given): the spec's own golden, else the torch
  reference, as ``tileport verify``'s;
- ``randn(*shape, dtype=, seed=, scale=)``: seeded normal samples drawn in fp32, then cast (the same values for
  every dtype of a test).

Its session hooks (``pytest_configure``, ``pytest_unconfigure``, imported into the conftest.py) set
``TRITON_INTERPRET=1`` for the test session where no GPU is present (Triton runs on a CPU only under its
interpreter, chosen before a kernel is defined), unless the installed Triton is triton-ascend (it lowers for
Ascend here; its tests compile, they do not interpret), and restores the variable when the session ends.
Importing the module changes nothing.
"""

import importlib.util
import os

import pytest
import torch

from tileport.backends.triton.ascend import triton_ascend_version
from tileport.ops.catalog import get

_INTERPRET = "TRITON_INTERPRET"
_before: list[str | None] = []


def wants_interpreter() -> bool:
    """Whether Triton's kernels run under its interpreter here (no GPU, upstream Triton)."""
    if torch.cuda.is_available() or importlib.util.find_spec("triton") is None:
        return False

    return triton_ascend_version() is None


def pytest_configure(config):
    _before.append(os.environ.get(_INTERPRET))
    if wants_interpreter():
        os.environ.setdefault(_INTERPRET, "1")


def pytest_unconfigure(config):
    before = _before.pop() if _before else None
    if before is None:
        os.environ.pop(_INTERPRET, None)
    else:
        os.environ[_INTERPRET] = before


@pytest.fixture
def golden():

    def run(op: str, **inputs):
        up = {k: v.double() if isinstance(v, torch.Tensor) else v for k, v in inputs.items()}
        return get(op).run_golden(up, "dy" in inputs)

    return run


@pytest.fixture
def randn():
    def make(*shape, dtype=torch.float32, seed=0, scale=1.0):
        g = torch.Generator().manual_seed(seed)
        return (torch.randn(*shape, generator=g, dtype=torch.float32) * scale).to(dtype)

    return make
