"""A general operator's signature for ``tileport scaffold``: its tensors by named dimensions, from the command line
(``--inputs "q:[B,T,H,D],k:[B,T,Hk,D]?,cos:[T,R/2]:nograd,pos:[B,T]:index?" --outputs "q_out:[B,T,H,D]"
--where "R <= D"``) or from an operator declared so (``--like OP``); the backward a new one starts from; and
the sizes its example, tests and suite draw every dimension at (the primary's from a shape, the others from
those, so that the constraints hold).

An item is ``NAME:[SHAPE]`` (the dims grammar: ``tileport.ops.dims.shape``), then ``:``-separated words: a dtype
class (``float``, ``int64``, ``int32``, ``index``, ``bool``) or ``like:OTHER``, ``nograd``, an integer tensor's
range ``in[LOW,HIGH)``; a trailing ``?`` marks an optional input. The first input is the primary, ``float grad``;
other floating inputs are ``like:<primary> grad`` unless said otherwise; integer ones have no gradient; outputs
are ``like:<primary>`` unless said otherwise.
"""

from __future__ import annotations

import itertools
import math
import re
from dataclasses import dataclass

from ..ops import dims
from ..ops import spec as s
from ..ops.dims import Declaration, TensorDecl
from ..ops.dims.decl import INTEGER
from ..ops.interface.declared import general
from ..ops.interface.layout import DeclarationError
from .signature import Signature, SignatureError, from_spec, parse_attrs

RESERVED = ("backend", "out", "output_dtype")
WORDS = "float, int64, int32, index, bool, like:OTHER, nograd, in[LOW,HIGH)"
ITEM_HELP = f"NAME:[SHAPE], then :-separated words ({WORDS}), a trailing ? for an optional input"
_ITEM = re.compile(r"(?P<name>[^:\[\]]*?)\s*:\s*(?P<shape>\[[^\]]*\])(?P<rest>.*)", re.DOTALL)
_RANGE = re.compile(r"in\s*\[\s*(?P<low>[^,\s]+)\s*,\s*(?P<high>[^)\s]+)\s*\)")


def is_general(text: str | None) -> bool:
    """An ``--inputs``/``--outputs`` value by named dimensions (it has a shape in brackets)."""
    return text is not None and "[" in text


def split_items(text: str) -> list[str]:
    """The comma-separated items of ``text``, the commas inside a shape or a range kept:
    ``q:[B,T,D],pos:[B,T]:index:in[0,T)`` -> ``q:[B,T,D]``, ``pos:[B,T]:index:in[0,T)``."""
    items, depth, current = [], 0, []
    for ch in text:
        if ch == "[":
            depth += 1
        elif ch in "])" and depth:
            depth -= 1
        if ch == "," and depth == 0:
            items.append("".join(current))
            current = []
        else:
            current.append(ch)
    items.append("".join(current))
    return [i.strip() for i in items if i.strip()]


@dataclass(frozen=True)
class _Item:
    """One parsed item before it becomes a declaration (defaults need the other items)."""

    text: str
    name: str
    shape: str
    dtype: str | None
    grad: bool | None  # None: the default for its dtype
    optional: bool
    range: tuple[str, str] | None


def _parse_item(item: str, what: str) -> _Item:
    optional = item.endswith("?")
    body = item[:-1].rstrip() if optional else item
    m = _ITEM.fullmatch(body)
    if m is None or (m["rest"].strip() and not m["rest"].lstrip().startswith(":")):
        raise SignatureError(f"--{what}: {item!r} is not {ITEM_HELP}")
    name = m["name"].strip()
    if not name.isidentifier():
        raise SignatureError(f"--{what}: {item!r}: the name {name!r} is not an identifier")
    words = [w.strip() for w in m["rest"].split(":")][1:]
    dtype, grad, ranged = None, None, None
    i = 0
    while i < len(words):
        w = words[i]
        if w in dims.CLASSES:
            dtype = w
        elif w == "like" and i + 1 < len(words):
            dtype = f"like:{words[i + 1]}"
            i += 1
        elif w in ("grad", "nograd"):
            grad = w == "grad"
        elif w == "optional":
            optional = True
        elif _RANGE.fullmatch(w):
            ranged = (_RANGE.fullmatch(w)["low"], _RANGE.fullmatch(w)["high"])
        else:
            raise SignatureError(f"--{what}: {item!r}: unknown word {w!r} (one of {WORDS})")
        i += 1
    return _Item(item, name, m["shape"], dtype, grad, optional, ranged)


