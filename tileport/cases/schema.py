"""The case-suite YAML format (close to ATK's) and its loader.

A suite names the operator and its API, the levels (how many cases and repeated runs each ``--level`` runs,
and which ratio limits apply), and the inputs: tensors with dtypes, value ranges, shape rules and boundary
flags, and attributes such as eps. ``load_suite`` checks every key it reads; a malformed file raises
``CaseFileError`` naming the file, the key and what was expected.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from ..dtypes import parse as parse_dtype
from ..precision.standard import ACC_STANDARDS, COUNTS

SUITES = Path(__file__).with_name("suites")
DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32, "float64": torch.float64}
RANGE_KINDS = ("normal", "uniform", "near_eps", "large")
BOUNDARY_FLAGS = ("has_empty", "has_infnan", "has_scalar", "has_upper_border", "has_lower_border")


class CaseFileError(ValueError):
    """A suite file that does not follow the format: names the file, the key and what was expected."""

    def __init__(self, file: Path | str, key: str, expected: str, got: Any = None):
        self.file, self.key, self.expected = str(file), key, expected
        got_text = "" if got is None else f", got {got!r}"
        super().__init__(f"{file}: key '{key}': expected {expected}{got_text}")


@dataclass(frozen=True)
class ValueRange:
    name: str
    kind: str
    weight: float = 1.0
    scale: float = 1.0
    low: float = -1.0
    high: float = 1.0


@dataclass(frozen=True)
class ShapeRule:
    dim_numbers: tuple[int, ...]  # dimension counts (the standard covers 1-8)
    max_dim: int  # largest last (reduced) dimension
    max_length: int  # elements of one generalized case
    fixed: tuple[tuple[int, ...], ...] = ()
    free: bool = True  # False: every case takes the fixed shapes in turn (a problem's own shapes)


@dataclass(frozen=True)
class DimOption:
    """One way to draw a named dimension: a range [low, high] (each bound an int or an expression over the
    dimensions drawn before it, such as ``D`` or ``2*T + 16``) in multiples of ``step``, or one of ``choices``;
    ``weight``: how often this option is taken among a dimension's options."""

    low: int | str = 1
    high: int | str = 1
    step: int = 1
    choices: tuple[int, ...] = ()
    weight: float = 1.0
    when: tuple[str, bool] | None = None  # (an optional input, present or not): the option applies only then

    def applies(self, omitted) -> bool:
        """Whether the option may be drawn for a case leaving out the inputs ``omitted``."""
        return self.when is None or (self.when[0] not in omitted) == self.when[1]


@dataclass(frozen=True)
class DimRule:
    """How a suite by named dimensions draws one dimension (``T``) or variadic run (``*batch``): its options, and
    for a run its ranks (each item of the run drawn by the options)."""

    name: str
    options: tuple[DimOption, ...]
    ranks: tuple[int, ...] = ()


@dataclass(frozen=True)
class IntRule:
    """The values of an integer tensor: ``index`` (the declaration's range, ``ignore`` of them its allowed values
    such as ignore_index), ``positions`` (in [low, high), ``outside`` of them out of it: negative or past high),
    ``lengths`` (in [low, high], high included) or ``offsets`` (packed sequences' cumulative lengths: rising from 0
    to ``high``, each step at least ``low``, 0 allowing empty sequences). Bounds are ints or expressions over the
    dimensions."""

    kind: str
    low: int | str | None = None
    high: int | str | None = None
    outside: float = 0.0
    ignore: float = 0.0


DOMAIN_KINDS = ("nonpositive", "unit_interval", "unit_rows")


@dataclass(frozen=True)
class Domain:
    """Where a floating input's values must lie for the operator, the standard's draws mapped into it (its section
    2: a value outside the valid range is regenerated or brought in): ``nonpositive`` -|x| floored at ``low`` (a
    log-space decay), with a share ``zeros`` set to exactly 0; ``unit_interval`` sigmoid(x), in [0, 1] (a gate);
    ``unit_rows`` x / |x| over the last dimension (a normalized key), left as drawn where the case's attribute
    ``unless`` is true (the operator normalizes it itself)."""

    kind: str
    low: float = -math.inf
    zeros: float = 0.0
    unless: str | None = None


