"""The new operator's signature as ``tileport scaffold`` was asked for it: ``--like OP`` with the given parts
replaced, or the parts alone; by named dimensions (``declared.py``: a ``[`` in ``--inputs``, or a general
``--like`` with no row-wise inputs) or by row-wise roles (``signature.py``)."""

from __future__ import annotations

from ..ops import spec as s
from . import declared, signature


def build(
    like: s.OpSpec | None, inputs: str | None, attrs: str | None, outputs: str | None, where: str | None = None
) -> signature.Signature:
    if declared.is_general(inputs) or (inputs is None and like is not None and like.general):
        return declared.build(like, inputs, attrs, outputs, where)
    return signature.build(like, inputs, attrs, outputs, where, general_outputs=declared.is_general(outputs))
