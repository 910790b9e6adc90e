"""The sizes of a case by named dimensions: each dimension drawn by its suite rule (the standard's section 2:
log-uniform values, generalized in steps of 15 and 16 at L0 where the range holds such a value, random at L1 and
L2), the operator's constraints and the suite's checked, the largest tensor within ``max_length``; and the special
scenarios' sizes (every dimension at its least, each dimension 0 or 2^31 in turn).

A bound is an int or an expression over the dimensions drawn before it: names, ints, ``+ - * //`` and unary minus
(parsed with ``ast``; nothing is passed to ``eval``).
"""

from __future__ import annotations

import ast
import math
import operator
from collections.abc import Callable
from typing import Any

import numpy as np

from ..ops import dims as d
from ..precision.standard import DIM_STEPS, MAX_ELEMENTS
from .schema import DimOption, DimRule, Suite

TRIES = 200  # draws of a case's sizes before its rules are said not to fit max_length and the constraints
_BINARY = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.FloorDiv: operator.floordiv}


def expression(text: int | str) -> tuple[str, ...]:
    """The names a bound reads (none for an int); ValueError for anything outside the bound grammar."""
    if type(text) is int:
        return ()
    if not isinstance(text, str):
        raise ValueError(f"a bound must be an int or an expression such as '2*T + 16', got {text!r}")
    try:
        tree = ast.parse(text.strip(), mode="eval").body
    except SyntaxError:
        raise ValueError(f"malformed bound {text!r}: names, ints, + - * // and unary minus") from None
    names = []
    for node in ast.walk(tree):
        ok = (
            isinstance(node, (ast.Name, ast.Load, ast.USub))
            or type(node) in _BINARY
            or (isinstance(node, ast.BinOp) and type(node.op) in _BINARY)
            or (isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub))
            or (isinstance(node, ast.Constant) and type(node.value) is int)
        )
        if not ok:
            raise ValueError(f"malformed bound {text!r}: names, ints, + - * // and unary minus")
        if isinstance(node, ast.Name) and node.id not in names:
            names.append(node.id)
    return tuple(names)


def evaluate(text: int | str, values: dict[str, Any]) -> int:
    """A bound's value over the sizes (and attributes) drawn so far."""
    if type(text) is int:
        return text

    def walk(node):
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, ast.Name):
            return int(values[node.id])
        if isinstance(node, ast.UnaryOp):
            return -walk(node.operand)
        return _BINARY[type(node.op)](walk(node.left), walk(node.right))

    return walk(ast.parse(text.strip(), mode="eval").body)


def _loguniform(rng: np.random.Generator, low: int, high: int) -> int:
    """An int in [low, high], log-uniform over its offset from low (many small values, some large)."""
    if high <= low:
        return low
    return min(high, low + int(math.exp(rng.uniform(0.0, math.log(high - low + 1)))) - 1)