@dataclass(frozen=True)
class TensorInput:
    name: str
    required: bool
    ranges: tuple[ValueRange, ...]
    dtypes: tuple[torch.dtype, ...] = ()
    shapes: ShapeRule | None = None
    boundary: dict[str, bool] = field(default_factory=dict)
    like: str | None = None
    valid: tuple[tuple[float, float, float], ...] = ()  # (low, high, weight): where the uniform cases draw from
    invalid: tuple[tuple[float, float], ...] = ()  # values the operator must reject with a clear error
    shape: tuple[int, ...] | None = None  # a shape of its own (a problem's second input), not the first's
    values: IntRule | None = None  # an integer tensor's value rule (a suite by named dimensions)
    omit: float | None = None  # an optional input: the share of the scale's cases that leave it out (None: default)
    domain: Domain | None = None  # a floating input's valid values (a suite by named dimensions)


@dataclass(frozen=True)
class AttrInput:
    name: str
    required: bool
    values: tuple[Any, ...]
    invalid: tuple[Any, ...] = ()  # values the operator must reject with a clear error
    weights: tuple[float, ...] = ()  # how often each value is drawn (empty: uniformly)


@dataclass(frozen=True)
class Level:
    name: str
    cases: int
    runs: int
    limits: str  # the ratio limits of the standard that apply (L0, L1, L2)

    @property
    def conforming(self) -> bool:
        """Whether the level runs the standard's counts for its limits (quick does not: it is labelled so)."""
        need = COUNTS[self.limits]
        return self.cases >= need.cases and self.runs >= need.runs_per_case


@dataclass(frozen=True)
class Suite:
    file: Path
    name: str
    api: str
    backward: bool
    outputs: tuple[str, ...]
    grad_outputs: tuple[str, ...]
    standard: dict[str, str]
    levels: dict[str, Level]
    tensors: tuple[TensorInput, ...]
    attrs: tuple[AttrInput, ...]
    extra_share: float = 0.0  # tileport's stress cases (the tensors' own ranges, row scenarios), beyond the scale
    reference: str | None = None  # a reference callable's target (``tileport.reference``) where name is no operator
    derived: tuple[str, ...] = ()  # the reference's parameters derived from the first tensor (normalized_shape)
    # A suite by named dimensions (its operator's tensors declared so): how each dimension is drawn, extra
    # constraints, the largest tensor's elements, the special scenarios' base sizes, sizes always included.
    dims: tuple[DimRule, ...] = ()
    where: tuple[str, ...] = ()
    max_length: int = 0
    base: dict[str, Any] = field(default_factory=dict)
    fixed: tuple[dict[str, Any], ...] = ()

    @property
    def general(self) -> bool:
        """Sized by named dimensions (``dims``), not by the first tensor's shape rule."""
        return bool(self.dims)

    @property
    def primary(self) -> TensorInput:
        """The tensor input that carries the floating dtypes (and, row-wise, the shapes); the others are ``like``
        it (row-wise) or take the case's dtype by their declaration (by named dimensions)."""
        return next(t for t in self.tensors if t.like is None and t.dtypes and t.dtypes[0].is_floating_point)

    def level(self, name: str) -> Level:
        if name not in self.levels:
            raise ValueError(f"suite {self.name!r} has no level {name!r}; levels: {', '.join(self.levels)}")
        return self.levels[name]


class _Reader:
    """Typed access to a mapping, with errors that name the file and the dotted key."""

    def __init__(self, file: Path, data: Any, prefix: str = ""):
        self.file, self.prefix = file, prefix
        if not isinstance(data, dict):
            raise CaseFileError(file, prefix or "<top level>", "a mapping", data)
        self.data = data

    def key(self, name: str) -> str:
        return f"{self.prefix}.{name}" if self.prefix else name

    def get(self, name: str, kind: type | tuple[type, ...], expected: str, default: Any = ...):
        if name not in self.data:
            if default is ...:
                raise CaseFileError(self.file, self.key(name), f"{expected} (the key is missing)")
            return default
        value = self.data[name]
        if not isinstance(value, kind) or isinstance(value, bool) and bool not in _tuple(kind):
            raise CaseFileError(self.file, self.key(name), expected, value)
        return value

    def only(self, *keys: str) -> _Reader:
        """Reject a key the format does not have: nothing is silently ignored."""
        for k in self.data:
            if k not in keys:
                raise CaseFileError(self.file, self.key(str(k)), f"one of the keys {', '.join(keys)}", "an unknown key")
        return self

    def child(self, name: str, default: Any = ...) -> _Reader:
        return _Reader(self.file, self.get(name, dict, "a mapping", default), self.key(name))

    def int_list(self, name: str, minimum: int) -> tuple[int, ...]:
        values = self.get(name, list, f"a list of integers >= {minimum}")
        if not values or not all(isinstance(v, int) and not isinstance(v, bool) and v >= minimum for v in values):
            raise CaseFileError(self.file, self.key(name), f"a non-empty list of integers >= {minimum}", values)
        return tuple(values)