def _line(it: _Item, dtype: str, grad: bool) -> str:
    """The item as the one-line declaration OpSpec takes."""
    line = f"{it.name}: {it.shape} {dtype}" + " grad" * grad + " optional" * it.optional
    return line + (f" in [{it.range[0]}, {it.range[1]})" if it.range else "")


def _decl(it: _Item, what: str, line: str) -> TensorDecl:
    try:
        return dims.decl(line)
    except ValueError as exc:
        raise SignatureError(f"--{what}: {it.text!r}: {exc}") from None


def _root_class(items: dict[str, _Item], name: str, primary: str) -> str | None:
    """The dtype class at the end of ``name``'s ``like:`` chain (the primary's is float; None: unknown)."""
    seen = set()
    while name in items and name not in seen:
        seen.add(name)
        it = items[name]
        if name == primary:
            return it.dtype if it.dtype and not it.dtype.startswith("like:") else "float"
        if it.dtype is None:
            return "float"
        if not it.dtype.startswith("like:"):
            return it.dtype
        name = it.dtype[5:]
    return None


def parse_inputs(text: str) -> tuple[TensorDecl, ...]:
    """``--inputs`` by named dimensions as declarations (module docstring: the defaults)."""
    items = [_parse_item(i, "inputs") for i in split_items(text)]
    if not items:
        raise SignatureError("--inputs: no tensors given")
    first = items[0]
    if first.optional or first.dtype not in (None, "float"):
        raise SignatureError(
            f"--inputs: the first input is the primary, a required floating tensor; got {first.text!r}"
        )
    names = [it.name for it in items]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise SignatureError(f"--inputs: names used twice: {', '.join(twice)}")
    by_name = {it.name: it for it in items}
    out = []
    for k, it in enumerate(items):
        if it.range and it.dtype not in INTEGER:
            raise SignatureError(
                f"--inputs: {it.text!r}: a value range belongs to an integer tensor (int64, int32, index)"
            )
        if k == 0:
            dtype = "float"
        elif it.dtype is None:
            dtype = f"like:{first.name}"
        else:
            dtype = it.dtype
        floating = _root_class(by_name, it.name, first.name) == "float"
        if it.grad and not floating:
            raise SignatureError(f"--inputs: {it.text!r}: only a floating tensor has a gradient")
        grad = floating if it.grad is None else it.grad
        out.append(_decl(it, "inputs", _line(it, dtype, grad)))
    return tuple(out)


def parse_outputs(text: str, primary: str) -> tuple[TensorDecl, ...]:
    """``--outputs`` by named dimensions: each ``like:<primary>`` unless its words say otherwise."""
    items = [_parse_item(i, "outputs") for i in split_items(text)]
    if not items:
        raise SignatureError("--outputs: no tensors given")
    out = []
    for it in items:
        if it.grad is not None or it.range:
            raise SignatureError(
                f"--outputs: {it.text!r}: an output takes a dtype and ? only (its gradient is d{it.name})"
            )
        out.append(_decl(it, "outputs", _line(it, it.dtype or f"like:{primary}", False)))
    return tuple(out)


def parse_where(text: str) -> tuple[str, ...]:
    """``--where "R <= D, R % 2 == 0"``: the constraints, each parsed (``tileport.ops.dims.constraint``)."""
    out = []
    for c in filter(None, (p.strip() for p in re.split(r"[,;]", text))):
        try:
            out.append(str(dims.constraint(c)))
        except ValueError as exc:
            raise SignatureError(f"--where: {c!r}: {exc}") from None
    return tuple(out)


def general_attrs(attrs: tuple[s.Attr, ...]) -> tuple[s.Attr, ...]:
    """Attributes of a general operator: a ``dim`` is a plain int there (no reduced dimension to move)."""
    return tuple(s.Attr(a.name, a.default, "an int", s.INT) if a.kind == s.DIM else a for a in attrs)


def root_class(t: TensorDecl, decls: dict[str, TensorDecl]) -> str:
    """The dtype class at the end of ``t``'s ``like:`` chain (``decls``: the tensors by name)."""
    while t.like is not None:
        t = decls[t.like]
    return t.dtype


