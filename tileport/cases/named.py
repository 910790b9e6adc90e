"""The suite format of an operator declared by named dimensions, checked against its declaration when loaded.

Besides the keys every suite has (name, api, backward, outputs, grad_outputs, standard, levels, inputs):

    dims:                                # every dimension of the declaration, drawn in this order
      B: [1, 4]                          # a range [low, high], both included
      Hq: {choices: [1, 2, 4, 8]}
      R: {range: [0, D], step: 2}        # bounds may read the dimensions above (names, ints, + - * //)
      T_ro:                              # options, taken by weight
        - {range: [T, 2*T + 8], weight: 4}
        - {range: [0, T], weight: 1}
      "*batch": {ranks: [0, 1, 2], range: [1, 8]}   # a variadic run: its ranks in turn, each item by the range
    where: ["Hq % Hk == 0"]              # constraints besides the declaration's (optional)
    max_length: 65536                    # elements of a generalized case's largest tensor
    base: {B: 2, T: 3, ...}              # the special scenarios' sizes (each dimension 0 in turn, inf/nan fills)
    fixed: [{B: 1, T: 128, ...}]         # sizes every level starts with (optional)
    inputs:
      - {name: q, type: tensor, dtypes: {values: [float16, bfloat16, float32]}, boundary: {...}}
      - {name: k, type: tensor, required: false, omit: 0.25}   # an optional input left out in 25% of the cases
      - {name: position_ids, type: tensor, required: false, dtypes: {values: [int64, int32]},
         values: {kind: positions, low: 0, high: T_ro, outside: 0.1}}
      - {name: interleaved, type: attrs, values: [false, true]}

Every input the declaration has is listed; the first floating one holds the case dtypes and the boundary flags,
the other floating ones take the case's dtype; integer ones their own dtypes and a value rule (``values``:
``index``, ``positions`` or ``lengths``, see ``schema.IntRule``); bool ones are masks at even odds. Output
gradients are not listed: each is drawn in its output's shape where the output is present.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import torch

from ..dtypes import stat_dtype
from ..ops import dims as d
from ..ops.catalog import specs
from .schema import (
    BOUNDARY_FLAGS,
    DOMAIN_KINDS,
    TOP_KEYS,
    AttrInput,
    CaseFileError,
    DimOption,
    DimRule,
    Domain,
    IntRule,
    Suite,
    TensorInput,
    _dtypes,
    _levels,
    _number,
    _Reader,
    _standard,
)
from .sizes import expression

NAMED_KEYS = (*TOP_KEYS, "dims", "where", "max_length", "base", "fixed")
INT_KINDS = ("index", "positions", "lengths", "offsets")
INT_DTYPES = {"int64": torch.int64, "int32": torch.int32, "bool": torch.bool}


def root_class(declaration: d.Declaration, name: str) -> str:
    """A declared tensor's dtype class at the end of its ``like:`` chain (``float``, ``index``, ``bool``...)."""
    t = declaration[name]
    while t.like is not None:
        t = declaration[t.like]
    return t.dtype


def floating(declaration: d.Declaration, name: str) -> bool:
    """Whether a declared tensor is floating (its ``like:`` chain ends at a floating class or a statistic's)."""
    cls = root_class(declaration, name)
    return cls == "float" or cls.startswith("stat:")


def case_dtype(declaration: d.Declaration, name: str, dtype: torch.dtype) -> torch.dtype:
    """A floating tensor's dtype in a case of ``dtype``: that dtype, or its statistics dtype (fp32, fp64 for fp64)
    for one declared ``stat:`` (a loss' gradient ``dloss`` like its output)."""
    return stat_dtype(dtype) if root_class(declaration, name).startswith("stat:") else dtype


def _bound(r: _Reader, key: str, value: Any, known: list[str]) -> int | str:
    """A bound: an int, or an expression over ``known`` names."""
    try:
        names = expression(value)
    except ValueError as exc:
        expected = "an int or an expression over the dimensions above (names, ints, + - * //)"
        raise CaseFileError(r.file, r.key(key), expected, value) from exc
    unknown = [n for n in names if n not in known]
    if unknown:
        expected = f"a bound over the dimensions above it and the attributes ({', '.join(known) or 'none'})"
        raise CaseFileError(r.file, r.key(key), expected, unknown[0])
    return value


