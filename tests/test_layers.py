"""The package's layers import one way (docs/architecture.md draws them): every import of one tileport module by
another, at the top of a file or inside a function, goes to a lower layer or within its own unit, and no units
import each other in a circle. The table below is the architecture; a new module goes into it."""

import ast
import collections
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1] / "tileport"

# module prefix -> layer (the longest prefix that matches a module decides); higher layers import lower ones
LAYERS = {
    "tileport.cli": 7,
    "tileport.verify": 6,
    "tileport.bench": 6,
    "tileport.lower": 6,
    "tileport.readiness": 6,
    "tileport.scaffold": 6,
    "tileport.doctor": 6,
    "tileport.testing": 6,
    "tileport.transformers.bench": 6,
    "tileport.report": 5,
    "tileport.cases": 5,
    "tileport.transformers.cases": 5,
    "tileport.reference": 4,
    "tileport.external": 4,
    "tileport.providers": 4,  # what produces outputs for a case (backends, implementations, originals, functions)
    "tileport.transformers": 3,
    "tileport": 3,  # the package's own __init__: the public API (ops, patch)
    "tileport.ops": 2,
    "tileport.backends": 1,
    "tileport.precision": 0,
    "tileport.dtypes": 0,
    "tileport.progress": 0,
    "tileport.devices": 2,  # which device a run is on (cpu, cuda, npu): asks the backends' platform
}


def _modules() -> dict[str, Path]:
    out = {}
    for path in ROOT.rglob("*.py"):
        parts = path.relative_to(ROOT.parent).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


MODULES = _modules()


def layer(module: str) -> int:
    prefix = max((p for p in LAYERS if module == p or module.startswith(p + ".")), key=len)
    return LAYERS[prefix]


def unit(module: str) -> str:
    """What a circle is counted between: the table's prefix a module falls under."""
    return max((p for p in LAYERS if module == p or module.startswith(p + ".")), key=len)


def imports(module: str) -> list[tuple[str, int]]:
    """(the tileport module imported, line) for each import in ``module``'s source, inner ones included."""
    path = MODULES[module]
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join(anchor + ([node.module] if node.module else []))
            names = [f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base for a in node.names]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        else:
            continue
        for name in names:
            while name and name not in MODULES:
                name = name.rpartition(".")[0]
            if name.startswith("tileport") and name != module:
                found.append((name, node.lineno))
    return found


def test_every_module_is_in_the_table():
    assert all(any(m == p or m.startswith(p + ".") for p in LAYERS) for m in MODULES)


def test_no_import_runs_up_the_layers():
    up = [
        f"{m}:{line} imports {target} (layer {layer(target)} over {layer(m)})"
        for m in sorted(MODULES)
        for target, line in imports(m)
        if layer(target) > layer(m)
    ]
    assert not up, "\n".join(up)


def _circles(graph: dict[str, set[str]]) -> list[str]:
    """Each path that leads from a node back to itself (one per node it starts from)."""
    circles = []
    for start in sorted(graph):
        seen, stack = set(), [(start, [start])]
        while stack:
            node, path = stack.pop()
            for nxt in sorted(graph.get(node, ())):
                if nxt == start:
                    circles.append(" -> ".join([*path, start]))
                elif nxt not in seen:
                    seen.add(nxt)
                    stack.append((nxt, [*path, nxt]))
    return sorted(set(circles))


def test_no_units_import_each_other_in_a_circle():
    graph = collections.defaultdict(set)
    for m in MODULES:
        for target, _ in imports(m):
            if unit(target) != unit(m):
                graph[unit(m)].add(unit(target))
    assert not _circles(graph), "\n".join(_circles(graph))


def test_no_modules_import_each_other_in_a_circle():
    """Within a unit too: a package's ``__init__`` may import its modules, none of them the package back."""
    graph = {m: {t for t, _ in imports(m)} for m in MODULES}
    assert not _circles(graph), "\n".join(_circles(graph))


@pytest.mark.parametrize("module", ["tileport.backends.registry", "tileport.ops.spec", "tileport.cli"])
def test_the_scan_sees_imports(module):
    """The scan finds the imports a module has (a scan that sees none would pass the tests above)."""
    assert imports(module)


def test_a_circle_is_found():
    """The circle search finds one (a search that finds none would pass the tests above)."""
    assert _circles({"a": {"b"}, "b": {"a"}, "c": {"a"}}) == ["a -> b -> a", "b -> a -> b"]


def _inner_imports(path: Path) -> list[tuple[int, bool]]:
    """(line, commented) of each import inside a function of ``path``: commented where its line says why, or the
    comment line right above the run of imports it belongs to."""
    text = path.read_text()
    lines = text.split("\n")
    found = []
    for fn in ast.walk(ast.parse(text)):
        if isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
            for node in ast.walk(fn):
                if isinstance(node, ast.Import | ast.ImportFrom):
                    above = node.lineno - 2
                    while above >= 0 and lines[above].strip().startswith(("import ", "from ")):
                        above -= 1
                    said = "#" in lines[node.lineno - 1] or (above >= 0 and lines[above].strip().startswith("#"))
                    found.append((node.lineno, said))
    return found


def test_an_import_inside_a_function_says_why():
    """Modules import at their top; an import inside a function is kept only where it keeps a heavy or optional
    dependency (tilelang, triton, transformers, ray, matplotlib) out of start-up or probes whether one imports,
    and says so on its line or the comment line above its run of imports."""
    bare = [
        f"{MODULES[m].relative_to(ROOT.parent)}:{line}"
        for m in sorted(MODULES)
        for line, said in _inner_imports(MODULES[m])
        if not said
    ]
    assert not bare, "\n".join(bare)
    assert sum(len(_inner_imports(p)) for p in MODULES.values()) > 0  # the scan sees the commented ones
