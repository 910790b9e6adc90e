"""The shape grammar: a tensor's shape over named dimensions, parsed once into frozen values.

    shape  := "[" [item ("," item)*] "]"
    item   := "*" [NAME]        a variadic run of dimensions (at most one per shape, anywhere)
            | NAME              one dimension
            | INT "*" NAME      a multiple: [*, 2*F] is F wide in halves
            | NAME "/" INT      a fraction: [T, R/2] is R/2 wide
            | INT               a literal size

``str()`` of a parsed shape gives the canonical text back (``"[*batch, T, 2*F, R/2, 3]"``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_NAME = r"[A-Za-z_][A-Za-z0-9_]*"
_FORMS = (  # (pattern, what it builds from the groups)
    (re.compile(rf"\*({_NAME})?"), lambda m: Dim(m[1] or "", variadic=True)),
    (re.compile(r"(\d+)"), lambda m: Dim("", value=int(m[1]))),
    (re.compile(rf"(\d+)\s*\*\s*({_NAME})"), lambda m: Dim(m[2], mul=int(m[1]))),
    (re.compile(rf"({_NAME})\s*/\s*(\d+)"), lambda m: Dim(m[1], div=int(m[2]))),
    (re.compile(rf"({_NAME})"), lambda m: Dim(m[1])),
)
_ITEM_HELP = "NAME, k*NAME, NAME/k, an int, *NAME or *"


def is_name(text: str) -> bool:
    """Whether ``text`` is a dimension, tensor or attribute name (a Python-style identifier)."""
    return re.fullmatch(_NAME, text) is not None


@dataclass(frozen=True)
class Dim:
    """One item of a shape: a named dimension (``name``, sized ``mul * name / div``), a literal size
    (``value``), or a variadic run (``variadic``; ``name`` "" for the anonymous ``*``, which is one run shared
    by every shape of a declaration, as the leading dimensions of the row-wise forms are)."""

    name: str
    mul: int = 1
    div: int = 1
    value: int | None = None
    variadic: bool = False

    def __str__(self) -> str:
        if self.variadic:
            return f"*{self.name}"
        if self.value is not None:
            return str(self.value)
        return f"{self.mul}*{self.name}" if self.mul != 1 else f"{self.name}/{self.div}" if self.div != 1 else self.name

    @property
    def key(self) -> str:
        """The name a binding knows it by: ``T`` for T, 2*T and T/2; ``*batch`` or ``*`` for a variadic run."""
        return f"*{self.name}" if self.variadic else self.name


@dataclass(frozen=True)
class Shape:
    """A parsed shape: its items in order (see the module docstring for the grammar)."""

    items: tuple[Dim, ...]

    def __str__(self) -> str:
        return "[" + ", ".join(map(str, self.items)) + "]"

    @property
    def variadic(self) -> int | None:
        """The index of the variadic item, or None for a shape of fixed rank."""
        return next((i for i, d in enumerate(self.items) if d.variadic), None)

    @property
    def fixed(self) -> int:
        """How many items are single dimensions: the rank, or the least rank when there is a variadic run."""
        return sum(not d.variadic for d in self.items)

    def names(self) -> tuple[str, ...]:
        """The dimension keys it mentions, in order, once each (literal sizes have none)."""
        keys = [d.key for d in self.items if d.value is None]
        return tuple(dict.fromkeys(keys))


def parse_shape(text: str | Shape) -> Shape:
    """``text`` parsed (a Shape is returned as it is); ValueError naming the text and the item at fault."""
    if isinstance(text, Shape):
        return text
    if not isinstance(text, str):
        raise TypeError(f"a shape must be a string such as '[*, D]', got {type(text).__name__}")
    body = text.strip()
    if not (body.startswith("[") and body.endswith("]")):
        raise ValueError(f"malformed shape {text!r}: it must be written in brackets, as in '[*batch, T, D]'")
    inner = body[1:-1]
    if not inner.strip():
        return Shape(())
    items, column = [], text.index("[") + 1
    for number, part in enumerate(inner.split(","), 1):
        items.append(_item(text, number, column + len(part) - len(part.lstrip()), part.strip()))
        column += len(part) + 1
    variadic = [str(d) for d in items if d.variadic]
    if len(variadic) > 1:
        raise ValueError(
            f"malformed shape {text!r}: {len(variadic)} variadic items ({', '.join(variadic)}); at most one"
        )
    return Shape(tuple(items))


def _item(text: str, number: int, column: int, part: str) -> Dim:
    """One item of ``text`` (``number`` counting from 1, at ``column``) parsed."""
    where = f"malformed shape {text!r}: item {number} (column {column})"
    if not part:
        raise ValueError(f"{where} is empty")
    for pattern, build in _FORMS:
        m = pattern.fullmatch(part)
        if m is not None:
            dim = build(m)
            if dim.mul == 0 or dim.div == 0:
                raise ValueError(f"{where} {part!r}: the factor must be a positive int, got 0")
            return dim
    raise ValueError(f"{where} {part!r} is not a dimension ({_ITEM_HELP})")