def _option(r: _Reader, data: Any, known: list[str], variadic: bool) -> DimOption:
    """One option of a dimension: ``[low, high]``, ``{range: [low, high], step, weight}`` or ``{choices, weight}``."""
    if isinstance(data, list):
        data = {"range": data}
    o = _Reader(r.file, data, r.prefix).only(
        "range", "choices", "step", "weight", "when", *(("ranks",) if variadic else ())
    )
    weight = _number(o, "weight", 1.0)
    if weight <= 0:
        raise CaseFileError(r.file, o.key("weight"), "a positive number", weight)
    when = _when(o)
    if "choices" in o.data:
        return DimOption(choices=o.int_list("choices", 0), weight=weight, when=when)
    pair = o.get("range", list, "a range [low, high] or choices")
    if len(pair) != 2:
        raise CaseFileError(r.file, o.key("range"), "a range [low, high]", pair)
    step = o.get("step", int, "a positive integer", 1)
    if step < 1:
        raise CaseFileError(r.file, o.key("step"), "a positive integer", step)
    return DimOption(
        _bound(o, "range", pair[0], known), _bound(o, "range", pair[1], known), step, weight=weight, when=when
    )


def _when(o: _Reader) -> tuple[str, bool] | None:
    """An option's condition: ``when: NAME`` (the optional input NAME present) or ``when: no NAME`` (left out)."""
    if "when" not in o.data:
        return None
    text = o.get("when", str, "an optional input's name, or 'no NAME'")
    words = text.split()
    if len(words) == 2 and words[0] == "no":
        return words[1], False
    if len(words) == 1:
        return words[0], True
    raise CaseFileError(o.file, o.key("when"), "an optional input's name, or 'no NAME'", text)


def _dims(top: _Reader, declaration: d.Declaration, attrs: list[str]) -> tuple[DimRule, ...]:
    """Every dimension of the declaration, each once, with its options (and ranks for a variadic run)."""
    dims = top.child("dims")
    declared = declaration.dims()
    rules: list[DimRule] = []
    for name in dims.data:
        if name not in declared:
            raise CaseFileError(
                top.file, dims.key(str(name)), f"a dimension of the declaration ({', '.join(declared)})", name
            )
        raw, variadic = dims.data[name], str(name).startswith("*")
        known = [*attrs, *(r.name for r in rules if not r.ranks)]
        options = raw if isinstance(raw, list) and raw and all(isinstance(x, dict) for x in raw) else [raw]
        parsed = tuple(
            _option(_Reader(top.file, {}, dims.key(f"{name}[{i}]")), x, known, variadic) for i, x in enumerate(options)
        )
        ranks = ()
        if variadic:
            r = _Reader(top.file, options[0] if isinstance(options[0], dict) else {}, dims.key(str(name)))
            ranks = r.int_list("ranks", 0)
        rules.append(DimRule(str(name), parsed, ranks))
    missing = [k for k in declared if k not in dims.data]
    if missing:
        raise CaseFileError(
            top.file, "dims", f"a rule for every dimension of the declaration (missing: {', '.join(missing)})"
        )
    return tuple(rules)


def _sizes(top: _Reader, key: str, data: Any, rules: tuple[DimRule, ...], declaration: d.Declaration, where) -> dict:
    """A mapping of every dimension to its size (a list for a variadic run), the constraints checked."""
    r = _Reader(top.file, data, key)
    names = [rule.name for rule in rules]
    r.only(*names)
    out = {}
    for rule in rules:
        v = r.get(rule.name, list if rule.ranks else int, "a list of sizes" if rule.ranks else "a size >= 0")
        out[rule.name] = tuple(v) if rule.ranks else v
    try:
        d.bind_sizes(declaration, out, {}, where)
    except ValueError as exc:
        raise CaseFileError(top.file, key, f"sizes the declaration takes ({exc})", data) from None
    return out


def _int_rule(r: _Reader, t: d.TensorDecl, known: list[str]) -> IntRule:
    """An integer tensor's ``values``; default ``index`` over the declaration's own range."""
    if "values" not in r.data:
        if not t.ranged:
            raise CaseFileError(
                r.file, r.key("values"), f"a value rule for the integer tensor {t.name} ({', '.join(INT_KINDS)})"
            )
        return IntRule("index")
    v = r.child("values").only("kind", "low", "high", "outside", "ignore")
    kind = v.get("kind", str, f"one of {', '.join(INT_KINDS)}")
    if kind not in INT_KINDS:
        raise CaseFileError(r.file, v.key("kind"), f"one of {', '.join(INT_KINDS)}", kind)
    if kind == "index" and not t.ranged:
        raise CaseFileError(
            r.file, v.key("kind"), f"positions or lengths ({t.name} declares no range 'in [LOW, HIGH)')", kind
        )
    low = _bound(v, "low", v.data["low"], known) if "low" in v.data else (0 if kind != "index" else None)
    high = _bound(v, "high", v.data["high"], known) if "high" in v.data else None
    if kind != "index" and high is None:
        raise CaseFileError(r.file, v.key("high"), "the upper bound (an int or an expression over the dimensions)")
    shares = {}
    for key in ("outside", "ignore"):
        shares[key] = _number(v, key, 0.0)
        if not 0.0 <= shares[key] <= 1.0:
            raise CaseFileError(r.file, v.key(key), "a share from 0 to 1", shares[key])
    if shares["ignore"] and not t.allow:
        raise CaseFileError(
            r.file, v.key("ignore"), f"no share: {t.name} declares no allowed value ('or ignore_index')"
        )
    return IntRule(kind, low, high, shares["outside"], shares["ignore"])


