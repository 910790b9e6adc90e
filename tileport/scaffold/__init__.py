"""``tileport scaffold NAME``: a new operator's file set, its interface derived from the declaration it writes,
with TODOs where the math goes.

The signature comes from ``--like OP`` (that operator's inputs, attributes, outputs and backward, and the spec
fields it keeps: value scales, workloads, speed bar, model sites), from ``--inputs/--attrs/--outputs``, or
the first with the second's parts replacing its own. Tensors are given by row-wise roles (``x:rows``) or by named
dimensions (``q:[B,T,H,D]``, with ``--where`` constraints: a general operator, whose generated
``_interface.py`` is written too). It writes the spec (the declaration), the operator
package, the torch reference, the TileLang CPU, CUDA and Ascend and the Triton kernel modules, the suite YAML,
tests and a docs page listing what remains to write, and adds the one export line to
``tileport/ops/__init__.py``. Every function that needs the math raises NotImplementedError naming its file,
so the new tests run at once: the input checks (the interface's) pass, the math tests fail naming the TODO.
"""

from __future__ import annotations

import keyword
import re
from dataclasses import dataclass, field
from pathlib import Path

import tileport

from ..ops import spec as s
from ..ops.catalog import kernel_specs, specs
from . import declared, render, render_general
from .request import build
from .signature import Signature, SignatureError

NAME = re.compile(r"[a-z][a-z0-9_]*")

# what -> path in the checkout, for operator ``name``
FILES = {
    "ops_init": "tileport/ops/{name}/__init__.py",
    "ops_spec": "tileport/ops/{name}/spec.py",
    "interface": "tileport/ops/{name}/_interface.py",  # generated from the spec (`tileport generate`'s text)
    "torch": "tileport/backends/torch/{name}.py",
    "tilelang/cpu": "tileport/backends/tilelang/cpu/{name}.py",
    "tilelang/cuda": "tileport/backends/tilelang/cuda/{name}.py",
    "tilelang/ascend": "tileport/backends/tilelang/ascend/{name}.py",
    "triton": "tileport/backends/triton/{name}.py",
    "suite": "tileport/cases/suites/{name}.yaml",
    "test_numerics": "tests/ops/test_{name}_numerics.py",
    "test_errors": "tests/ops/test_{name}_errors.py",
    "docs": "docs/ops/{name}.md",
}
EXPORTS = "tileport/ops/__init__.py"
GENERAL_FILES = FILES


# an out-of-tree package (--package DIR): what -> path under DIR, {pkg} its import name
PACKAGE_FILES = {
    "pyproject": "pyproject.toml",
    "ops_init": "{pkg}/__init__.py",
    "ops_spec": "{pkg}/spec.py",
    "interface": "{pkg}/_interface.py",
    "kernels_init": "{pkg}/kernels/__init__.py",
    **{
        target: "{pkg}/kernels/" + module + ".py"
        for target, module in (
            ("torch", "torch_ref"),
            ("tilelang/cpu", "cpu"),
            ("triton", "triton"),
            ("tilelang/cuda", "cuda"),
            ("tilelang/ascend", "ascend"),
        )
    },
    "suite": "{pkg}/suite.yaml",
    "test_numerics": "tests/test_{name}_numerics.py",
    "test_errors": "tests/test_{name}_errors.py",
    "conftest": "tests/conftest.py",
    "docs": "docs/{name}.md",
}
GENERAL_PACKAGE_FILES = PACKAGE_FILES


class ScaffoldError(ValueError):
    """The request cannot be written: a bad name or signature, an operator that exists, or no checkout."""


@dataclass(frozen=True)
class Plan:
    name: str
    like: str | None
    root: Path
    signature: Signature
    files: dict[Path, str]  # path -> content
    export: str  # the line added to tileport/ops/__init__.py
    remains: list[str] = field(default_factory=list)  # what is left to write, in order
    left_out: list[str] = field(default_factory=list)  # the --like operator's spec fields not kept


def class_name(name: str) -> str:
    """``group_norm`` -> ``GroupNorm``: the module form's name."""
    return "".join(part.capitalize() for part in name.split("_"))


