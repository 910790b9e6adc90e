"""Operators that live outside tileport: a package declares them through the ``tileport.ops`` entry point group,
each entry naming its OpSpec (``mypkg.spec:SPEC``, or a module holding ``SPEC``). ``tileport ops``, ``verify``,
``bench``, ``cases``, ``lower`` and the docs tools find them as they find tileport's own, and say which package
each came from. A plugin that does not load, declares an invalid spec or reuses a name is reported by name and
never stops tileport's own operators (``broken()``).

The spec's ``kernels`` names its backend modules (``{"torch": "mypkg.kernels.torch_ref", "tilelang":
"mypkg.kernels.cpu", "tilelang:cuda": ...}``), registered with the dispatch when its interface is derived;
``suite`` names its case suite (a YAML path relative to the spec's module, or absolute).
"""

from __future__ import annotations

import dataclasses
import importlib.metadata
import sys
from dataclasses import dataclass
from pathlib import Path

from ..backends.registry import REGISTRY
from .interface.layout import DeclarationError, layout
from .spec import OpSpec

GROUP = "tileport.ops"


@dataclass(frozen=True)
class Found:
    """What the entry points gave: loaded specs by operator name with their package, and the broken entries."""

    specs: dict  # operator -> (OpSpec, package)
    broken: dict  # "package: entry" -> why


def _package(ep) -> str:
    dist = getattr(ep, "dist", None)
    return f"{dist.name} {dist.version}" if dist is not None else ep.value.split(".")[0]


def discover(taken: set[str]) -> Found:
    """Load every ``tileport.ops`` entry point; ``taken``: tileport's own operator names (a plugin may not reuse
    one)."""

    specs, broken = {}, {}
    for ep in importlib.metadata.entry_points(group=GROUP):
        where = f"{_package(ep)}: {ep.name} = {ep.value}"
        try:
            obj = ep.load()
            spec = getattr(obj, "SPEC", obj)
            if not isinstance(spec, OpSpec):
                raise TypeError(f"it gives a {type(spec).__name__}, not an OpSpec (nor a module holding SPEC)")
            layout(spec)  # the declaration the interface is derived from must hold
            if spec.name in taken or spec.name in specs:
                raise ValueError(
                    f"operator {spec.name!r} exists already "
                    f"({'tileport' if spec.name in taken else specs[spec.name][1]})"
                )
        except DeclarationError as exc:
            broken[where] = f"invalid spec: {exc}"
            continue
        except Exception as exc:  # noqa: BLE001 - whatever a plugin raises is its report, never tileport's failure
            broken[where] = f"{type(exc).__name__}: {exc}"
            continue
        if spec.suite and not Path(spec.suite).is_absolute():  # relative to the module declaring the spec
            module = sys.modules.get(ep.value.split(":")[0])
            if module is not None and getattr(module, "__file__", None):
                spec = dataclasses.replace(spec, suite=str(Path(module.__file__).resolve().parent / spec.suite))
        specs[spec.name] = (spec, _package(ep))
        if spec.kernels:  # dispatch serves it from here on (its interface registers them too, when imported alone)
            REGISTRY.register_kernels(spec.name, spec.kernels, spec.dtypes)
    return Found(specs, broken)