def floating(t: TensorDecl, decls: dict[str, TensorDecl]) -> bool:
    """Whether ``t``'s dtype class (its ``like:`` chain followed) is floating."""
    return root_class(t, decls) == "float"


def default_backward(inputs, attrs, outputs) -> tuple[s.Backward, tuple[TensorDecl, ...]]:
    """The backward a general operator starts from: it takes the output gradients ``d<output>`` (each in its
    output's shape; the floating outputs') and every input, with every attribute; it gives ``d<input>`` for each
    input with a gradient, in its shape and dtype, optional where the input is."""
    every = {t.name: t for t in (*inputs, *outputs)}
    douts = tuple(f"d{t.name}" for t in outputs if floating(t, every))
    grads = tuple(TensorDecl(f"d{t.name}", t.shape, f"like:{t.name}", optional=t.optional) for t in inputs if t.grad)
    return s.Backward((*douts, *(t.name for t in inputs)), tuple(a.name for a in attrs)), grads


def as_spec(name: str, sig: Signature) -> s.OpSpec:
    """An OpSpec of the signature alone (no math): what the generator and the checks read of it."""
    return s.OpSpec(
        name=name,
        summary="",
        math="",
        inputs=sig.inputs,
        attrs=sig.attrs,
        outputs=sig.outputs,
        grads=sig.grads,
        backward=sig.backward,
        where=sig.where,
        composite=lambda *a, **k: None,
        example=None,
        bytes_moved=None,
    )


def check(sig: Signature, name: str = "op") -> None:
    """The signature is one the interface can be generated from; SignatureError naming the item otherwise."""
    names = [t.name for t in sig.inputs + sig.outputs] + [a.name for a in sig.attrs]
    dup = sorted({n for n in names if names.count(n) > 1} | (set(RESERVED) & set(names)))
    if dup:
        raise SignatureError(f"names used twice or reserved: {', '.join(dup)}")
    if not sig.grads:
        raise SignatureError("--inputs: no input has a gradient (an operator has a backward: drop nograd from one)")
    attrs = tuple(a.name for a in sig.attrs)
    try:
        Declaration(sig.inputs, (), (), attrs)
    except ValueError as exc:
        raise SignatureError(f"--inputs: {exc}") from None
    for t in sig.outputs:
        try:
            Declaration(sig.inputs, (t,), (), attrs)
        except ValueError as exc:
            raise SignatureError(f"--outputs: {t.name}: {exc}") from None
    try:
        Declaration(sig.inputs, sig.outputs, (), attrs)
    except ValueError as exc:
        raise SignatureError(f"--inputs/--outputs: {exc}") from None
    try:
        Declaration(sig.inputs, sig.outputs, sig.where, attrs)
    except ValueError as exc:
        raise SignatureError(f"--where: {exc}") from None
    required = {k for t in sig.inputs if not t.optional for k in t.shape.names()}
    for t in sig.inputs:
        if t.optional and t.grad and set(t.shape.names()) <= required:
            raise SignatureError(
                f"--inputs: {t.name} is optional with a gradient, but each of its dimensions is one a required input "
                f"has, so its gradient cannot follow it: mark it nograd, or give it a dimension of its own"
            )
    spec = as_spec(name, sig)
    try:
        spec.declaration  # noqa: B018  (every tensor together: the gradients' names too)
        general(spec)
    except (ValueError, DeclarationError) as exc:
        raise SignatureError(str(exc)) from None


def build(
    like: s.OpSpec | None, inputs: str | None, attrs: str | None, outputs: str | None, where: str | None
) -> Signature:
    """A general signature: ``like``'s (a general operator's, or its attributes only) with the given parts
    replaced; the backward the default one unless nothing was replaced."""
    base = like if like is not None and like.general else None
    if inputs is None and attrs is None and outputs is None and where is None and base is not None:
        return from_spec(base, default_backward)
    if inputs is None and base is None:
        raise SignatureError("give --inputs by named dimensions (NAME:[SHAPE]), or --like a general operator")
    ins = parse_inputs(inputs) if inputs is not None else base.inputs
    if outputs is None and base is None:
        raise SignatureError("--outputs: give the outputs by named dimensions too (NAME:[SHAPE]), as --inputs are")
    if outputs is not None and not is_general(outputs):
        raise SignatureError(
            f"--outputs: {outputs!r}: give the outputs by named dimensions (NAME:[SHAPE]), as --inputs are"
        )
    outs = parse_outputs(outputs, ins[0].name) if outputs is not None else base.outputs
    ats = general_attrs(parse_attrs(attrs) if attrs is not None else (like.attrs if like is not None else ()))
    if any(a.kind == s.DTYPE for a in ats):
        raise SignatureError("--attrs: a general operator has no dtype option yet")
    wh = parse_where(where) if where is not None else (base.where if base is not None else ())
    bwd, grads = default_backward(ins, ats, outs)
    sig = Signature(ins, ats, (), outs, bwd, grads, {}, wh)
    check(sig)
    return sig


