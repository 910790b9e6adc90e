"""The checks of a call form written out as straight-line Python: each tensor's type, dtype class, rank, sizes and
device tested in one condition, each dimension bound once (``B, T, Hq, D`` from q) and compared everywhere it
appears again. A failed condition calls ``explain``, which binds the same declaration with
``tileport.ops.dims.bind`` and raises its message (the tensor, the dimension and both sizes): one source of
messages, and a fast path that builds nothing."""

from __future__ import annotations

import ast

from ..dims import Constraint, TensorDecl
from ..dims.decl import CLASSES
from .declared import Form

# A dtype class's admitted dtypes, as the generated module names them.
CLASS_NAMES = {c: f"_{c.upper()}" for c in CLASSES}


def class_constants() -> str:
    """The dtype-class constants the checks test membership in."""
    return "".join(f"{CLASS_NAMES[c]} = {_dtypes(c)}\n" for c in CLASSES)


def _dtypes(c: str) -> str:
    return "(" + ", ".join(f"torch.{str(d).removeprefix('torch.')}" for d in CLASSES[c][0]) + ",)"


def _stat(ref: str | None) -> str:
    """The statistics dtype of the tensor ``ref`` as an expression (None: the dtypes a statistic may have)."""
    if ref is None:
        return "(torch.float32, torch.float64)"
    return f"(torch.float64 if {ref}.dtype == torch.float64 else torch.float32)"


def variable(key: str, taken: set[str]) -> str:
    """The Python name a dimension is bound to: itself (``T``), ``batch_`` for ``*batch``, ``lead_`` for ``*``;
    suffixed where it would shadow a parameter."""
    name = "lead_" if key == "*" else f"{key[1:]}_" if key.startswith("*") else key
    while name in taken:
        name += "_"
    return name


