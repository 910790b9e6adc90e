"""Binding a declaration to tensors: each dimension bound from the first tensor (in declaration order) it appears
in and checked everywhere else, dtype classes and one device checked, constraints checked; the resulting
:class:`Binding` answers the shapes of the tensors not given (outputs, gradients).

Errors (the style of ``tileport.ops._checks``: the tensor named, what was expected, what was got):
TypeError for a non-tensor or a dtype outside the tensor's class; ValueError for a rank, a size, a device or a
constraint; IndexError for an integer value outside its range (``Binding.check_values``).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace

import torch

from ...dtypes import stat_dtype
from .decl import CLASSES, STAT, TensorDecl
from .declaration import Declaration, as_declaration
from .shape import Dim, Shape, parse_shape

Size = int | tuple[int, ...]  # a single dimension's size, or a variadic run's sizes


@dataclass(frozen=True)
class Origin:
    """Where a dimension was bound: the tensor (None: given as a size), the item as written, its size there and
    the tensor's dimensions it spans (first, last)."""

    tensor: str | None
    item: str
    size: Size
    span: tuple[int, int] = (0, 0)

    def __str__(self) -> str:
        if self.tensor is None:
            return f"the sizes give {self.item} = {self.size}"
        return f"{self.tensor} has {self.item} = {self.size} ({_dims(self.span)})"


