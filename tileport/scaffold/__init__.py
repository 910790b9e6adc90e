"""``tileport scaffold NAME``: the file set of a new operator, wired through the seam, with TODOs for the math.

It writes the interface module and its spec, the torch reference, the TileLang CPU, CUDA and Ascend kernel
modules, the Triton module, the suite YAML, tests and a docs page, from the templates beside this file, and
adds the one export line to ``tileport/ops/__init__.py``. Every function that needs the math raises
NotImplementedError naming its file, so the new tests run at once and fail for that reason; the input checks
are the interface's own and pass from the start. The written operator has the signature of the operator it
is made like, one of the templates' two: ``x -> (y, rstd)``, ``dx`` or ``(x, weight) -> (y, rstd)``,
``(dx, dweight)``; and that operator's case suite. One template serves both: a line
ending in ``#[w]`` is written only for the weighted signature, one ending in ``#[-w]`` only for the other.
"""

from __future__ import annotations

import keyword
import re
from dataclasses import dataclass
from pathlib import Path
from string import Template

import tileport

from ..ops.spec import PER_ROW, REDUCED, ROWS, VECTOR, specs

TEMPLATES = Path(__file__).resolve().parent / "templates"
NAME = re.compile(r"[a-z][a-z0-9_]*")

# template -> path in the checkout, for operator ``name``
FILES = {
    "ops_init.py": "tileport/ops/{name}/__init__.py",
    "ops_spec.py": "tileport/ops/{name}/spec.py",
    "backend_torch.py": "tileport/backends/torch/{name}.py",
    "backend_tilelang_cpu.py": "tileport/backends/tilelang/cpu/{name}.py",
    "backend_tilelang_cuda.py": "tileport/backends/tilelang/cuda/{name}.py",
    "backend_tilelang_ascend.py": "tileport/backends/tilelang/ascend/{name}.py",
    "backend_triton.py": "tileport/backends/triton/{name}.py",
    "suite.yaml": "tileport/cases/suites/{name}.yaml",
    "test_numerics.py": "tests/ops/test_{name}_numerics.py",
    "test_errors.py": "tests/ops/test_{name}_errors.py",
    "docs.md": "docs/ops/{name}.md",
}
EXPORTS = "tileport/ops/__init__.py"
# the templates' signatures, (name, role) of the inputs, outputs and gradients -> written with a weight
SIGNATURES = {
    ((("x", ROWS),), (("y", ROWS), ("rstd", PER_ROW)), (("dx", ROWS),)): False,
    ((("x", ROWS), ("weight", VECTOR)), (("y", ROWS), ("rstd", PER_ROW)), (("dx", ROWS), ("dweight", REDUCED))): True,
}
MARKER = re.compile(r"\s*#\[(-?)w\]$")


class ScaffoldError(ValueError):
    """The request cannot be written: a bad name, an operator that exists, or no checkout to write into."""


@dataclass(frozen=True)
class Plan:
    name: str
    like: str
    root: Path
    files: dict[Path, str]  # path -> content
    export: str  # the line added to tileport/ops/__init__.py


def class_name(name: str) -> str:
    """``group_norm`` -> ``GroupNorm``: the module form's name."""
    return "".join(part.capitalize() for part in name.split("_"))


def default_root() -> Path:
    """The source checkout tileport is imported from (the folder holding ``pyproject.toml``)."""
    return Path(tileport.__file__).resolve().parent.parent


def signature(op: str) -> tuple:
    """Operator ``op``'s inputs, outputs and gradients as (name, role) pairs."""
    spec = specs()[op]
    return tuple(tuple((t.name, t.role) for t in group) for group in (spec.inputs, spec.outputs, spec.grads))


def fits(op: str) -> bool:
    """Whether operator ``op`` has one of the templates' signatures (its suite can serve the new operator)."""
    return signature(op) in SIGNATURES