def _domain(r: _Reader) -> Domain | None:
    """A floating tensor's ``domain``: {kind: nonpositive, low, zeros} | {kind: unit_interval} | {kind: unit_rows,
    unless: ATTR}."""
    if "domain" not in r.data:
        return None
    v = r.child("domain").only("kind", "low", "zeros", "unless")
    kind = v.get("kind", str, f"one of {', '.join(DOMAIN_KINDS)}")
    if kind not in DOMAIN_KINDS:
        raise CaseFileError(r.file, v.key("kind"), f"one of {', '.join(DOMAIN_KINDS)}", kind)
    zeros = _number(v, "zeros", 0.0)
    if not 0.0 <= zeros <= 1.0:
        raise CaseFileError(r.file, v.key("zeros"), "a share from 0 to 1", zeros)
    low = _number(v, "low", -math.inf)
    unless = v.get("unless", str, "a boolean attribute's name", None)
    return Domain(kind, low, zeros, unless)


def _tensor(r: _Reader, t: d.TensorDecl, first: bool, declaration: d.Declaration, known: list[str]) -> TensorInput:
    """One tensor input checked against its declaration."""
    required = r.get("required", bool, "true or false", True)
    if not required and not t.optional:
        raise CaseFileError(
            r.file, r.key("required"), f"true: the declaration does not make {t.name} optional", required
        )
    omit = r.get("omit", (int, float), "a share from 0 to 1", None)
    if omit is not None and (required or not 0 <= omit <= 1):
        raise CaseFileError(r.file, r.key("omit"), "a share from 0 to 1, on an input that is not required", omit)
    if floating(declaration, t.name):
        for key, why in (
            ("values", "a floating tensor takes the standard's value mix (its valid values: domain)"),
            ("boundary", "only the first floating input holds them"),
            ("dtypes", "the floating tensors take the case's dtype, which the first one's dtypes give"),
        ):
            if key in r.data and not (first and key != "values"):
                raise CaseFileError(r.file, r.key(key), f"no {key} ({why})", r.data[key])
        domain = _domain(r)
        if not first:
            return TensorInput(t.name, required, (), omit=omit, domain=domain)
        b = r.child("boundary", {})
        flags = {}
        for flag, value in b.data.items():
            if flag not in BOUNDARY_FLAGS or not isinstance(value, bool):
                raise CaseFileError(r.file, b.key(flag), f"one of {', '.join(BOUNDARY_FLAGS)}: true/false", value)
            flags[flag] = value
        return TensorInput(t.name, required, (), _dtypes(r), boundary=flags, omit=omit, domain=domain)
    cls = root_class(declaration, t.name)
    names = [n for n, dt in INT_DTYPES.items() if dt in d.CLASSES[cls][0]]
    given = r.child("dtypes", {"values": names[:1]}).only("values").get("values", list, f"a list of {', '.join(names)}")
    if not given or any(n not in names for n in given):
        raise CaseFileError(
            r.file, r.key("dtypes.values"), f"dtype names from {', '.join(names)} (what {t.dtype} admits)", given
        )
    if "boundary" in r.data:
        raise CaseFileError(
            r.file, r.key("boundary"), "no boundary flags on an integer tensor (special scenarios fill floating ones)"
        )
    dtypes = tuple(INT_DTYPES[n] for n in dict.fromkeys(given))
    if cls == "bool":  # a mask: each element True or False at even odds
        if "values" in r.data:
            raise CaseFileError(
                r.file, r.key("values"), "no value rule for a bool tensor (its elements are drawn at even odds)"
            )
        return TensorInput(t.name, required, (), dtypes, omit=omit)
    return TensorInput(t.name, required, (), dtypes, omit=omit, values=_int_rule(r, t, known))