def default_root() -> Path:
    """The source checkout tileport is imported from (the folder holding ``pyproject.toml``)."""
    return Path(tileport.__file__).resolve().parent.parent


def default_like() -> str:
    """The operator with the fewest inputs and attributes (the simplest signature to start from)."""
    return min(kernel_specs().values(), key=lambda spec: len(spec.inputs) + len(spec.attrs)).name


def _check(name: str, like: str | None, root: Path) -> None:
    if not (NAME.fullmatch(name) and name.isidentifier() and not keyword.iskeyword(name)):
        raise ScaffoldError(f"operator name {name!r} is not a valid lower-case Python identifier (like group_norm)")
    taken = set(specs()) | {n for n in dir(tileport) if not n.startswith("_")}
    if name in taken or any(f"{name}{s}" in taken for s in ("_fwd", "_bwd")) or class_name(name) in taken:
        raise ScaffoldError(
            f"operator {name!r} exists already (or its names clash with tileport's API); scaffold never overwrites"
        )
    if like is not None and like not in kernel_specs():  # a model to copy has kernel modules of its own
        raise ScaffoldError(f"--like {like!r} is not an operator with kernels; operators: {', '.join(kernel_specs())}")
    if not (root / "pyproject.toml").exists() or not (root / "tileport" / "ops").is_dir():
        raise ScaffoldError(
            f"{root} is not a tileport source checkout (no pyproject.toml and tileport/ops): pass --root"
        )


def remains(
    name: str, paths: dict[str, Path], root: Path, left_out: list[str], like: str | None, general: bool = False
) -> list[str]:
    """What is left to write after the scaffold, in the order to write it."""
    rel = {k: str(p.relative_to(root)) for k, p in paths.items()}
    if general:
        return _general_remains(name, rel, left_out, like)
    items = [
        f"`{rel['ops_init']}`: the contract docstring (the math, dtypes, what is saved, empty and nan/inf rows)",
        f"`{rel['ops_spec']}`: summary, math, the torch composite (bench's baseline), bytes moved if the math reads "
        "more "
        f"(a change to its declaration: then `tileport generate {name}`, which rewrites `{rel['interface']}`)",
        f"`{rel['torch']}`: the reference forward and backward (the float64 golden and the benchmark)",
        f"`{rel['tilelang/cpu']}`: the TileLang CPU kernels (the default backend)",
        f"`{rel['triton']}`: the Triton kernels",
        (
            f"`{rel['tilelang/cuda']}`, `{rel['tilelang/ascend']}`: the device kernels and `lowered` (`tileport lower "
            f"{name}`)"
        ),
        f"`{rel['suite']}`: value ranges and attribute values of the cases",
        f"then `pytest {rel['test_numerics']} {rel['test_errors']}`, `tileport verify {name} --level quick`, "
        f"`tileport verify {name}` (L0) and `python scripts/make_docs.py {name}`",
    ]
    if left_out:
        items.append(f"not kept from {like} (its own): {', '.join(left_out)}; add the new operator's where it has them")
    return items


def _general_remains(name: str, rel: dict[str, str], left_out: list[str], like: str | None) -> list[str]:
    items = [
        f"`{rel['ops_init']}`: the contract docstring (the math over the named dimensions, what each kernel is handed, "
        "empty inputs, out-of-range values)",
        f"`{rel['ops_spec']}`: summary, math, the torch composite (bench's baseline), `sizes` (the dimensions the "
        f"primary does not bind), `example`'s values, bytes moved if the math reads more; after changing a "
        f"declaration, `tileport generate {name}` (rewrites `{rel['interface']}`)",
        f"`{rel['torch']}`: the reference forward and backward (the float64 golden and the benchmark)",
        f"`{rel['tilelang/cpu']}`: the TileLang CPU grid kernels (the default backend)",
        f"`{rel['triton']}`: the Triton kernels",
        f"`{rel['tilelang/cuda']}`, `{rel['tilelang/ascend']}`: the device kernels and `lowered` "
        f"(`tileport lower {name}`)",
        f"`{rel['suite']}`: each tensor's sizes, dtypes and value rules, the attribute values of the cases",
        f"then `pytest {rel['test_numerics']} {rel['test_errors']}`, `tileport verify {name} --level quick`, "
        f"`tileport verify {name}` (L0) and `python scripts/make_docs.py {name}`",
    ]
    if left_out:
        items.append(f"not kept from {like} (its own): {', '.join(left_out)}; add the new operator's where it has them")
    return items