def select(text: str, weighted: bool) -> str:
    """The template's lines for one signature: ``#[w]`` lines only with a weight, ``#[-w]`` only without,
    the marker dropped."""
    kept = []
    for line in text.splitlines(keepends=True):
        m = MARKER.search(line.rstrip("\n"))
        if m is None:
            kept.append(line)
        elif (m.group(1) == "") == weighted:
            kept.append(line[: m.start()] + "\n")
    return "".join(kept)


def default_like() -> str:
    """The first operator with the templates' signature."""
    return next(n for n in sorted(specs()) if fits(n))


def _check(name: str, like: str, root: Path) -> None:
    if not (NAME.fullmatch(name) and name.isidentifier() and not keyword.iskeyword(name)):
        raise ScaffoldError(f"operator name {name!r} is not a valid lower-case Python identifier (like group_norm)")
    taken = set(specs()) | {n for n in dir(tileport) if not n.startswith("_")}
    if name in taken or any(f"{name}{s}" in taken for s in ("_fwd", "_bwd")) or class_name(name) in taken:
        raise ScaffoldError(f"operator {name!r} exists already (or its names clash with tileport's API); scaffold never overwrites")
    if like not in specs():
        raise ScaffoldError(f"--like {like!r} is not an operator; operators: {', '.join(specs())}")
    if not fits(like):
        spec = specs()[like]
        raise ScaffoldError(
            f"--like {like}: the templates write x -> (y, rstd), dx or (x, weight) -> (y, rstd), (dx, dweight); "
            f"{like}'s inputs and outputs ({', '.join(t.name for t in spec.inputs + spec.outputs + spec.grads)}) "
            f"have no template yet. Operators to start from: {', '.join(n for n in specs() if fits(n))}"
        )
    if not (root / "pyproject.toml").exists() or not (root / "tileport" / "ops").is_dir():
        raise ScaffoldError(f"{root} is not a tileport source checkout (no pyproject.toml and tileport/ops): pass --root")


def _suite(like: str, name: str, root: Path) -> str:
    """The case suite of ``like``, renamed: the same shapes, ranges, levels and special scenarios."""
    text = (root / "tileport" / "cases" / "suites" / f"{like}.yaml").read_text()
    if text.startswith("#"):  # its title line
        text = text.split("\n", 1)[1]
    text = re.sub(r"^name: .*$", f"name: {name}", text, count=1, flags=re.M)
    text = re.sub(rf"tileport\.{like}_(fwd|bwd)", rf"tileport.{name}_\1", text)
    return f"# {name} case suite, written by `tileport scaffold` from {like}'s (TODO: its ranges and attributes).\n{text}"


def plan(name: str, like: str | None = None, root: Path | None = None) -> Plan:
    """What ``scaffold`` would write; ScaffoldError when it may not (checked before anything is written).
    ``like``: the operator whose suite it starts from (default: ``default_like()``)."""
    root = (root or default_root()).resolve()
    like = like or default_like()
    _check(name, like, root)
    paths = {t: root / p.format(name=name) for t, p in FILES.items()}
    existing = [str(p.relative_to(root)) for p in paths.values() if p.exists()]
    if existing:
        raise ScaffoldError(f"scaffold never overwrites: {', '.join(existing)} exist already")
    listing = "\n".join(f"- `{p.relative_to(root)}`" for p in paths.values())
    values = {"name": name, "Name": class_name(name), "like": like, "files": listing}
    weighted = SIGNATURES[signature(like)]
    files = {}
    for template, path in paths.items():
        if template == "suite.yaml":
            files[path] = _suite(like, name, root)
        else:
            files[path] = Template(select((TEMPLATES / f"{template}.tmpl").read_text(), weighted)).substitute(values)
    export = f"from .{name} import {class_name(name)}, {name}, {name}_bwd, {name}_fwd  # noqa: F401\n"
    return Plan(name, like, root, files, export)


def scaffold(name: str, like: str | None = None, root: Path | None = None) -> list[Path]:
    """Write the new operator's files and its export line; the paths written (the export file last)."""
    p = plan(name, like, root)
    for path, content in p.files.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content)
    exports = p.root / EXPORTS
    exports.write_text(exports.read_text() + p.export)
    return [*p.files, exports]