# ---------------------------------------------------------------- the sizes every dimension is drawn at

LEAD = {
    "small": (2, 3, 2),
    "odd": (3, 17, 1),
    "single": (1, 1, 3),
}  # the tests' dimensions before the last, from the right
LAST = {"small": 8, "odd": 100, "single": 16}  # and their last
RUN = {"small": (2,), "odd": (3, 2), "single": ()}  # a variadic run's sizes
SWEEP_TOTALS = (128, 1 << 18, 1 << 21, 1 << 25)  # the bench's primary shapes: decode-like, in cache, mid, large
IN_CACHE, LARGE = 1, 3  # which of them the speed bar judges


@dataclass(frozen=True)
class Sizing:
    """How every dimension is sized from the primary's: ``rules`` (another dimension -> the primary's dimension it
    equals, or a fixed size), the tests' sizes of every dimension, and the bench's shapes of the primary."""

    primary: TensorDecl
    rules: dict[str, str | int | tuple]
    tests: tuple[dict[str, int | tuple], ...]
    sweep: tuple[tuple[int, ...], ...]
    units: dict[str, int]  # each single dimension's size is a multiple of its unit

    def rule_src(self, key: str, binding: str = "b") -> str:
        """A rule as the source of the spec's ``sizes``: ``b.size("D")`` (rounded down to the dimension's unit
        where the one it follows has another: R of an odd D is D - 1) or a literal."""
        rule, unit = self.rules[key], self.units.get(key, 1)
        if not isinstance(rule, str):
            return repr(rule)
        size = f'{binding}.size("{rule}")'
        return f"{size} // {unit} * {unit}" if self.units.get(rule, 1) % unit else size


def units_of(decl: Declaration) -> dict[str, int]:
    """Each single dimension's size must be a multiple of this (every ``NAME/k`` item whole)."""
    units: dict[str, int] = {}
    for t in decl.tensors:
        for d in t.shape.items:
            if d.value is None and not d.variadic:
                units[d.key] = math.lcm(units.get(d.key, 1), d.div)
    return units