def load_named(path: Path, data: dict) -> Suite:
    """A suite by named dimensions (the module docstring), checked against its operator's declaration."""

    top = _Reader(path, data).only(*NAMED_KEYS)
    name = top.get("name", str, "the operator's name")
    spec = specs().get(name)
    if spec is None:
        raise CaseFileError(
            path, "name", f"an operator ({', '.join(specs())}): a suite by named dimensions reads its declaration", name
        )
    declaration = spec.declaration
    items = top.get("inputs", list, "a list of inputs")
    attr_names = [str(x.get("name")) for x in items if isinstance(x, dict) and x.get("type") == "attrs"]
    rules = _dims(top, declaration, attr_names)
    known = [r.name for r in rules if not r.ranks]
    where = tuple(top.get("where", list, "a list of constraints such as 'Hq % Hk == 0'", []))
    for i, text in enumerate(where):
        try:
            c = d.constraint(text)
        except (TypeError, ValueError) as exc:
            raise CaseFileError(
                path, f"where[{i}]", "a constraint over the dimensions such as 'Hq % Hk == 0'", text
            ) from exc
        if any(n not in known + attr_names for n in c.names):
            raise CaseFileError(
                path, f"where[{i}]", f"a constraint over the dimensions ({', '.join(known)}) and attributes", text
            )
    tensors, attrs = [], []
    inputs = {t.name: t for t in spec.declaration.inputs}
    for i, item in enumerate(items):
        r = _Reader(path, item, f"inputs[{i}]").only(
            "name", "type", "required", "values", "weights", "dtypes", "boundary", "omit", "domain"
        )
        n, kind = r.get("name", str, "the input's name"), r.get("type", str, "tensor or attrs")
        if kind == "attrs":
            values = r.get("values", list, "a non-empty list of values")
            weights = tuple(r.get("weights", list, "a weight per value", []))
            if not values or (weights and len(weights) != len(values)):
                raise CaseFileError(path, r.key("values"), "a non-empty list of values (and as many weights)", values)
            attrs.append(AttrInput(n, r.get("required", bool, "true or false", True), tuple(values), weights=weights))
        elif kind == "tensor":
            if n not in inputs:
                raise CaseFileError(path, r.key("name"), f"an input of {name}'s declaration ({', '.join(inputs)})", n)
            first = floating(declaration, n) and not any(t.dtypes and t.dtypes[0].is_floating_point for t in tensors)
            tensors.append(_tensor(r, inputs[n], first, declaration, known))
        else:
            raise CaseFileError(path, r.key("type"), "tensor or attrs", kind)
    missing = [n for n in inputs if n not in {t.name for t in tensors}]
    if missing:
        raise CaseFileError(path, "inputs", f"every input of {name}'s declaration (missing: {', '.join(missing)})")
    if float(top.get("extra_share", (int, float), "0", 0)):
        raise CaseFileError(
            path, "extra_share", "0: a suite by named dimensions has no extra cases yet", top.data["extra_share"]
        )
    max_length = top.get("max_length", int, "a positive integer (elements of a case's largest tensor)")
    if max_length < 1:
        raise CaseFileError(path, "max_length", "a positive integer", max_length)
    outputs = tuple(top.get("outputs", list, "a list of output names"))
    grads = tuple(top.get("grad_outputs", list, "a list of gradient names", []))
    for key, given, declared in (("outputs", outputs, spec.outputs), ("grad_outputs", grads, spec.grads)):
        unknown = [g for g in given if g not in {t.name for t in declared}]
        if unknown:
            raise CaseFileError(
                path,
                key,
                f"names of {name}'s {key.replace('_', ' ')} ({', '.join(t.name for t in declared)})",
                unknown[0],
            )
    base = _sizes(top, "base", top.data["base"], rules, declaration, where) if "base" in top.data else {}
    fixed = tuple(
        _sizes(top, f"fixed[{i}]", f, rules, declaration, where)
        for i, f in enumerate(top.get("fixed", list, "a list of sizes", []))
    )
    suite = Suite(
        file=path,
        name=name,
        api=top.get("api", str, "the dotted name of the API under test"),
        backward=top.get("backward", bool, "true or false", False),
        outputs=outputs,
        grad_outputs=grads,
        standard=_standard(top),
        levels=_levels(top),
        tensors=tuple(tensors),
        attrs=tuple(attrs),
        dims=rules,
        where=where,
        max_length=max_length,
        base=base,
        fixed=fixed,
    )
    flags = suite.primary.boundary
    if (flags.get("has_empty") or flags.get("has_infnan")) and not base:
        raise CaseFileError(path, "base", "the special scenarios' sizes (has_empty and has_infnan start from them)")
    return suite
