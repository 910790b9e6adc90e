"""Shared fixtures: ``golden`` and ``randn`` are tileport's own test helpers (``tileport.testing``, which plugin
packages' tests import too); importing it sets the Triton interpreter where no GPU is present."""

from tileport.testing import golden, randn  # noqa: F401