def _up(value: int, unit: int) -> int:
    return max(unit, -(-value // unit) * unit)


def _keys(primary: TensorDecl) -> tuple[list[str], list[str]]:
    """The primary's single dimensions and its variadic run's key (if any), in order."""
    keys = list(primary.shape.names())
    return [k for k in keys if not k.startswith("*")], [k for k in keys if k.startswith("*")]


def _primary_profile(
    primary: TensorDecl, units: dict[str, int], lead: tuple[int, ...], last: int, run: tuple[int, ...]
) -> dict:
    """The primary's dimensions for a test: the last ``last``, those before it ``lead`` from the right, a run
    ``run``; each rounded up to its unit."""
    singles, runs = _keys(primary)
    out: dict = {k: run for k in runs}
    for j, k in enumerate(reversed(singles)):
        out[k] = _up(last if j == 0 else lead[min(j - 1, len(lead) - 1)], units.get(k, 1))
    return out


def _sweep_profile(primary: TensorDecl, units: dict[str, int], total: int) -> dict:
    """The primary's dimensions for a bench shape of about ``total`` elements: the last 128, the one before it up
    to 16 (heads), the one before that up to 1024 (tokens), the run or the first dimension the rest."""
    singles, runs = _keys(primary)
    out: dict = {}
    rest = total
    if len(singles) == 1 and not runs:
        out[singles[0]] = total
        rest = 1
    elif singles:
        out[singles[-1]] = min(128, total)
        rest = max(1, total // out[singles[-1]])
    inner = singles[:-1] if runs else singles[1:-1]
    for j, k in enumerate(reversed(inner)):
        out[k] = min(rest, (16, 1024)[j]) if j < 2 else 1
        rest = max(1, rest // out[k])
    if runs:
        out[runs[0]] = (rest,)
    elif len(singles) > 1:
        out[singles[0]] = rest
    return {k: _up(v, units.get(k, 1)) if isinstance(v, int) else v for k, v in out.items()}


def _shape(primary: TensorDecl, sizes: dict) -> tuple[int, ...]:
    return dims.bind_sizes((primary,), {k: sizes[k] for k in primary.shape.names()}).shape_of(primary.name)


def _candidates(key: str, primary_keys: list[str], unit: int) -> list:
    """What another dimension may equal: a primary dimension sharing its first letter (Hk: H, T_ro: T), the
    primary's last, its others, then small sizes."""
    if key.startswith("*"):
        return [k for k in primary_keys if k.startswith("*")] + [(), (2,)]
    singles = [k for k in primary_keys if not k.startswith("*")]
    named = [k for k in singles if k[0] == key[0]] + singles[-1:] + singles
    return list(dict.fromkeys(named)) + [unit * m for m in (1, 2, 4, 8, 16)]


def _fits(decl: Declaration, sizes: dict, units: dict[str, int], attrs: dict) -> bool:
    """Every size whole and the constraints held (those whose names are all given)."""
    if any(isinstance(v, int) and v % units.get(k, 1) for k, v in sizes.items()):
        return False
    try:
        dims.bind_sizes(decl, sizes, attrs)
    except ValueError:
        return False
    return True


def _variants(profile: dict) -> list[dict]:
    """The profile, then with one dimension (or every one) multiplied by 2, 4 or 8 or rounded up to a multiple of a
    power of two: for constraints among the primary's dimensions."""
    out = [profile]
    singles = [k for k, v in profile.items() if isinstance(v, int)]
    changes = [lambda v, f=f: v * f for f in (2, 4, 8)] + [lambda v, m=m: _up(v, m) for m in (2, 4, 8, 16, 32, 64, 128)]
    for change in changes:
        out += [profile | {k: change(profile[k])} for k in singles]
        out.append(profile | {k: change(profile[k]) for k in singles})
    return out


def sizing(sig: Signature) -> Sizing:
    """Every dimension's sizes for the tests and the bench: the primary's from fixed profiles (adjusted where a
    constraint between them asks), each other one equal to a primary dimension or a small constant, the first
    choice under which every constraint holds at every profile. SignatureError when none does."""
    decl = Declaration(sig.inputs, sig.outputs + sig.grads, sig.where, tuple(a.name for a in sig.attrs))
    attrs = {a.name: a.default for a in sig.attrs}
    primary = sig.inputs[0]
    units = units_of(decl)
    pkeys = list(primary.shape.names())
    others = [k for k in decl.dims() if k not in pkeys]
    profiles = [_primary_profile(primary, units, LEAD[n], LAST[n], RUN[n]) for n in LEAD]
    profiles += [_sweep_profile(primary, units, total) for total in SWEEP_TOTALS]
    fixed = []
    for p in profiles:
        ok = next((v for v in _variants(p) if _fits(decl, v, units, attrs)), None)
        if ok is None:
            raise SignatureError(
                f"--where: no sizes of {primary.name}'s dimensions found that satisfy {', '.join(sig.where)}"
            )
        fixed.append(ok)
    choices = [_candidates(k, pkeys, units.get(k, 1)) for k in others]
    order = decl.dims()
    for n, combo in enumerate(itertools.product(*choices)):
        if n > 20000:
            break
        rules = dict(zip(others, combo))
        full = [
            {k: (p | {o: p[r] if isinstance(r, str) else r for o, r in rules.items()})[k] for k in order} for p in fixed
        ]
        if all(_fits(decl, f, units, attrs) for f in full):
            k = len(LEAD)
            return Sizing(primary, rules, tuple(full[:k]), tuple(_shape(primary, p) for p in fixed[k:]), units)
    said = ", ".join(sig.where) or "the shapes"
    raise SignatureError(
        f"--where: no sizes found for {', '.join(others)} (each equal to one of {primary.name}'s dimensions or a "
        f"small constant) that satisfy {said}"
    )