def _tuple(kind) -> tuple:
    return kind if isinstance(kind, tuple) else (kind,)


def _number(r: _Reader, name: str, default: float) -> float:
    return float(r.get(name, (int, float), "a number", default))


def _ranges(r: _Reader) -> tuple[ValueRange, ...]:
    """A tensor's own ranges: tileport's stress cases beyond the standard's value mix (none is allowed)."""
    ranges = r.child("ranges", {})
    out = []
    for name in ranges.data:
        spec = ranges.child(name).only("kind", "weight", "scale", "low", "high")
        kind = spec.get("kind", str, f"one of {', '.join(RANGE_KINDS)}")
        if kind not in RANGE_KINDS:
            raise CaseFileError(r.file, spec.key("kind"), f"one of {', '.join(RANGE_KINDS)}", kind)
        weight = _number(spec, "weight", 1.0)
        if weight <= 0:
            raise CaseFileError(r.file, spec.key("weight"), "a positive number", weight)
        low, high = _number(spec, "low", -1.0), _number(spec, "high", 1.0)
        if low >= high:
            raise CaseFileError(r.file, spec.key("high"), f"a number above low ({low})", high)
        out.append(ValueRange(name, kind, weight, _number(spec, "scale", 1.0), low, high))
    return tuple(out)


def _shapes(r: _Reader) -> ShapeRule:
    s = r.child("shapes").only("dim_numbers", "max_dim", "max_length", "fixed")
    fixed = s.get("fixed", list, "a list of shapes (lists of integers >= 0)", [])
    for shape in fixed:
        if not isinstance(shape, list) or not shape or not all(isinstance(d, int) and d >= 0 for d in shape):
            raise CaseFileError(r.file, s.key("fixed"), "a list of shapes (lists of integers >= 0)", shape)
    max_length = s.get("max_length", int, "a positive integer")
    if max_length < 1:
        raise CaseFileError(r.file, s.key("max_length"), "a positive integer", max_length)
    max_dim = s.get("max_dim", int, "a positive integer", max_length)
    if max_dim < 1:
        raise CaseFileError(r.file, s.key("max_dim"), "a positive integer", max_dim)
    dims = s.int_list("dim_numbers", 1)
    if max(dims) > 8:
        raise CaseFileError(r.file, s.key("dim_numbers"), "dimension counts from 1 to 8", list(dims))
    return ShapeRule(dims, max_dim, max_length, tuple(map(tuple, fixed)))


def _dtypes(r: _Reader) -> tuple[torch.dtype, ...]:
    """A tensor's ``dtypes.values`` (tileport's and the test kit's files alike), each once, in order."""
    names = r.child("dtypes").only("values").get("values", list, f"a list of dtype names from {', '.join(DTYPES)}")
    out = []
    for n in names:
        try:
            out.append(parse_dtype(n))
        except (ValueError, TypeError):
            raise CaseFileError(
                r.file, r.key("dtypes.values"), f"dtype names from {', '.join(DTYPES)} (or fp32, fp16, bf16)", n
            ) from None
    if not out:
        raise CaseFileError(r.file, r.key("dtypes.values"), f"dtype names from {', '.join(DTYPES)}", names)
    return tuple(dict.fromkeys(out))