def package_name(folder: Path) -> str:
    """The import name of an out-of-tree package written into ``folder`` (its name as an identifier)."""
    pkg = re.sub(r"\W", "_", folder.name.lower()).strip("_") or "tileport_op"
    return pkg if pkg[0].isalpha() else f"op_{pkg}"


def _how(like: str | None, **parts) -> str:
    """The scaffold command's options, as the docs page quotes them."""
    given = {k: v for k, v in parts.items() if v is not None}
    if like and not given:
        return f"--like {like}"
    shown = {"like": like, **given}
    return " ".join(f"--{k} {v!r}" if any(c in v for c in " []?") else f"--{k} {v}" for k, v in shown.items() if v)


def plan(
    name: str,
    like: str | None = None,
    root: Path | None = None,
    inputs: str | None = None,
    attrs: str | None = None,
    outputs: str | None = None,
    package: Path | None = None,
    where: str | None = None,
) -> Plan:
    """What ``scaffold`` would write; ScaffoldError when it may not (checked before anything is written).
    ``like``: the operator it starts from (default, when no signature is given: ``default_like()``).
    ``package``: write an out-of-tree operator package into this folder (its pyproject declares the
    ``tileport.ops`` entry point) instead of into tileport's checkout. ``where``: constraints between the named
    dimensions of a general signature."""
    if package is not None:
        return _package_plan(name, like, Path(package), inputs, attrs, outputs, where)
    root = (root or default_root()).resolve()
    if like is None and inputs is None and outputs is None:
        like = default_like()
    _check(name, like, root)
    like_spec = specs()[like] if like else None
    if like_spec is not None and like_spec.backward is None and not like_spec.grads:
        raise ScaffoldError(
            f"{like} is forward-only (no backward, as a decode step): the scaffold writes an operator with a "
            "backward; start from a declaration (--inputs, --outputs) or from an operator with gradients"
        )
    try:
        sig = build(like_spec, inputs, attrs, outputs, where)
    except SignatureError as exc:
        raise ScaffoldError(str(exc)) from exc
    if sig.general:
        how = _how(like, inputs=inputs, attrs=attrs, outputs=outputs, where=where)
        return _general_plan(name, like_spec, root, sig, how)
    paths = {k: root / p.format(name=name) for k, p in FILES.items()}
    existing = [str(p.relative_to(root)) for p in paths.values() if p.exists()]
    if existing:
        raise ScaffoldError(f"scaffold never overwrites: {', '.join(existing)} exist already")
    rel = {k: str(p.relative_to(root)) for k, p in paths.items()}
    spec_text, left_out = render.spec_text(name, sig, like_spec, rel["ops_spec"])
    todo = remains(name, paths, root, left_out, like)
    how = (
        f"--like {like}"
        if like and inputs is None and outputs is None
        else " ".join(
            f"--{k} {v}" for k, v in (("like", like), ("inputs", inputs), ("attrs", attrs), ("outputs", outputs)) if v
        )
    )
    files = {
        paths["ops_init"]: render._fill(
            "ops_init.py.tmpl", name=name, Name=class_name(name), contract=render.contract(sig)
        ),
        paths["ops_spec"]: spec_text,
        paths["interface"]: render_general.interface_text(
            spec_text, f"tileport.ops.{name}.spec", str(paths["ops_spec"])
        ),
        **{paths[t]: render.backend_text(name, sig, t, rel[t]) for t in render.BACKENDS},
        paths["suite"]: render.suite_text(
            name, sig, root / "tileport" / "cases" / "suites" / f"{like or default_like()}.yaml"
        ),
        paths["test_numerics"]: render.numerics_text(name, sig),
        paths["test_errors"]: render.errors_text(name, sig),
        paths["docs"]: render.docs_text(name, how, sig, "\n".join(f"{i}. {t}" for i, t in enumerate(todo, 1))),
    }
    export = f"from .{name} import {class_name(name)}, {name}, {name}_bwd, {name}_fwd  # noqa: F401\n"
    return Plan(name, like, root, sig, files, export, todo, left_out)


