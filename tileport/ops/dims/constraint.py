"""Constraints between dimensions (``"R <= D"``, ``"R % 2 == 0"``, ``"Hq % Hk == 0"``): a comparison of integer
expressions over dimension and attribute names, checked after binding.

The text is parsed with ``ast`` and only these nodes are accepted: names, int literals, ``+ - * / // %``, unary
minus and comparisons (chained ones too). Nothing is ever passed to ``eval``.
"""

from __future__ import annotations

import ast
import operator
from collections.abc import Mapping
from dataclasses import dataclass

_BINARY = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
}
_COMPARE = {
    ast.Lt: operator.lt,
    ast.LtE: operator.le,
    ast.Gt: operator.gt,
    ast.GtE: operator.ge,
    ast.Eq: operator.eq,
    ast.NotEq: operator.ne,
}

_WORDS = {ast.In: "'in'", ast.NotIn: "'not in'", ast.Is: "'is'", ast.IsNot: "'is not'"}  # ast.unparse cannot show these


@dataclass(frozen=True)
class Constraint:
    """A parsed constraint: its text, its tree and the names it reads (in order of first appearance)."""

    text: str
    tree: ast.Expression
    names: tuple[str, ...]

    def __str__(self) -> str:
        return self.text

    def holds(self, values: Mapping[str, int]) -> bool:
        """Whether it holds for these sizes (every name in ``names`` given); ValueError for a division by 0."""
        try:
            return bool(_evaluate(self.tree.body, values))
        except ZeroDivisionError:
            shown = ", ".join(f"{n} = {values[n]}" for n in self.names)
            raise ValueError(f"the constraint {self.text} divides by zero with {shown}") from None


def constraint(text: str | Constraint) -> Constraint:
    """``text`` parsed (a Constraint is returned as it is); ValueError naming the text and what is not allowed."""
    if isinstance(text, Constraint):
        return text
    if not isinstance(text, str):
        raise TypeError(f"a constraint must be a string such as 'R <= D', got {type(text).__name__}")
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except SyntaxError as exc:
        raise ValueError(f"malformed constraint {text!r}: {exc.msg}") from None
    if not isinstance(tree.body, ast.Compare):
        # ValueError, not the TypeError ruff asks for: the text is malformed, not of a wrong type
        raise ValueError(f"malformed constraint {text!r}: it must be a comparison (<, <=, >, >=, ==, !=)")  # noqa: TRY004
    names: list[str] = []
    for node in ast.walk(tree.body):
        _allowed(text, node)
        if isinstance(node, ast.Name) and node.id not in names:
            names.append(node.id)
    return Constraint(text.strip(), tree, tuple(names))


def _allowed(text: str, node: ast.AST) -> None:
    """ValueError for a node outside the constraint language."""
    ok = (
        isinstance(node, (ast.Name, ast.Load, ast.Compare, ast.USub))
        or type(node) in _BINARY
        or type(node) in _COMPARE
        or (isinstance(node, ast.BinOp) and type(node.op) in _BINARY)
        or (isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub))
        or (isinstance(node, ast.Constant) and type(node.value) is int)
    )
    if not ok:
        what = _shown(node)
        raise ValueError(
            f"malformed constraint {text!r}: {what} is not allowed (names, ints, + - * / // %, comparisons)"
        )


def _shown(node: ast.AST) -> str:
    """A refused node as a message shows it."""
    if isinstance(node, ast.Constant):
        return repr(node.value)
    return ast.unparse(node) if isinstance(node, ast.expr) else _WORDS.get(type(node), type(node).__name__)


def _evaluate(node: ast.AST, values: Mapping[str, int]):
    """The value of an accepted node."""
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Name):
        return values[node.id]
    if isinstance(node, ast.UnaryOp):
        return -_evaluate(node.operand, values)
    if isinstance(node, ast.BinOp):
        return _BINARY[type(node.op)](_evaluate(node.left, values), _evaluate(node.right, values))
    left = _evaluate(node.left, values)
    for op, right_node in zip(node.ops, node.comparators):
        right = _evaluate(right_node, values)
        if not _COMPARE[type(op)](left, right):
            return False
        left = right
    return True
