"""Shared fixtures: ``golden`` and ``randn`` are tileport's own test helpers (``tileport.testing``, which plugin
packages' tests use too); its session hooks set the Triton interpreter where no GPU is present, and restore it."""

import os

import pytest

from tileport.testing import golden, pytest_configure, pytest_unconfigure, randn  # noqa: F401

# pytest's own variable, and what libraries set for their process once they start: tilelang's paths on its
# first import, torch inductor's cache and state on its first compile, Ray's on ray.init
_NOT_THE_TESTS = ("PYTEST_CURRENT_TEST", "PYTHONPATH", "TL_", "TVM_", "TORCHINDUCTOR_CACHE_DIR", "_TORCHINDUCTOR_",
                  "RAY_", "PYTHONBREAKPOINT")  # fmt: skip


@pytest.fixture(autouse=True)
def _environment_left_as_found():
    """A test may change environment variables only through monkeypatch (restored before this check runs)."""
    before = dict(os.environ)
    yield
    after = dict(os.environ)
    changed = sorted(
        k for k in before.keys() | after.keys() if before.get(k) != after.get(k) and not k.startswith(_NOT_THE_TESTS)
    )
    assert not changed, f"the test left environment variables changed: {', '.join(changed)}"
