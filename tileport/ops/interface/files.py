"""The generated interface as a file: its text (a header binding the spec and its defaults, then the generator's
sections), where it lives (``<operator package>/_interface.py``), and writing or checking it
(``tileport generate``). An operator whose package holds no current file (a plugin, a spec being edited) gets its
text written under the cache folder and imported from there: tracebacks land in a real file either way."""

from __future__ import annotations

import ast
import hashlib
import importlib.util
import os
import re
import sys
from pathlib import Path

from .. import spec as s
from . import codegen, general
from .shapecode import class_constants

MARK = "generated from its spec by `tileport generate`.\nDo not edit: change the spec and regenerate"
_NAMES = re.compile(r"\b(_BWD_DEFAULT_|_DEFAULT_|_CHOICES_|_ALIASES_)(\w+)")


def public_names(op: str) -> dict[str, str]:
    return {"function": op, "forward": f"{op}_fwd", "backward": f"{op}_bwd"}


def home(spec: s.OpSpec) -> str:
    """The package the operator's public names live in: ``tileport.ops.<name>``, or a plugin's package (the
    one holding the module that declares its spec)."""
    declared = getattr(spec.composite, "__module__", "") or ""
    if declared.startswith("tileport.ops.") or not declared:
        return f"tileport.ops.{spec.name}"
    return declared.rsplit(".", 1)[0] if "." in declared else declared


def _spec_module(spec: s.OpSpec) -> str | None:
    """``<home>.spec`` where that module's ``SPEC`` is this spec (the file imports it from there)."""
    name = f"{home(spec)}.spec"
    module = sys.modules.get(name)
    return name if module is not None and getattr(module, "SPEC", None) is spec else None


def _literal(value) -> str | None:
    """``repr(value)`` where it reads back as the same plain value, else None."""
    text = repr(value)
    try:
        back = ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return None
    return text if type(back) is type(value) and back == value else None


def _defaults(spec: s.OpSpec, body: str) -> str:
    """The module-level names the body reads: attribute defaults, choices and aliases (``None`` for the
    tensors' and the backward's given attributes' defaults)."""
    attrs = {a.name: a for a in spec.attrs + spec.options}
    given = set(spec.backward.given) if spec.backward else set()
    lines = []
    for prefix, name in dict.fromkeys(_NAMES.findall(body)):
        a = attrs.get(name)
        if prefix == "_CHOICES_":
            value = _literal(tuple(a.choices))
        elif prefix == "_ALIASES_":
            value = _literal(tuple(a.aliases))
        elif a is None or (prefix == "_BWD_DEFAULT_" and name in given):
            value = "None"
        else:
            value = _literal(a.default)
        lines.append(f"{prefix}{name} = {value if value is not None else f'_rt.default(SPEC, {name!r})'}\n")
    return "".join(lines)


def text(spec: s.OpSpec) -> str:
    """The whole interface module of ``spec``'s operator."""
    names = public_names(spec.name)
    if spec.general:
        parts = general.source_parts(spec, names)
    else:
        parts = codegen.parts(spec, names)
    body = "\n\n".join(p.rstrip("\n") + "\n" for p in parts if p)
    module = _spec_module(spec)
    bind = "from .spec import SPEC\n" if module else ""
    late = "" if module else f"SPEC = _rt.deriving({spec.name!r})\n"
    head = f'"""The interface of {spec.name}, {MARK}."""\n\n'
    head += "# ruff: noqa\n# fmt: off\nimport torch\n\n"
    head += "from tileport.backends.registry import REGISTRY\nfrom tileport.ops import _checks as _c\n"
    head += "from tileport.ops.interface import runtime as _rt\n" + bind + "\n" + late
    head += f"OP = {spec.name!r}\n"
    if not spec.general and spec.backward and spec.backward.to_grads:
        head += "_TO_GRADS = SPEC.backward.to_grads\n"
    if spec.general:
        head += class_constants()
    head += _defaults(spec, body)
    return head + "\n\n" + body


def package_file(spec: s.OpSpec) -> Path | None:
    """``<operator package>/_interface.py`` where the package is importable here, else None."""
    found = importlib.util.find_spec(home(spec))
    if found is None or not found.submodule_search_locations:
        return None
    return Path(list(found.submodule_search_locations)[0]) / "_interface.py"


def cache_file(spec: s.OpSpec, source: str) -> Path:
    """Where an operator without a current file in its package gets its interface written (by content)."""
    root = os.environ.get("TILEPORT_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "tileport")
    digest = hashlib.sha256(source.encode()).hexdigest()[:16]
    return Path(root) / "interfaces" / f"{spec.name}-{digest}.py"


def write(spec: s.OpSpec) -> tuple[Path, bool]:
    """Write the operator's interface into its package; (the path, whether it changed)."""
    path = package_file(spec)
    if path is None:
        raise ValueError(f"{spec.name}: its package {home(spec)} is not importable here: nothing to write into")
    source = text(spec)
    old = path.read_text() if path.exists() else None
    if old != source:
        path.write_text(source)
    return path, old != source