def _inputs(file: Path, items: list) -> tuple[tuple[TensorInput, ...], tuple[AttrInput, ...]]:
    tensors, attrs = [], []
    for i, item in enumerate(items):
        r = _Reader(file, item, f"inputs[{i}]").only(
            "name", "type", "required", "values", "like", "ranges", "dtypes", "shapes", "boundary"
        )
        name = r.get("name", str, "the input's name")
        required = r.get("required", bool, "true or false", True)
        kind = r.get("type", str, "tensor or attrs")
        if kind == "attrs":
            values = r.get("values", list, "a non-empty list of values")
            if not values:
                raise CaseFileError(file, r.key("values"), "a non-empty list of values", values)
            attrs.append(AttrInput(name, required, tuple(values)))
        elif kind == "tensor":
            like = r.get("like", str, "the name of an earlier tensor input", None)
            if like is not None:
                if like not in {t.name for t in tensors}:
                    raise CaseFileError(file, r.key("like"), "the name of an earlier tensor input", like)
                tensors.append(TensorInput(name, required, _ranges(r), like=like))
                continue
            boundary = r.child("boundary", {})
            flags = {}
            for flag, value in boundary.data.items():
                if flag not in BOUNDARY_FLAGS or not isinstance(value, bool):
                    raise CaseFileError(
                        file, boundary.key(flag), f"one of {', '.join(BOUNDARY_FLAGS)}: true/false", value
                    )
                flags[flag] = value
            tensors.append(TensorInput(name, required, _ranges(r), _dtypes(r), _shapes(r), flags))
        else:
            raise CaseFileError(file, r.key("type"), "tensor or attrs", kind)
    primaries = [t for t in tensors if t.like is None]
    if len(primaries) != 1:
        raise CaseFileError(file, "inputs", "exactly one tensor input with dtypes and shapes (others use `like`)")
    return tuple(tensors), tuple(attrs)


def _levels(top: _Reader) -> dict[str, Level]:
    levels = top.child("levels")
    out = {}
    for name in levels.data:
        lv = levels.child(name).only("cases", "runs", "limits")
        cases, runs = lv.get("cases", int, "a positive integer"), lv.get("runs", int, "a positive integer")
        if cases < 1 or runs < 1:
            raise CaseFileError(
                top.file, lv.key("cases" if cases < 1 else "runs"), "a positive integer", min(cases, runs)
            )
        limits = lv.get("limits", str, f"one of {', '.join(COUNTS)}", name)
        if limits not in COUNTS:
            raise CaseFileError(top.file, lv.key("limits"), f"one of {', '.join(COUNTS)}", limits)
        out[name] = Level(name, cases, runs, limits)
    if not out:
        raise CaseFileError(top.file, "levels", "at least one level")
    return out


TOP_KEYS = (
    "name",
    "api",
    "api_type",
    "version",
    "backward",
    "outputs",
    "grad_outputs",
    "standard",
    "levels",
    "inputs",
    "extra_share",
)
STANDARD_KEYS = ("acc", "golden", "benchmark", "max_atol", "perf")


def _standard(top: _Reader) -> dict[str, str]:
    """The ``standard`` mapping: ``acc`` picks the precision standard (default: the dual benchmark)."""
    std = top.child("standard")
    for key in std.data:
        if key not in STANDARD_KEYS:
            raise CaseFileError(top.file, std.key(key), f"one of {', '.join(STANDARD_KEYS)}", key)
    acc = std.get("acc", str, f"one of {', '.join(ACC_STANDARDS)}", "double_bm")
    if acc not in ACC_STANDARDS:
        raise CaseFileError(top.file, std.key("acc"), f"one of {', '.join(ACC_STANDARDS)}", acc)
    golden = std.get("golden", str, "float64", "float64")
    if golden != "float64":
        raise CaseFileError(top.file, std.key("golden"), "float64 (the standard's golden)", golden)
    out = {"acc": acc, "golden": golden, "benchmark": std.get("benchmark", str, "a backend name", "torch")}
    if "max_atol" in std.data:
        out["max_atol"] = str(_number(std, "max_atol", 0.0))
    if "perf" in std.data:
        out["perf"] = str(std.data["perf"])
    return out


def load_rows(path: Path, data) -> Suite:
    """A suite of tileport's own row-wise format, from its parsed YAML (``suite_file.load_suite`` reads it)."""
    top = _Reader(path, data).only(*TOP_KEYS)
    tensors, attrs = _inputs(path, top.get("inputs", list, "a list of inputs"))
    return Suite(
        file=path,
        name=top.get("name", str, "the operator's name"),
        api=top.get("api", str, "the dotted name of the API under test"),
        backward=top.get("backward", bool, "true or false", False),
        outputs=tuple(top.get("outputs", list, "a list of output names")),
        grad_outputs=tuple(top.get("grad_outputs", list, "a list of gradient names", [])),
        standard=_standard(top),
        levels=_levels(top),
        tensors=tensors,
        attrs=attrs,
        extra_share=_share(top),
    )


def _share(top: _Reader) -> float:
    share = _number(top, "extra_share", 0.0)
    if not 0.0 <= share <= 1.0:
        raise CaseFileError(top.file, "extra_share", "a share from 0 to 1", share)
    return share
