"""Every operator's spec, found once: tileport's own by convention (a package under ``tileport/ops`` with a
``spec`` module; ``interface`` is the derivation, not an operator), then the plugins' (``plugins.py``). The
generic layers ask here by name; an operator is never imported by them."""

from __future__ import annotations

import importlib
import pkgutil
from pathlib import Path

from . import plugins
from .spec import OpSpec

HERE = Path(__file__).parent


_SPECS: dict[str, OpSpec] = {}
_ORIGIN: dict[str, str] = {}  # operator -> the package it came from
_BROKEN: dict[str, str] = {}  # a plugin entry that did not load -> why


def specs() -> dict[str, OpSpec]:
    """Every operator's spec, found by convention: a package under ``tileport.ops`` with a ``spec`` module
    (``interface`` is the derivation, not an operator), then the plugins' (``ops/plugins.py``)."""
    if not _SPECS:
        own: dict[str, OpSpec] = {}
        for m in sorted(pkgutil.iter_modules([str(HERE)]), key=lambda m: m.name):
            if m.ispkg and not m.name.startswith("_") and (HERE / m.name / "spec.py").exists():
                spec = importlib.import_module(f"{__package__}.{m.name}.spec").SPEC
                own[spec.name] = spec
        found = plugins.discover(set(own))
        _ORIGIN.update({n: "tileport" for n in own} | {n: pkg for n, (_, pkg) in found.specs.items()})
        _BROKEN.update(found.broken)
        own.update({n: spec for n, (spec, _) in found.specs.items()})
        _SPECS.update(own)
    return _SPECS


def kernel_specs() -> dict[str, OpSpec]:
    """The operators with kernel modules of their own: every one but those composed over another's kernels."""
    return {n: spec for n, spec in specs().items() if not spec.composes}


def origin(name: str) -> str:
    """The package operator ``name`` came from (``tileport`` for its own)."""
    specs()
    return _ORIGIN.get(name, "tileport")


def broken_plugins() -> dict[str, str]:
    """Plugin entries that did not load, with why (``tileport ops`` and ``tileport doctor`` report them)."""
    specs()
    return dict(_BROKEN)


def get(name: str) -> OpSpec:
    """The spec of operator ``name``; ValueError listing the operators when there is none."""
    found = specs().get(name)
    if found is None:
        raise ValueError(f"unknown operator {name!r}; available: {', '.join(specs())}")
    return found
