"""A tensor's declaration (:class:`TensorDecl`) and its one-line form (:func:`decl`):

    NAME ":" SHAPE [DTYPE] ["grad"] ["optional"] ["in" "[" LOW "," HIGH ")" ["or" ALLOWED ("," ALLOWED)*]]

    x: [*batch, T, H, D] float grad
    cos: [T, R/2] like:x
    weight: [D] like:x grad optional
    target: [*batch] index in [0, C) or ignore_index

DTYPE is a dtype class: ``float`` (float16, bfloat16, float32, float64; the default), ``int64``, ``int32``,
``index`` (int64 or int32), ``bool``, ``like:OTHER`` (the dtype of the tensor OTHER), or ``stat:OTHER`` (the
statistics dtype of OTHER's: float32 for 16-bit and float32 tensors, float64 for float64, as a loss or a
logsumexp kept per row: ``lse: [N] stat:input``). ``grad``: the tensor is
differentiable (floating classes only). ``optional``: it may be None. ``in [LOW, HIGH)``: an integer tensor's
values lie in [LOW, HIGH), each bound an int, a dimension or an attribute; the ALLOWED values (ints or
attributes) are exempt; checked only when asked (it reads the data).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import torch

from .shape import Shape, is_name, parse_shape

FLOAT = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
CLASSES = {  # dtype class -> (the dtypes it admits, how a message says so)
    "float": (FLOAT, "a floating dtype (float16, bfloat16, float32, float64)"),
    "int64": ((torch.int64,), "dtype torch.int64"),
    "int32": ((torch.int32,), "dtype torch.int32"),
    "index": ((torch.int64, torch.int32), "an integer dtype (int64 or int32)"),
    "bool": ((torch.bool,), "dtype torch.bool"),
}
INTEGER = ("int64", "int32", "index")
STAT = (torch.float32, torch.float64)  # what a ``stat:`` tensor may be before its relation is known
RELATIONS = ("like:", "stat:")  # dtypes stated through another tensor's: the same, or its statistics'
_LINE = re.compile(r"\s*(?P<name>\S+?)\s*:\s*(?P<shape>\[[^\]]*\])\s*(?P<rest>.*)", re.DOTALL)
_RANGE = re.compile(r"\[\s*(?P<low>[^,\s]+)\s*,\s*(?P<high>[^)\s]+)\s*\)\s*(?:or\s+(?P<allow>.+))?", re.DOTALL)


@dataclass(frozen=True)
class TensorDecl:
    """A tensor of an operator: its name, its shape over named dimensions (a string is parsed), its dtype class,
    whether it is differentiable and optional, and an integer tensor's value range (see the module docstring).
    ``str()`` gives the one-line form back."""

    name: str
    shape: Shape
    dtype: str = "float"
    grad: bool = False
    optional: bool = False
    low: int | str | None = None
    high: int | str | None = None
    allow: tuple[int | str, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "shape", parse_shape(self.shape))
        object.__setattr__(self, "allow", tuple(self.allow))
        if not isinstance(self.name, str) or not is_name(self.name):
            raise ValueError(f"a tensor's name must be an identifier, got {self.name!r}")
        self._check_dtype()
        self._check_range()

    def _check_dtype(self) -> None:
        """The dtype class is known, a ``like:`` names another tensor, and only floating tensors have gradients."""
        like, other = self.like, self.related
        if other is None and self.dtype not in CLASSES:
            known = ", ".join([*CLASSES, "like:OTHER", "stat:OTHER"])
            raise ValueError(f"{self.name}: unknown dtype class {self.dtype!r} (one of {known})")
        if other is not None and (not is_name(other) or other == self.name):
            raise ValueError(f"{self.name}: {self.dtype!r} must name another tensor, as in '{self.dtype[:5]}x'")
        if self.grad and self.dtype != "float" and like is None:
            raise ValueError(f"{self.name}: a {self.dtype} tensor cannot be differentiable (grad)")

    def _check_range(self) -> None:
        """A range has both bounds, belongs to an integer tensor, and its names are identifiers."""
        if (self.low is None) != (self.high is None):
            raise ValueError(f"{self.name}: a value range needs both bounds, got low={self.low!r}, high={self.high!r}")
        if self.low is None and self.allow:
            raise ValueError(f"{self.name}: allowed values {self.allow} need a value range to be exempt from")
        if self.low is not None and self.dtype not in INTEGER:
            raise ValueError(
                f"{self.name}: only integer tensors (int64, int32, index) have a value range, not {self.dtype}"
            )
        for v in (self.low, self.high, *self.allow):
            if v is not None and not (type(v) is int or (isinstance(v, str) and is_name(v))):
                raise ValueError(f"{self.name}: a range bound or allowed value must be an int or a name, got {v!r}")

    @property
    def like(self) -> str | None:
        """The tensor whose dtype this one has (``like:OTHER``), or None."""
        return self.dtype[5:] if self.dtype.startswith("like:") else None

    @property
    def stat(self) -> str | None:
        """The tensor whose statistics dtype this one has (``stat:OTHER``), or None."""
        return self.dtype[5:] if self.dtype.startswith("stat:") else None

    @property
    def related(self) -> str | None:
        """The tensor this one's dtype is stated through (``like:`` or ``stat:``), or None."""
        return self.dtype[5:] if self.dtype.startswith(RELATIONS) else None

    @property
    def ranged(self) -> bool:
        return self.low is not None

    def __str__(self) -> str:
        words = [f"{self.name}: {self.shape}", self.dtype] + ["grad"] * self.grad + ["optional"] * self.optional
        if self.ranged:
            words.append(f"in [{self.low}, {self.high})")
            if self.allow:
                words.append("or " + ", ".join(map(str, self.allow)))
        return " ".join(words)