def _general_files(
    name: str,
    sig: Signature,
    like: s.OpSpec | None,
    paths: dict[str, Path],
    rel: dict[str, str],
    how: str,
    todo: list[str],
    module: str,
    package: str | None = None,
) -> dict[Path, str]:
    """A general operator's files; ScaffoldError where no sizes satisfy its constraints."""
    try:
        sizing = render_general.with_like_sizes(declared.sizing(sig), sig, like)
    except SignatureError as exc:
        raise ScaffoldError(str(exc)) from exc
    spec_text, _ = render_general.spec_text(name, sig, sizing, like, rel["ops_spec"], package)
    ops_import = f"import {package} as OPS" if package else "OPS = tileport"
    return {
        paths["ops_init"]: render._fill(
            "ops_init.py.tmpl", name=name, Name=class_name(name), contract=render_general.contract(sig)
        ),
        paths["ops_spec"]: spec_text,
        paths["interface"]: render_general.interface_text(spec_text, module, str(paths["ops_spec"])),
        **{paths[t]: render_general.backend_text(name, sig, t, rel[t]) for t in render.BACKENDS},
        paths["suite"]: render_general.suite_text(name, sig, sizing, like),
        paths["test_numerics"]: render_general.numerics_text(name, sig, sizing, ops_import),
        paths["test_errors"]: render_general.errors_text(name, sig, sizing, ops_import),
        paths["docs"]: render_general.docs_text(name, how, sig, "\n".join(f"{i}. {t}" for i, t in enumerate(todo, 1))),
    }


def _general_plan(name: str, like: s.OpSpec | None, root: Path, sig: Signature, how: str) -> Plan:
    paths = {k: root / p.format(name=name) for k, p in GENERAL_FILES.items()}
    existing = [str(p.relative_to(root)) for p in paths.values() if p.exists()]
    if existing:
        raise ScaffoldError(f"scaffold never overwrites: {', '.join(existing)} exist already")
    rel = {k: str(p.relative_to(root)) for k, p in paths.items()}
    left_out = render_general.left_out(sig, like)
    todo = remains(name, paths, root, left_out, like.name if like else None, general=True)
    files = _general_files(name, sig, like, paths, rel, how, todo, f"tileport.ops.{name}.spec")
    export = f"from .{name} import {class_name(name)}, {name}, {name}_bwd, {name}_fwd  # noqa: F401\n"
    return Plan(name, like.name if like else None, root, sig, files, export, todo, left_out)