class Checks:
    """Writes the checks of one form; ``bound`` (dimension key -> variable) and ``maybe`` (those bound only
    where an optional tensor is given, None otherwise) are what the rest of the generated code may read."""

    def __init__(self, form: Form, params: set[str], explain: str):
        self.form = form
        self.params = params
        self.explain = explain
        self.bound: dict[str, str] = {}
        self.maybe: set[str] = set()
        self.lines: list[str] = []

    def write(self, where: list[tuple[int, Constraint]], indent: str = "    ") -> str:
        """The lines; ``where``: the constraints to check, each with its index in the declaration's."""
        first = self.form.tensors[0].name
        for t in self.form.tensors:
            self._tensor(t, first, indent)
        for i, c in where:
            self._constraint(i, c, indent)
        return "".join(self.lines)

    # ---------------------------------------------------------------- one tensor

    def _tensor(self, t: TensorDecl, first: str, indent: str) -> None:
        n = t.name
        conds = [f"isinstance({n}, torch.Tensor)"]
        if t.stat is not None:  # its statistics dtype; the tensor it names may come later in the form
            ref = self.form[t.stat].name
            same = f"isinstance({ref}, torch.Tensor) and {n}.dtype == {_stat(ref)}"
            conds.append(
                f"({ref} is None and {n}.dtype in {_stat(None)} or {same})" if self.form[ref].optional else same
            )
        elif t.like is None:
            conds.append(f"{n}.dtype in {CLASS_NAMES[t.dtype]}")
        else:
            ref = self.form[t.like]
            same = f"{n}.dtype == {ref.name}.dtype"
            conds.append(f"({ref.name} is None or {same})" if ref.optional else same)
        shape = t.shape
        rank = shape.fixed
        conds.append(f"{n}.dim() >= {rank}" if shape.variadic is not None else f"{n}.dim() == {rank}")
        binds: list[str] = []
        here: dict[str, str] = {}  # keys first bound by this tensor -> the expression of their size
        for i, item in enumerate(shape.items):
            at = index(i, shape)
            if item.value is not None:
                conds.append(f"{n}.shape[{at}] == {item.value}")
                continue
            key = item.key
            size = f"{n}.shape[{at}]" if not item.variadic else f"{n}.shape[{run(shape)}]"
            if item.variadic:
                value = size
            else:
                value = size_of(size, item)
                if item.mul != 1:
                    conds.append(f"{size} * {item.div} % {item.mul} == 0")
            if key in here:
                conds.append(f"{value} == {here[key]}")
            elif key in self.bound and key not in self.maybe:
                conds.append(self._equal(item, size, self.bound[key]))
            elif key in self.bound:  # bound only where an optional tensor was given
                var = self.bound[key]
                conds.append(f"({var} is None or {self._equal(item, size, var)})")
                binds.append(f"if {var} is None:\n    {var} = {value}")
                if not t.optional:
                    self.maybe.discard(key)  # bound here either way from now on
            else:
                here[key] = value
        if n != first:
            conds.append(f"{n}.device == {first}.device")
        inner = indent + ("    " if t.optional else "")
        body = f"{inner}if not ({' and '.join(conds)}):\n{inner}    {self.explain}\n"
        unpack = len(here) == len(shape.items) > 1 and all(
            value == f"{n}.shape[{i}]" for i, value in enumerate(here.values())
        )
        names = []
        for key, value in here.items():
            var = variable(key, self.params)
            names.append(var)
            if not unpack:
                body += f"{inner}{var} = {value}\n"
            self.bound[key] = var
            if t.optional:
                self.maybe.add(key)
        if unpack:  # every dimension new and whole: ``B, T, H, D = q.shape``
            body += f"{inner}{', '.join(names)} = {n}.shape\n"
        for b in binds:
            body += "".join(f"{inner}{line}\n" for line in b.split("\n"))
        if t.optional:
            unbound = [self.bound[k] for k in here]
            pre = "".join(f"{indent}{var} = None\n" for var in unbound)
            body = f"{pre}{indent}if {n} is not None:\n{body}"
        self.lines.append(body)

    @staticmethod
    def _equal(item, size: str, var: str) -> str:
        if item.variadic or item.mul == item.div == 1:
            return f"{size} == {var}"
        left = f"{size} * {item.div}" if item.div != 1 else size
        right = f"{var} * {item.mul}" if item.mul != 1 else var
        return f"{left} == {right}"

    # ---------------------------------------------------------------- constraints

    def _constraint(self, i: int, c: Constraint, indent: str) -> None:
        names = {n: self.bound.get(n, n) for n in c.names}
        maybe = [names[n] for n in c.names if n in self.maybe]
        if _divides_by_name(c):
            test = f"not _WHERE[{i}].holds({{{', '.join(f'{n!r}: {v}' for n, v in names.items())}}})"
        else:
            test = f"not ({_renamed(c, names)})"
        guard = " and ".join([f"{m} is not None" for m in maybe] + [test])
        self.lines.append(f"{indent}if {guard}:\n{indent}    {self.explain}\n")


def index(i: int, shape) -> str:
    """Item ``i``'s index in the tensor: from the front before a variadic run, from the back after it."""
    v = shape.variadic
    return str(i) if v is None or i < v else str(i - len(shape.items))


def run(shape) -> str:
    """The slice of the tensor's shape its variadic run spans."""
    v = shape.variadic
    after = len(shape.items) - v - 1
    return f"{v}:{-after}" if after else f"{v}:"


def size_of(size: str, item) -> str:
    """The dimension's size from the tensor's size where the item is ``mul * name / div``."""
    if item.mul == item.div == 1:
        return size
    if item.mul == 1:
        return f"{size} * {item.div}"
    return f"{size} * {item.div} // {item.mul}" if item.div != 1 else f"{size} // {item.mul}"


def _divides_by_name(c: Constraint) -> bool:
    """Whether the constraint divides by a dimension or attribute (zero there: ``holds`` says so in words)."""
    return any(
        isinstance(node, ast.BinOp)
        and isinstance(node.op, (ast.Div, ast.FloorDiv, ast.Mod))
        and not isinstance(node.right, ast.Constant)
        for node in ast.walk(c.tree)
    )


def _renamed(c: Constraint, names: dict[str, str]) -> str:
    tree = ast.parse(c.text.strip(), mode="eval")
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            node.id = names.get(node.id, node.id)
    return ast.unparse(tree.body)