def decl(text: str) -> TensorDecl:
    """A TensorDecl from its one-line form (the module docstring); ValueError naming the text and its fault."""
    if not isinstance(text, str):
        raise TypeError(f"a declaration must be a string such as 'x: [*, D] float grad', got {type(text).__name__}")
    m = _LINE.fullmatch(text)
    if m is None:
        raise ValueError(f"malformed declaration {text!r}: expected 'NAME: [SHAPE] ...', as in 'x: [*, D] float grad'")
    head, ranged, tail = _split_at_in(m["rest"].strip())
    fields: dict = {"dtype": "float"}
    for word in head.split():
        if word in ("grad", "optional"):
            fields[word] = True
        elif word in CLASSES or word.startswith(RELATIONS):
            fields["dtype"] = word
        else:
            raise ValueError(
                f"malformed declaration {text!r}: unknown word {word!r} (a dtype class, grad, optional, in)"
            )
    if ranged:
        fields |= _range(text, tail)
    try:
        return TensorDecl(m["name"], m["shape"], **fields)
    except ValueError as exc:
        raise ValueError(f"malformed declaration {text!r}: {exc}") from None


def _split_at_in(rest: str) -> tuple[str, bool, str]:
    """The words before the word ``in``, whether there is one, and what follows it."""
    m = re.search(r"(?:^|\s)in(?:\s|$)", rest)
    return (rest, False, "") if m is None else (rest[: m.start()], True, rest[m.end() :])


def _range(text: str, tail: str) -> dict:
    """The ``[LOW, HIGH) or ...`` after ``in`` as TensorDecl fields."""
    m = _RANGE.fullmatch(tail.strip())
    if m is None:
        written = "a range is written 'in [LOW, HIGH)' or 'in [LOW, HIGH) or A, B'"
        raise ValueError(f"malformed declaration {text!r}: {written}")
    allow = tuple(_value(v.strip()) for v in m["allow"].split(",")) if m["allow"] else ()
    return {"low": _value(m["low"]), "high": _value(m["high"]), "allow": allow}


def _value(word: str) -> int | str:
    """An int literal (negative ones too: ``-100``) or a name, as written."""
    return int(word) if re.fullmatch(r"-?\d+", word) else word