@dataclass(frozen=True)
class Binding:
    """A declaration's dimensions bound to sizes (``sizes``: ``T`` -> 128, ``*batch`` -> (2, 3)), with the dtypes
    and the device of the tensors bound, and those tensors (for ``check_values``)."""

    declaration: Declaration
    attrs: Mapping[str, object] = field(default_factory=dict)
    sizes: dict[str, Size] = field(default_factory=dict)
    origins: dict[str, Origin] = field(default_factory=dict, repr=False)
    dtypes: dict[str, torch.dtype] = field(default_factory=dict)
    device: torch.device | None = None
    device_of: str | None = field(default=None, repr=False)  # the tensor ``device`` was taken from
    tensors: dict[str, torch.Tensor] = field(default_factory=dict, repr=False)

    def size(self, key: str) -> Size:
        """A dimension's size (``"T"``), or a variadic run's sizes (``"*batch"``, ``"*"``)."""
        if key not in self.sizes:
            raise ValueError(f"{key} is not bound (bound: {', '.join(self.sizes) or 'nothing'})")
        return self.sizes[key]

    def shape_of(self, what: TensorDecl | Shape | str) -> tuple[int, ...]:
        """The shape of a declared tensor (by name or TensorDecl), or of a shape (``"[*, F]"``), from the bound
        dimensions: an output's shape. ValueError for a dimension no given tensor bound."""
        label, shape = self._shape(what)
        out: list[int] = []
        for item in shape.items:
            if item.value is not None:
                out.append(item.value)
                continue
            if item.key not in self.sizes:
                raise ValueError(f"{label} reads {item.key}, which no given tensor binds")
            n = self.sizes[item.key]
            if item.variadic:
                out.extend(n)
            elif (n * item.mul) % item.div:
                raise ValueError(f"{label} has {item} = {n * item.mul / item.div}, not a whole size")
            else:
                out.append(n * item.mul // item.div)
        return tuple(out)

    def numel(self, what: TensorDecl | Shape | str) -> int:
        """How many elements a tensor of that declaration has (bench's bytes_moved, the empty-input rules)."""
        return math.prod(self.shape_of(what))

    def empty(self, what: TensorDecl | Shape | str) -> bool:
        """Whether a tensor of that declaration has no elements."""
        return self.numel(what) == 0

    def dtype(self, name: str, given: Mapping[str, torch.dtype] | None = None) -> torch.dtype:
        """A declared tensor's dtype: ``given``'s, else the bound tensor's, else fixed by its class (``like:``
        followed, ``stat:`` the statistics dtype of its tensor's, int64 for ``index``); ValueError where the class
        leaves it open (``float``)."""
        given = given or {}
        t = self.declaration[name]
        if name in given or name in self.dtypes:
            return given.get(name, self.dtypes.get(name))
        if t.like is not None:
            return self.dtype(t.like, given)
        if t.stat is not None:
            return stat_dtype(self.dtype(t.stat, given))
        fixed = {"int64": torch.int64, "index": torch.int64, "int32": torch.int32, "bool": torch.bool}.get(t.dtype)
        if fixed is None:
            raise ValueError(f"the dtype of {name} ({t.dtype}) is not fixed by its declaration: give it")
        return fixed

    def bind(self, tensors: Mapping[str, torch.Tensor | None], decls: Iterable[TensorDecl | str] = ()) -> Binding:
        """This binding with more tensors bound and checked against it (a backward's ``dy`` against its output's
        shape); ``decls``: declarations of tensors the declaration does not have yet."""
        declaration = self.declaration.plus(decls)
        _known(declaration, tensors)
        return _bind(replace(self, declaration=declaration), [declaration[n] for n in tensors], tensors)

    def check_values(self, names: Iterable[str] | None = None) -> None:
        """The bound integer tensors' values lie in their declared ranges (``names``: only these); IndexError
        naming the first value outside, its position and the range. It reads the data: tensors on the meta
        device are skipped."""
        for t in self.declaration.tensors:
            if t.ranged and t.name in self.tensors and (names is None or t.name in names):
                tensor = self.tensors[t.name]
                if tensor.device.type != "meta":
                    _check_range(self, t, tensor)

    def _shape(self, what: TensorDecl | Shape | str) -> tuple[str, Shape]:
        """What ``shape_of`` was asked for, as (a label for messages, its shape)."""
        if isinstance(what, Shape) or (isinstance(what, str) and what.lstrip().startswith("[")):
            shape = parse_shape(what)
            return f"the shape {shape}", shape
        t = what if isinstance(what, TensorDecl) else self.declaration[what]
        return f"{t.name}'s shape {t.shape}", t.shape

    def _value(self, t: TensorDecl, name: int | str, role: str) -> int | None:
        """A range bound or allowed value: an int as written, a bound dimension's size, or an attribute's value
        (None for an attribute given as None: nothing exempt)."""
        if type(name) is int:
            return name
        if name in self.sizes:
            return self.sizes[name]
        if name not in self.attrs:
            raise ValueError(f"{t.name}'s {role} reads {name}, which no given tensor binds and no attribute gives")
        value = self.attrs[name]
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
            got = type(value).__name__
            raise TypeError(f"{t.name}'s {role} reads the attribute {name}, which must be an int, got {got}")
        return value


def bind(
    decls, tensors: Mapping[str, torch.Tensor | None], attrs: Mapping[str, object] | None = None, where: Iterable = ()
) -> Binding:
    """``tensors`` (by declared name; an optional input may be None or left out, an output is checked where
    given) bound to the declaration ``decls`` (a Declaration, or the inputs' TensorDecls or one-line forms), then
    the constraints ``where`` checked; ``attrs``: the attribute values ranges and constraints read."""
    attrs = dict(attrs or {})
    declaration = as_declaration(decls, where, attrs)
    _known(declaration, tensors)
    given_outputs = [t for t in declaration.outputs if tensors.get(t.name) is not None]
    return _bind(Binding(declaration, attrs), declaration.inputs + tuple(given_outputs), tensors)


def bind_sizes(
    decls, sizes: Mapping[str, Size], attrs: Mapping[str, object] | None = None, where: Iterable = ()
) -> Binding:
    """A binding from sizes chosen for the dimensions (``{"T": 128, "*batch": (2, 3)}``) instead of tensors: what
    a case generator draws, its constraints checked (ValueError for a draw they refuse)."""
    attrs = dict(attrs or {})
    declaration = as_declaration(decls, where, attrs)
    dims = set(declaration.dims())
    checked: dict[str, Size] = {}
    for key, value in sizes.items():
        if key not in dims:
            raise ValueError(f"no tensor declares the dimension {key} (declared: {', '.join(declaration.dims())})")
        checked[key] = _checked_size(key, value)
    binding = Binding(declaration, attrs, checked, {k: Origin(None, k, v) for k, v in checked.items()})
    _check_constraints(binding)
    return binding


def _known(declaration: Declaration, tensors: Mapping) -> None:
    """ValueError for a tensor the declaration does not name (a misspelt keyword)."""
    unknown = [n for n in tensors if n not in declaration]
    if unknown:
        names = ", ".join(t.name for t in declaration.tensors)
        raise ValueError(f"no tensor named {unknown[0]!r} is declared (declared: {names})")


def _checked_size(key: str, value: object) -> Size:
    """A drawn size: an int >= 0, or for a variadic run a tuple of them."""
    variadic = key.startswith("*")
    items = value if variadic and isinstance(value, (tuple, list)) else (value,)
    if (variadic and items is not value) or any(isinstance(v, bool) or not isinstance(v, int) or v < 0 for v in items):
        kind = "a tuple of ints >= 0" if variadic else "an int >= 0"
        raise ValueError(f"the size of {key} must be {kind}, got {value!r}")
    return tuple(items) if variadic else value


def _bind(base: Binding, decls: Iterable[TensorDecl], tensors: Mapping[str, torch.Tensor | None]) -> Binding:
    """``base`` with ``decls``' tensors bound: types and dtype classes first, then ``like:`` dtypes, then shapes
    and the device in declaration order, then the constraints."""
    given: dict[str, tuple[TensorDecl, torch.Tensor]] = {}
    for t in decls:
        tensor = tensors.get(t.name)
        if tensor is None and t.optional:
            continue
        _check_class(t, tensor)
        given[t.name] = (t, tensor)
    dtypes = base.dtypes | {n: tensor.dtype for n, (_, tensor) in given.items()}
    for t, tensor in given.values():
        expected = _known_dtype(base.declaration, dtypes, t.related)
        if t.stat is not None and expected is not None:
            expected = stat_dtype(expected)
        if expected is not None and tensor.dtype != expected:
            what = "the dtype" if t.like is not None else "the statistics dtype"
            raise TypeError(f"{t.name} must have {what} of {t.related} ({expected}), got {tensor.dtype}")
    sizes, origins = dict(base.sizes), dict(base.origins)
    device, device_of = base.device, base.device_of
    for t, tensor in given.values():
        _match(t, tuple(tensor.shape), sizes, origins)
        if device is None:
            device, device_of = tensor.device, t.name
        elif tensor.device != device:
            raise ValueError(
                f"{t.name} must be on {device_of}'s device {device}, got {tensor.device} (tensors must be on one "
                "device)"
            )
    bound = {n: tensor for n, (_, tensor) in given.items()}
    binding = replace(
        base,
        sizes=sizes,
        origins=origins,
        dtypes=dtypes,
        device=device,
        device_of=device_of,
        tensors=base.tensors | bound,
    )
    _check_constraints(binding)
    return binding


def _known_dtype(declaration: Declaration, dtypes: Mapping[str, torch.dtype], name: str | None) -> torch.dtype | None:
    """The dtype of the tensor ``name`` where known: bound, or ``like:`` one bound (dy like y like x: x's), or
    ``stat:`` one bound (dloss like loss, loss stat:input: input's statistics dtype)."""
    if name is None or name in dtypes:
        return dtypes.get(name) if name is not None else None
    t = declaration[name]
    found = _known_dtype(declaration, dtypes, t.related)  # the declaration refuses cycles
    return stat_dtype(found) if found is not None and t.stat is not None else found


def _check_class(t: TensorDecl, tensor: object) -> None:
    """A tensor (None only where optional, and then never here) whose dtype is in its class."""
    if not isinstance(tensor, torch.Tensor):
        either = "None or " if t.optional else ""
        raise TypeError(f"{t.name} must be {either}a torch.Tensor, got {type(tensor).__name__}")
    if t.stat is not None and tensor.dtype not in STAT:
        raise TypeError(f"{t.name} must have the statistics dtype of {t.stat} (float32, float64), got {tensor.dtype}")
    if t.related is None:
        admitted, said = CLASSES[t.dtype]
        if tensor.dtype not in admitted:
            raise TypeError(f"{t.name} must have {said}, got {tensor.dtype}")


def _match(t: TensorDecl, shape: tuple[int, ...], sizes: dict, origins: dict) -> None:
    """Each item of ``t``'s declared shape bound from ``shape`` or checked against its binding."""
    declared = t.shape
    variadic = declared.variadic is not None
    if len(shape) < declared.fixed or (not variadic and len(shape) != declared.fixed):
        least = "at least " if variadic else ""
        plural = "" if declared.fixed == 1 else "s"
        need = f"{least}{declared.fixed} dimension{plural} ({declared})"
        raise ValueError(f"{t.name} must have {need}, got {len(shape)} (shape {shape})")
    extra, at = len(shape) - declared.fixed, 0
    for item in declared.items:
        width = extra if item.variadic else 1
        got = shape[at : at + width] if item.variadic else shape[at]
        _match_item(t, item, got, (at, at + width - 1), sizes, origins)
        at += width


def _match_item(t: TensorDecl, item: Dim, got: Size, span: tuple[int, int], sizes: dict, origins: dict) -> None:
    """One item: a literal checked, a dimension bound where it is first met (solving ``k*F`` and ``R/k``) and
    checked where it is met again."""
    if item.value is not None:
        if got != item.value:
            raise ValueError(f"{t.name} must have size {item.value} in {_dims(span)} ({t.shape}), got {got}")
        return
    here = Origin(t.name, str(item), got, span)
    if item.key not in sizes:
        if not item.variadic and (got * item.div) % item.mul:
            raise ValueError(f"{here}, which is not a multiple of {item.mul}")
        sizes[item.key] = got if item.variadic else got * item.div // item.mul
        origins[item.key] = here
        return
    bound = sizes[item.key]
    expected = bound if item.variadic else bound * item.mul / item.div
    if got != expected:
        first = origins[item.key]
        so = "" if first.item == str(item) else f", so {item} = {_whole(expected)}"
        raise ValueError(f"{here} but {first}{so}")


def _check_constraints(binding: Binding) -> None:
    """Each constraint whose names are all bound (or given as attributes) holds; one reading a dimension no
    given tensor binds (an absent optional tensor's) is skipped."""
    for c in binding.declaration.where:
        values = {}
        for n in c.names:
            value = binding.sizes.get(n, binding.attrs.get(n))
            if value is None:
                break
            if isinstance(value, bool) or not isinstance(value, int):
                got = type(value).__name__
                raise TypeError(f"the constraint {c} reads the attribute {n}, which must be an int, got {got}")
            values[n] = value
        else:
            if not c.holds(values):
                shown = ", ".join(f"{n} = {v}" for n, v in values.items())
                raise ValueError(f"the sizes must satisfy {c}, got {shown}")


def _check_range(binding: Binding, t: TensorDecl, tensor: torch.Tensor) -> None:
    """IndexError for the first value of ``tensor`` outside [low, high) and not among the allowed values."""
    low, high = binding._value(t, t.low, "value range"), binding._value(t, t.high, "value range")
    allowed = {a: v for a in t.allow if (v := binding._value(t, a, "allowed value")) is not None}
    outside = (tensor < low) | (tensor >= high)
    for v in allowed.values():
        outside &= tensor != v
    if not bool(outside.any()):
        return
    position = tuple(int(i) for i in outside.nonzero()[0])
    index = f"[{', '.join(map(str, position))}]" if position else ""
    written, resolved = f"[{t.low}, {t.high})", f"[{low}, {high})"
    text = f"{t.name}{index} = {int(tensor[position])} is outside {written}"
    text += f" = {resolved}" if written != resolved else ""
    if allowed:
        exempt = ", ".join(str(a) if type(a) is int else f"{a} = {v}" for a, v in allowed.items())
        text += f" and is not {exempt}" if len(allowed) == 1 else f" and is none of {exempt}"
    raise IndexError(text)


def _dims(span: tuple[int, int]) -> str:
    """A tensor's dimensions ``first..last`` in words."""
    first, last = span
    return "no dims" if last < first else f"its dim {first}" if first == last else f"its dims {first}-{last}"


def _whole(x: float) -> int | float:
    return int(x) if float(x).is_integer() else x
