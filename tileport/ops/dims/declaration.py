"""An operator's tensors and the constraints between their dimensions, checked as a whole once: names unique,
``like:`` and range names resolvable, each dimension name of one kind (a variadic run or a single dimension),
each output's dimensions bound by the inputs."""

from __future__ import annotations

import functools
from collections.abc import Iterable
from dataclasses import dataclass

from .constraint import Constraint, constraint
from .decl import TensorDecl, decl


@dataclass(frozen=True)
class Declaration:
    """``inputs`` (TensorDecls or their one-line forms) in declaration order, the order dimensions are bound in;
    ``outputs``: tensors whose shapes the inputs fix (outputs, output gradients), bound only where given (an
    ``out=`` buffer, a ``dy``); ``where``: constraints (texts or Constraints); ``attrs``: the attribute names
    ranges and constraints may read besides the dimensions. ValueError naming the first inconsistency."""

    inputs: tuple[TensorDecl, ...]
    outputs: tuple[TensorDecl, ...] = ()
    where: tuple[Constraint, ...] = ()
    attrs: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        for group in ("inputs", "outputs"):
            parsed = tuple(t if isinstance(t, TensorDecl) else decl(t) for t in getattr(self, group))
            object.__setattr__(self, group, parsed)
        object.__setattr__(self, "where", tuple(constraint(c) for c in self.where))
        object.__setattr__(self, "attrs", tuple(self.attrs))
        self._check_names()
        kinds = self._dimension_kinds()
        self._check_reads(kinds)
        self._check_outputs()

    @property
    def tensors(self) -> tuple[TensorDecl, ...]:
        """Inputs, then outputs."""
        return self.inputs + self.outputs

    def _check_names(self) -> None:
        """Tensor names are unique and each ``like:`` or ``stat:`` names a declared tensor, without a cycle."""
        names = [t.name for t in self.tensors]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise ValueError(f"tensors declared twice: {', '.join(twice)}")
        related = {t.name: t.related for t in self.tensors}
        for t in self.tensors:
            if t.related is not None and t.related not in names:
                what = "the dtype" if t.like is not None else "the statistics dtype"
                raise ValueError(f"{t.name} has {what} of {t.related}, which is not declared")
            chain = [t.name]
            while related.get(chain[-1]) is not None and chain[-1] not in chain[:-1]:
                chain.append(related[chain[-1]])
            if chain[-1] in chain[:-1]:
                raise ValueError(f"the dtypes go round: {' like '.join(chain)}")

    def _dimension_kinds(self) -> dict[str, str]:
        """Each dimension name's kind ("variadic" or "single"); a name of both kinds, or also an attribute's, is
        refused."""
        kinds: dict[str, tuple[str, str]] = {}  # name -> (kind, the first tensor it appears in)
        for t in self.tensors:
            for d in t.shape.items:
                if d.value is not None:
                    continue
                kind = "variadic" if d.variadic else "single"
                seen = kinds.setdefault(d.name, (kind, t.name))
                if seen[0] != kind:
                    raise ValueError(f"{d.name} is a {seen[0]} dimension in {seen[1]} but a {kind} one in {t.name}")
        clash = sorted(n for n, (kind, _) in kinds.items() if kind == "single" and n in self.attrs)
        if clash:
            raise ValueError(f"{', '.join(clash)} named both a dimension and an attribute")
        return {n: kind for n, (kind, _) in kinds.items()}

    def _check_reads(self, kinds: dict[str, str]) -> None:
        """Range bounds and constraints read single dimensions or attributes; allowed values read attributes."""
        known = {n for n, kind in kinds.items() if kind == "single"} | set(self.attrs)
        for t in self.tensors:
            for b in (t.low, t.high):
                if isinstance(b, str) and b not in known:
                    raise ValueError(f"{t.name}'s value range reads {b}, which is neither a dimension nor an attribute")
            for a in t.allow:
                if isinstance(a, str) and a not in self.attrs:
                    attrs = ", ".join(self.attrs) or "none"
                    raise ValueError(f"{t.name}'s allowed value {a} is not an attribute (attrs: {attrs})")
        for c in self.where:
            for n in c.names:
                if n not in known:
                    variadic = kinds.get(n) == "variadic"
                    what = "a variadic run, not a size" if variadic else "neither a dimension nor an attribute"
                    raise ValueError(f"the constraint {c} reads {n}, which is {what}")

    def _check_outputs(self) -> None:
        """Each dimension of an output is one some input has: its size is derivable."""
        bound = {k for t in self.inputs for k in t.shape.names()}
        for t in self.outputs:
            missing = [k for k in t.shape.names() if k not in bound]
            if missing:
                raise ValueError(f"{t.name} {t.shape} has {missing[0]}, which no input has: its size cannot be derived")

    def __getitem__(self, name: str) -> TensorDecl:
        for t in self.tensors:
            if t.name == name:
                return t
        raise KeyError(f"no tensor named {name!r} is declared (declared: {', '.join(t.name for t in self.tensors)})")

    def __contains__(self, name: object) -> bool:
        return any(t.name == name for t in self.tensors)

    def dims(self) -> tuple[str, ...]:
        """Every dimension key in order of first appearance: ``T``, ``*batch``, ``*`` (what a case generator
        draws sizes for)."""
        return tuple(dict.fromkeys(k for t in self.tensors for k in t.shape.names()))

    def plus(self, tensors: Iterable[TensorDecl | str]) -> Declaration:
        """This declaration with more outputs (a backward's ``dy``), those already declared by name kept."""
        more = tuple(t if isinstance(t, TensorDecl) else decl(t) for t in tensors)
        new = tuple(t for t in more if t.name not in self)
        return Declaration(self.inputs, self.outputs + new, self.where, self.attrs) if new else self


def as_declaration(decls, where: Iterable = (), attrs: Iterable[str] = ()) -> Declaration:
    """``decls`` as a Declaration: one as it is (with ``where`` and ``attrs`` added), else one whose inputs are
    the sequence (cached: the public calls bind the same declaration every time)."""
    if isinstance(decls, Declaration):
        if not where and set(attrs) <= set(decls.attrs):
            return decls
        extra = tuple(a for a in attrs if a not in decls.attrs)
        return Declaration(decls.inputs, decls.outputs, decls.where + tuple(where), decls.attrs + extra)
    if isinstance(decls, (str, TensorDecl)):
        raise TypeError("decls must be a sequence of declarations (or a Declaration), not a single one")
    key = (tuple(decls), tuple(where), tuple(sorted(attrs)))
    try:
        return _cached(*key)
    except TypeError:  # something unhashable in it: built uncached, to give its own message
        return Declaration(key[0], (), key[1], key[2])


@functools.lru_cache(maxsize=256)
def _cached(inputs: tuple, where: tuple, attrs: tuple) -> Declaration:
    return Declaration(inputs, (), where, attrs)
