"""The row-wise roles of ``tileport.ops.spec`` as short forms of the general declaration: ``rows`` is
``[*, D]``, ``vector`` and ``reduced`` are ``[D]``, ``per_row`` is ``[*]`` (the anonymous run ``*`` is one run
for the whole declaration: x's leading dimensions). The reduced dimension is the last one; an operator's
``dim`` attribute (a reduced dimension elsewhere) has no short form here."""

from __future__ import annotations

from collections.abc import Iterable

from .. import spec as s
from .decl import TensorDecl
from .declaration import Declaration

SHAPES = {s.ROWS: "[*, D]", s.VECTOR: "[D]", s.PER_ROW: "[*]", s.REDUCED: "[D]"}


def from_role(name: str, role: str, *, optional: bool = False, grad: bool = False) -> TensorDecl:
    """The declaration of a row-wise tensor of ``role`` (floating, as today's checks ask of every role)."""
    if role not in SHAPES:
        raise ValueError(f"{name}: role {role!r} has no short form (one of {', '.join(SHAPES)})")
    return TensorDecl(name, SHAPES[role], "float", grad=grad, optional=optional)


def rowwise(tensors: Iterable[s.Tensor]) -> Declaration:
    """A declaration from an OpSpec's tensors (``spec.inputs``, ``spec.outputs``...), each by its role."""
    return Declaration(tuple(from_role(t.name, t.role, optional=t.optional) for t in tensors))