def _in_range(rng: np.random.Generator, low: int, high: int, step: int, generalized: bool) -> int | None:
    """A multiple of ``step`` in [low, high] (None where there is none); at L0 a multiple of 15 or 16 (and of
    ``step``) where the range holds one."""
    lo, hi = -(-low // step), high // step
    if lo > hi:
        return None
    if generalized:
        m = math.lcm(step, int(rng.choice(DIM_STEPS)))
        glo, ghi = -(-max(low, 1) // m), high // m
        if glo <= ghi:
            return m * _loguniform(rng, glo, ghi)
    return step * _loguniform(rng, lo, hi)


def options(rule: DimRule, omitted=()) -> tuple[DimOption, ...]:
    """The rule's options for a case leaving out the inputs ``omitted`` (an option may hold only when an optional
    input is present, or absent: ``when``)."""
    return tuple(o for o in rule.options if o.applies(omitted))


def _option(rng: np.random.Generator, rule: DimRule, omitted=()) -> DimOption | None:
    found = options(rule, omitted)
    if len(found) <= 1:
        return found[0] if found else None
    w = np.array([o.weight for o in found])
    return found[int(rng.choice(len(found), p=w / w.sum()))]


def draw_one(rng: np.random.Generator, rule: DimRule, values: dict, generalized: bool, omitted=()) -> int | None:
    """One size by one of the rule's options (None where its range is empty for the sizes drawn before, or no
    option holds for the inputs left out)."""
    o = _option(rng, rule, omitted)
    if o is None:
        return None
    if o.choices:
        return int(o.choices[int(rng.integers(len(o.choices)))])
    return _in_range(rng, evaluate(o.low, values), evaluate(o.high, values), o.step, generalized)


def draw(
    suite: Suite, rng: np.random.Generator, generalized: bool, turn: int, attrs: dict, omitted=()
) -> dict[str, Any] | None:
    """One draw of every dimension in the suite's order (a variadic run of the rank ``turn`` picks in turn: every
    rank covered) for a case leaving out the inputs ``omitted``; None where a range came out empty."""
    sizes: dict[str, Any] = {}
    for rule in suite.dims:
        values = attrs | sizes
        if rule.ranks:
            rank = rule.ranks[turn % len(rule.ranks)]
            items = [draw_one(rng, rule, values, generalized, omitted) for _ in range(rank)]
            if any(v is None for v in items):
                return None
            sizes[rule.name] = tuple(items)
        else:
            v = draw_one(rng, rule, values, generalized, omitted)
            if v is None:
                return None
            sizes[rule.name] = v
    return sizes


def binding(declaration: d.Declaration, sizes: dict, attrs: dict, where=()) -> d.Binding | None:
    """The declaration bound to ``sizes`` with its constraints and ``where`` checked, every tensor of a whole size
    (R/2 of an even R); None where they refuse it."""
    try:
        b = d.bind_sizes(declaration, sizes, {k: v for k, v in attrs.items() if k in declaration.attrs}, where)
        for t in declaration.tensors:
            b.shape_of(t)
    except ValueError:
        return None
    return b


def largest(b: d.Binding, names) -> int:
    """The elements of the largest of the tensors ``names`` (those whose shapes the sizes give)."""
    return max((math.prod(b.shape_of(n)) for n in names), default=0)


def scale_sizes(
    suite: Suite,
    declaration: d.Declaration,
    rng: np.random.Generator,
    generalized: bool,
    turn: int,
    attrs: dict,
    present: Callable[[dict], list[str]],
    omitted=(),
) -> dict[str, Any]:
    """A scale case's sizes: drawn until the constraints hold and the largest present tensor (``present(sizes)``
    names them) is within the suite's max_length; ValueError naming the suite when no draw of TRIES fits."""
    budget = min(suite.max_length or MAX_ELEMENTS, MAX_ELEMENTS)
    for _ in range(TRIES):
        sizes = draw(suite, rng, generalized, turn, attrs, omitted)
        b = None if sizes is None else binding(declaration, sizes, attrs, suite.where)
        if b is not None and largest(b, present(sizes)) <= budget:
            return sizes
    where = ", ".join(map(str, declaration.where + tuple(suite.where))) or "none"
    raise ValueError(
        f"{suite.file}: no draw of its dims in {TRIES} fits max_length {budget} and the constraints "
        f"({where}): widen them"
    )


def _least(rule: DimRule, values: dict, at_least: int) -> int:
    """The least size >= ``at_least`` one of the rule's options allows; else the least size it allows; else 0."""
    for floor in (at_least, None):
        fits = []
        for o in options(rule):  # the special scenarios give every optional input
            if o.choices:
                fits += [c for c in o.choices if floor is None or c >= floor]
                continue
            low, high = evaluate(o.low, values), evaluate(o.high, values)
            v = -(-(low if floor is None else max(low, floor)) // o.step) * o.step
            fits += [v] if v <= high else []
        if fits:
            return min(fits)
    return 0


def least(suite: Suite, rank: int | None = None, at_least: int = 1) -> dict[str, Any]:
    """Every dimension at its least (>= ``at_least`` where its rule allows): the lower border; a variadic run of
    ``rank`` items (default its least rank)."""
    sizes: dict[str, Any] = {}
    for rule in suite.dims:
        v = _least(rule, dict(sizes), at_least)
        sizes[rule.name] = (v,) * (min(rule.ranks) if rank is None else rank) if rule.ranks else v
    return sizes


def with_dim(
    declaration: d.Declaration, where, sizes: dict, key: str, value: int, item: int | None = None
) -> dict | None:
    """``sizes`` with one dimension (or one item of a variadic run) set to ``value``; a constraint this breaks
    (``R <= D`` with D = 0) sets the other dimensions it reads to ``value`` too; None where that does not mend it."""
    out = dict(sizes)
    out[key] = tuple(value if i == item else v for i, v in enumerate(out[key])) if item is not None else value
    for _ in range(len(out)):
        broken = [
            c
            for c in (*declaration.where, *map(d.constraint, where))
            if all(n in out for n in c.names) and not _holds(c, out)
        ]
        if not broken:
            return out
        for c in broken:
            out.update({n: value for n in c.names if n != key and not isinstance(out[n], tuple)})
    return None


def _holds(c: d.Constraint, sizes: dict) -> bool:
    """Whether a constraint holds for these sizes (one that divides by zero does not)."""
    try:
        return c.holds({n: sizes[n] for n in c.names})
    except ValueError:
        return False