def _package_plan(name: str, like: str | None, folder: Path, inputs, attrs, outputs, where=None) -> Plan:
    root = folder.expanduser().resolve()
    if like is None and inputs is None and outputs is None:
        like = default_like()
    if root.exists() and any(root.iterdir()):
        raise ScaffoldError(f"--package {folder}: the folder is not empty; scaffold never overwrites")
    if not (NAME.fullmatch(name) and name.isidentifier() and not keyword.iskeyword(name)):
        raise ScaffoldError(f"operator name {name!r} is not a valid lower-case Python identifier (like group_norm)")
    if name in specs():
        raise ScaffoldError(
            f"operator {name!r} exists already ({name} is one of tileport's operators or an installed plugin's)"
        )
    if like is not None and like not in kernel_specs():  # a model to copy has kernel modules of its own
        raise ScaffoldError(f"--like {like!r} is not an operator with kernels; operators: {', '.join(kernel_specs())}")
    like_spec = specs()[like] if like else None
    if like_spec is not None and like_spec.backward is None and not like_spec.grads:
        raise ScaffoldError(
            f"{like} is forward-only (no backward, as a decode step): the scaffold writes an operator with a "
            "backward; start from a declaration (--inputs, --outputs) or from an operator with gradients"
        )
    try:
        sig = build(like_spec, inputs, attrs, outputs, where)
    except SignatureError as exc:
        raise ScaffoldError(str(exc)) from exc
    pkg = package_name(root)
    layout = GENERAL_PACKAGE_FILES if sig.general else PACKAGE_FILES
    paths = {k: root / p.format(name=name, pkg=pkg) for k, p in layout.items()}
    rel = {k: str(p.relative_to(root)) for k, p in paths.items()}
    if sig.general:
        spec_text, left_out = "", render_general.left_out(sig, like_spec)
    else:
        spec_text, left_out = render.spec_text(name, sig, like_spec, rel["ops_spec"], package=pkg)
    items = [
        f"`{rel['ops_init']}`: the contract docstring",
        f"`{rel['ops_spec']}`: summary, math, the torch composite, bytes moved"
        + (f" (then `tileport generate {name}`: it rewrites `{rel['interface']}`)" if sig.general else ""),
        f"`{rel['torch']}`: the reference forward and backward (the float64 golden and the benchmark)",
        f"`{rel['tilelang/cpu']}`, `{rel['triton']}`: the CPU and Triton kernels",
        f"`{rel['tilelang/cuda']}`, `{rel['tilelang/ascend']}`: the device kernels and `lowered`",
        f"`{rel['suite']}`: value ranges and attribute values",
        (
            f"then `pip install -e {folder}`, `tileport ops` (it lists {name}), `pytest {folder}/tests`, `tileport "
            "verify "
            f"{name} --level quick`"
        ),
    ] + ([f"not kept from {like} (its own): {', '.join(left_out)}"] if left_out else [])
    how = f"--package {folder} " + (
        f"--like {like}"
        if like and inputs is None and outputs is None
        else " ".join(
            f"--{k} {v}" for k, v in (("like", like), ("inputs", inputs), ("attrs", attrs), ("outputs", outputs)) if v
        )
    )
    ops_import = f"import {pkg} as OPS"
    conftest = (
        '"""tileport\'s test fixtures: the float64 golden of an operator, seeded samples; the Triton interpreter\n'
        'for the session where no GPU is present."""\n\n'
        "from tileport.testing import golden, pytest_configure, pytest_unconfigure, randn  # noqa: F401\n"
    )
    kernels_init = f'"""{name}\'s kernel modules, one per backend (named in spec.py\'s ``kernels``)."""\n'
    if sig.general:
        how = f"--package {folder} {_how(like, inputs=inputs, attrs=attrs, outputs=outputs, where=where)}"
        files = {
            paths["pyproject"]: render.pyproject_text(name, root.name, pkg),
            paths["kernels_init"]: kernels_init,
            paths["conftest"]: conftest,
            **_general_files(name, sig, like_spec, paths, rel, how, items, f"{pkg}.spec", package=pkg),
        }
        return Plan(name, like, root, sig, files, "", items, left_out)
    files = {
        paths["pyproject"]: render.pyproject_text(name, root.name, pkg),
        paths["ops_init"]: render._fill(
            "ops_init.py.tmpl", name=name, Name=class_name(name), contract=render.contract(sig)
        ),
        paths["ops_spec"]: spec_text,
        paths["interface"]: render_general.interface_text(spec_text, f"{pkg}.spec", str(paths["ops_spec"])),
        paths["kernels_init"]: f'"""{name}\'s kernel modules, one per backend (named in spec.py\'s ``kernels``)."""\n',
        **{paths[t]: render.backend_text(name, sig, t, rel[t]) for t in render.BACKENDS},
        paths["suite"]: render.suite_text(
            name, sig, Path(tileport.__file__).resolve().parent / "cases" / "suites" / f"{like or default_like()}.yaml"
        ),
        paths["test_numerics"]: render.numerics_text(name, sig, ops_import),
        paths["test_errors"]: render.errors_text(name, sig, ops_import),
        paths["conftest"]: conftest,
        paths["docs"]: render.docs_text(name, how, sig, "\n".join(f"{i}. {t}" for i, t in enumerate(items, 1))),
    }
    return Plan(name, like, root, sig, files, "", items, left_out)


def scaffold(name: str, like: str | None = None, root: Path | None = None, **signature) -> Plan:
    """Write the new operator's files and its export line (in-tree; an out-of-tree package has none); the plan
    written."""
    p = plan(name, like, root, **signature)
    for path, content in p.files.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content)
    if p.export:
        exports = p.root / EXPORTS
        exports.write_text(exports.read_text() + p.export)
    return p
