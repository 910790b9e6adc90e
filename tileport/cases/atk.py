"""The test kit's (ATK's) own case design YAML, read into a suite.

The format users already have: top-level ``api``, ``api_type``, ``version``, ``name``, ``dtype_numbers``,
``extra_numbers``, ``generate``, ``standard: {acc, perf}`` and ``inputs``, each input with ``name``,
``type: tensor | attr``, ``required``, ``dtypes.values``, ``ranges.valid.values`` (intervals, optional
``weights``), ``ranges.invalid.values``, ``shapes.dim_numbers.values``, ``shapes.dim_values``,
``shapes.max_length`` and ``boundary.has_*`` flags. How it maps onto tileport:

- ``name`` is a tileport operator or a name it answers to (a ``torch.nn.functional`` name, ...): the
  benchmark is the operator's same-dtype torch composite (the standard's reference choice for fused ops); or any
  other function that imports (``torch.max``): it is its own reference (``tileport.reference``), its inputs
  named by its parameters, every tensor of the first tensor's shape;
- inputs are named as the API names its parameters: where ``name`` imports (a torch function, a Python
  function), its signature maps them onto the operator's, with the names users' code has (``input`` is the
  first tensor, ``epsilon`` is eps, ...: ``tileport.external``); ``normalized_shape`` and the like are derived
  from the tensor they describe (an entry for one is read and not drawn);
- ``dtype_numbers`` cases per dtype at every level (the standard's counts where absent); runs per case by
  the standard; ``extra_numbers`` adds tileport's stress cases (``all``: a tenth; a number: that many per
  dtype; 0 or ``none``: none);
- the first tensor carries dtypes and shapes; the others follow the operator's roles (a weight is [D]), so
  they may not declare shapes or other dtypes; a gradient input (``dy``) the backward needs is added;
- a tensor's valid intervals are where its ``uniform`` cases draw from (the standard's other distributions
  apply as they are); an attribute's valid values are intervals (each interval's ends and middle, geometric
  where both ends are positive, are its equivalence classes) or a list of discrete values (each one a class),
  with optional ``weights``; ``dtypes.values`` of an attribute (float, int, bool, str) checks them; invalid
  values become cases the operator must reject.

Keys the kit defines that tileport does not implement (``outputs``, ``shape_distributions``, ...) are errors
saying so; anything else is an error naming the file and the key: nothing is silently ignored.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from .. import external, reference
from ..external import DERIVED, canonical
from ..ops.catalog import specs
from ..precision.standard import ACC_STANDARDS, COUNTS, MAX_ELEMENTS
from .generate import spec_of
from .schema import BOUNDARY_FLAGS, AttrInput, CaseFileError, Level, ShapeRule, Suite, TensorInput, _dtypes, _Reader

TOP = (
    "api",
    "api_type",
    "version",
    "name",
    "dtype_numbers",
    "extra_numbers",
    "generate",
    "standard",
    "inputs",
    "backward",
)
INPUT = ("name", "type", "required", "dtypes", "ranges", "shapes", "boundary")
# keys the kit's format defines that tileport does not implement yet: refused by name, never ignored
NOT_YET = {
    "outputs": "outputs are the operator's own (its spec); a file's output declarations are not supported yet",
    "shape_distributions": (
        "shapes follow the standard's generalization rules; a file's shape distributions are not supported yet"
    ),
    "precision_standard": "the standard's ratio limits per level apply; a file's own thresholds are not supported yet",
    "generate_module": "generator modules are not supported",
}
ATTR_DTYPES = {"float": (int, float), "int": (int,), "bool": (bool,), "str": (str,)}
GENERATORS = ("default", "reduce", "norm")  # shapes with the reduced dimension last: what tileport's operators take
DEFAULT_MAX_LENGTH = 262144
QUICK_CASES = 48


def api_names(api: str, op: str) -> dict[str, str]:
    """{the API's parameter name: the operator's input or attribute (or a derived name such as
    normalized_shape)} for an API that imports (a ``torch.nn.functional`` function), as ``--impl`` maps a
    function's parameters; empty where it does not import (then the file uses the operator's own names)."""

    try:
        fn = external.load_callable(api.rsplit(".", 1)[0] + ":" + api.rsplit(".", 1)[1])[0] if "." in api else None
    except external.ImplError:
        return {}
    if fn is None:
        return {}
    try:
        return external.bind(specs()[op], fn, api, {})
    except external.ImplError:
        return {}


def resolve(name: str, file: Path) -> str | None:
    """The tileport operator an ATK ``name`` means (its own name or one of its aliases), or None where the name
    is a function that imports (``torch.max``: a reference operator, ``tileport.reference``)."""
    for op, spec in specs().items():
        if name == op or name in spec.aliases:
            return op
    try:
        reference.function(name)
        return None
    except reference.ReferenceError as exc:
        known = ", ".join(f"{op} ({', '.join(spec.aliases)})" if spec.aliases else op for op, spec in specs().items())
        raise CaseFileError(
            file,
            "name",
            f"a function that imports (a torch function, module.function) or a tileport operator: {known}; {exc}",
        ) from None


def _intervals(r: _Reader, key: str) -> list[tuple[float, float]]:
    values = r.get(key, list, "a list of [low, high] intervals")
    out = []
    for v in values:
        if not (
            isinstance(v, list)
            and len(v) == 2
            and all(isinstance(e, (int, float)) and not isinstance(e, bool) for e in v)
            and v[0] <= v[1]
        ):
            raise CaseFileError(r.file, r.key(key), "a list of [low, high] intervals with low <= high", v)
        out.append((float(v[0]), float(v[1])))
    if not out:
        raise CaseFileError(r.file, r.key(key), "at least one [low, high] interval", values)
    return out


def _weights(r: _Reader, n: int) -> list[float]:
    w = r.get("weights", list, f"{n} positive numbers, one per interval", [1.0] * n)
    if len(w) != n or not all(isinstance(e, (int, float)) and e > 0 for e in w):
        raise CaseFileError(r.file, r.key("weights"), f"{n} positive numbers, one per interval", w)
    return [float(e) for e in w]


def _ranges(r: _Reader) -> tuple[list[tuple[float, float, float]], list[tuple[float, float]]]:
    """(valid intervals with weights, invalid intervals) of an input's ``ranges``."""
    if "ranges" not in r.data:
        return [], []
    ranges = r.child("ranges").only("valid", "invalid")
    valid, invalid = [], []
    if "valid" in ranges.data:
        v = ranges.child("valid").only("values", "weights")
        iv = _intervals(v, "values")
        valid = [(lo, hi, w) for (lo, hi), w in zip(iv, _weights(v, len(iv)))]
    if "invalid" in ranges.data:
        invalid = _intervals(ranges.child("invalid").only("values"), "values")
    return valid, invalid


def _shapes(r: _Reader) -> ShapeRule:
    s = r.child("shapes").only("dim_numbers", "dim_values", "max_length")
    dims = s.child("dim_numbers").only("values").int_list("values", 1)
    if max(dims) > 8:
        raise CaseFileError(r.file, s.key("dim_numbers.values"), "dimension counts from 1 to 8", list(dims))
    max_length = s.get("max_length", int, "a positive integer", DEFAULT_MAX_LENGTH)
    if not 1 <= max_length <= MAX_ELEMENTS:
        raise CaseFileError(r.file, s.key("max_length"), "a positive integer up to 2^31", max_length)
    max_dim = max_length
    if "dim_values" in s.data:
        spans = _intervals(s, "dim_values")
        if spans[0][0] < 0:
            raise CaseFileError(r.file, s.key("dim_values"), "intervals of dimension values >= 0", spans)
        max_dim = int(max(hi for _, hi in spans))
    return ShapeRule(dims, min(max_dim, max_length), max_length)


def _discrete(r: _Reader, name: str) -> tuple[tuple, tuple, tuple] | None:
    """(values, weights, invalid values) of an attribute whose valid values are a list of discrete values (each
    one a class), or None when they are intervals."""
    if "ranges" not in r.data:
        return None
    ranges = r.child("ranges").only("valid", "invalid")
    valid = ranges.child("valid").only("values", "weights") if "valid" in ranges.data else None
    if (
        valid is None
        or not isinstance(valid.data.get("values"), list)
        or any(isinstance(v, list) for v in valid.data["values"])
    ):
        return None
    values = tuple(valid.data["values"])
    if not values:
        raise CaseFileError(r.file, valid.key("values"), f"at least one value of attribute {name!r}", list(values))
    weights = tuple(_weights(valid, len(values))) if "weights" in valid.data else ()
    invalid = tuple(ranges.child("invalid").only("values").data.get("values", [])) if "invalid" in ranges.data else ()
    return values, weights, tuple(v for v in invalid if not isinstance(v, list))


def _attr_dtype(r: _Reader, name: str, values: tuple) -> None:
    if "dtypes" not in r.data:
        return
    d = r.child("dtypes").only("values")
    kinds = d.get("values", list, f"attribute dtypes among {', '.join(ATTR_DTYPES)}")
    bad = [k for k in kinds if k not in ATTR_DTYPES]
    if bad:
        raise CaseFileError(r.file, d.key("values"), f"attribute dtypes among {', '.join(ATTR_DTYPES)}", bad[0])
    accepted = tuple(t for k in kinds for t in ATTR_DTYPES[k])
    wrong = [v for v in values if not isinstance(v, accepted) or (isinstance(v, bool) and "bool" not in kinds)]
    if wrong:
        raise CaseFileError(
            r.file, r.key("ranges.valid.values"), f"values of dtype {', '.join(kinds)} for {name!r}", wrong[0]
        )


def _attr_values(r: _Reader, name: str) -> tuple[tuple, tuple]:
    """(equivalence classes, invalid values) of an attribute: each valid interval's ends and middle."""
    valid, invalid = _ranges(r)
    if not valid:
        raise CaseFileError(
            r.file,
            r.key("ranges.valid.values"),
            f"the valid values of attribute {name!r} (intervals or a list of values)",
        )
    values = []
    for lo, hi, _ in valid:
        mid = math.sqrt(lo * hi) if lo > 0 and hi > 0 else (lo + hi) / 2
        values += [lo, mid, hi]
    bad = []
    for lo, hi in invalid:
        bad += (
            [lo]
            if lo == hi
            else [lo, hi]
            if math.isfinite(lo) and math.isfinite(hi)
            else [v for v in (lo, hi) if math.isfinite(v)]
        )
    return tuple(dict.fromkeys(values)), tuple(dict.fromkeys(bad))


def _entry(path: Path, item: Any, i: int) -> _Reader:
    """inputs[i] of a design file: the kit's keys tileport does not implement refused by name, others by key."""
    r = _Reader(path, item, f"inputs[{i}]")
    for key in [k for k in r.data if k not in INPUT]:
        if key in NOT_YET:
            raise CaseFileError(path, r.key(key), f"not supported yet: {NOT_YET[key]}")
    return r.only(*INPUT)


def _attr(r: _Reader, name: str, required: bool) -> AttrInput:
    """An attribute's entry: its classes (discrete values or intervals), weights, dtype check, invalid values."""
    discrete = _discrete(r, name)
    if discrete is not None:
        values, weights, invalid = discrete
    else:
        (values, invalid), weights = _attr_values(r, name), ()
    _attr_dtype(r, name, values)
    return AttrInput(name, required, values, invalid, weights)


def _first_tensor(r: _Reader, name: str, required: bool) -> TensorInput:
    """The first tensor's entry: it carries the dtypes, shapes and boundary flags."""
    valid, invalid = _ranges(r)
    flags = r.child("boundary", {}).only(*BOUNDARY_FLAGS)
    boundary = {f: flags.get(f, bool, "true or false") for f in flags.data}
    return TensorInput(name, required, (), _dtypes(r), _shapes(r), boundary, None, tuple(valid), tuple(invalid))


def _levels(per_dtype: int | None, n_dtypes: int) -> dict[str, Level]:
    levels = {}
    for name, need in COUNTS.items():
        cases = per_dtype * n_dtypes if per_dtype else need.cases
        levels[name] = Level(name, cases, need.runs_per_case, name)
    return {"quick": Level("quick", min(QUICK_CASES, levels["L0"].cases), 2, "L0"), **levels}


def _reference_suite(path: Path, top: _Reader, target: str, acc: str, per_dtype: int | None) -> Suite:
    """A suite for a function that is no tileport operator: its inputs by its own parameter names, the first
    tensor's shapes for every tensor, normalized_shape and the like derived; checked by one call of it."""

    tensors: list[TensorInput] = []
    attrs: list[AttrInput] = []
    derived: list[str] = []
    for i, item in enumerate(top.get("inputs", list, "a list of inputs")):
        r = _entry(path, item, i)
        name = r.get("name", str, "the input's name")
        if name in reference.DERIVED:  # derived from the first tensor, not drawn
            derived.append(name)
            continue
        kind = r.get("type", str, "tensor or attr")
        required = r.get("required", bool, "true or false", True)
        if kind == "tensor" and not tensors:
            tensors.append(_first_tensor(r, name, required))
        elif kind == "tensor":
            if "shapes" in r.data or "boundary" in r.data:
                raise CaseFileError(
                    path,
                    r.key("shapes" if "shapes" in r.data else "boundary"),
                    "not supported yet: a reference function's other tensors take the first tensor's shape",
                )
            if "dtypes" in r.data and set(_dtypes(r)) != set(tensors[0].dtypes):
                raise CaseFileError(
                    path,
                    r.key("dtypes.values"),
                    f"the first tensor's dtypes ({', '.join(map(str, tensors[0].dtypes))})",
                )
            valid, invalid = _ranges(r)
            tensors.append(
                TensorInput(name, required, (), like=tensors[0].name, valid=tuple(valid), invalid=tuple(invalid))
            )
        elif kind in ("attr", "attrs"):
            if "shapes" in r.data or "boundary" in r.data:
                raise CaseFileError(
                    path, r.key("shapes" if "shapes" in r.data else "boundary"), "no such key for an attribute"
                )
            attrs.append(_attr(r, name, required))
        else:
            raise CaseFileError(path, r.key("type"), "tensor or attr", kind)
    if not tensors:
        raise CaseFileError(path, "inputs", "at least one tensor input (the first carries dtypes and shapes)")
    suite = Suite(
        file=path,
        name=target,
        api=top.get("api", str, "the API under test (pytorch, or a dotted name)", "pytorch"),
        backward=top.get("backward", bool, "true or false", True),
        outputs=(),
        grad_outputs=(),
        standard={
            "acc": acc,
            "golden": "float64",
            "benchmark": "torch",
            "perf": str(top.data.get("standard", {}).get("perf", "")),
        },
        levels=_levels(per_dtype, len(tensors[0].dtypes)),
        tensors=tuple(tensors),
        attrs=tuple(attrs),
        extra_share=_extra_share(top, per_dtype),
        reference=target,
        derived=tuple(derived),
    )
    try:
        spec_of(suite)  # one call of the function: its parameters, its outputs
    except reference.ReferenceError as exc:
        raise CaseFileError(path, "inputs", f"inputs {target} takes ({exc})") from None
    return suite


def api_suite(target: str) -> Suite:
    """The default design for ``verify --api MODULE.FUNCTION``: its first parameter (``input`` for a builtin) a
    tensor of fp32/fp16/bf16, 1 to 4 dimensions, the standard's value mix and boundary cases; no attributes
    (the function's defaults)."""
    fn = reference.function(target)
    names, required = reference.parameters(fn)
    if names is not None and len(required) > 1:
        raise ValueError(
            f"--api {target}: it needs {', '.join(required)}; give a design file (--cases FILE.yaml) naming them"
        )
    first = (names or ["input"])[0]
    data = {
        "api": "pytorch",
        "name": target,
        "standard": {"acc": "double_bm"},
        "extra_numbers": "none",
        "inputs": [
            {
                "name": first,
                "type": "tensor",
                "dtypes": {"values": ["fp32", "fp16", "bf16"]},
                "shapes": {"dim_numbers": {"values": [1, 2, 3, 4]}, "max_length": 65536},
                "boundary": {"has_empty": True, "has_infnan": True, "has_lower_border": True},
            }
        ],
    }
    return load_atk(Path(f"--api {target}"), data)


def _extra_share(top: _Reader, per_dtype: int | None) -> float:
    extra = top.data.get("extra_numbers", "all")
    if extra in ("all",):
        return 0.1
    if extra in ("none", 0):
        return 0.0
    if isinstance(extra, int) and not isinstance(extra, bool) and extra > 0:
        return min(1.0, extra / (per_dtype or COUNTS["L0"].cases_per_dtype))
    raise CaseFileError(top.file, "extra_numbers", "all, none, or a number of extra cases per dtype", extra)


def load_atk(path: Path, data: Any) -> Suite:
    """A suite from an ATK design file (see the module's docstring for the mapping)."""
    for key, why in NOT_YET.items():  # the kit's keys tileport does not implement: said so, never ignored
        if isinstance(data, dict) and key in data:
            raise CaseFileError(path, key, f"not supported yet: {why}")
    top = _Reader(path, data).only(*TOP)
    api_name = top.get("name", str, "the operator's name")
    op = resolve(api_name, path)
    spec = specs()[op] if op is not None else None  # None: a reference function, its inputs by its own names
    api_type = top.get("api_type", str, "function", "function")
    if api_type != "function":
        raise CaseFileError(path, "api_type", "function (tileport's operators are functions)", api_type)
    gen = top.get("generate", str, f"one of {', '.join(GENERATORS)}", "default")
    if gen not in GENERATORS:
        raise CaseFileError(
            path, "generate", f"one of {', '.join(GENERATORS)} (generator modules are not supported)", gen
        )
    std = top.child("standard").only("acc", "perf")
    acc = std.get("acc", str, f"one of {', '.join(ACC_STANDARDS)}")
    if acc not in ACC_STANDARDS:
        raise CaseFileError(path, "standard.acc", f"one of {', '.join(ACC_STANDARDS)}", acc)
    per_dtype = top.get("dtype_numbers", int, "a positive number of cases per dtype", None)
    if per_dtype is not None and per_dtype < 1:
        raise CaseFileError(path, "dtype_numbers", "a positive number of cases per dtype", per_dtype)

    if spec is None:
        return _reference_suite(path, top, api_name, acc, per_dtype)
    declared = {t.name for t in spec.inputs}
    attr_names = {a.name for a in spec.attrs + spec.case_attrs}
    names = api_names(top.data.get("name", ""), op)  # the API's parameter names -> the operator's
    tensors: list[TensorInput] = []
    attrs: list[AttrInput] = []
    items = top.get("inputs", list, "a list of inputs")
    for i, item in enumerate(items):
        r = _entry(path, item, i)
        given = r.get("name", str, "the input's name")
        name = names.get(given) or canonical(spec, given)
        if name in DERIVED:  # normalized_shape and the like: derived from the tensor they describe, not drawn
            continue
        kind = r.get("type", str, "tensor or attr")
        required = r.get("required", bool, "true or false", True)
        if kind == "tensor":
            if name not in declared | {"dy"}:
                api = [p for p, n in names.items() if n in declared]
                known = ", ".join(sorted(declared)) + (f"; by the API's names: {', '.join(api)}" if api else "")
                raise CaseFileError(path, r.key("name"), f"a tensor input of {op}: {known} (or dy)", given)
            if not tensors:
                tensors.append(_first_tensor(r, name, required))
                continue
            valid, invalid = _ranges(r)
            for key in ("shapes", "boundary"):
                if key in r.data:
                    raise CaseFileError(
                        path,
                        r.key(key),
                        f"no {key} here: only the first tensor declares them; the others follow {op}'s roles",
                    )
            if "dtypes" in r.data and set(_dtypes(r)) != set(tensors[0].dtypes):
                raise CaseFileError(
                    path,
                    r.key("dtypes.values"),
                    f"the first tensor's dtypes ({', '.join(map(str, tensors[0].dtypes))})",
                )
            if required is False and not any(t.name == name and t.optional for t in spec.inputs):
                raise CaseFileError(path, r.key("required"), f"true: {op} needs {name}", required)
            tensors.append(
                TensorInput(name, required, (), like=tensors[0].name, valid=tuple(valid), invalid=tuple(invalid))
            )
        elif kind in ("attr", "attrs"):
            if name not in attr_names:
                raise CaseFileError(
                    path, r.key("name"), f"an attribute of {op}: {', '.join(sorted(attr_names))}", given
                )
            for key in ("shapes", "boundary"):
                if key in r.data:
                    raise CaseFileError(path, r.key(key), "no such key for an attribute")
            attrs.append(_attr(r, name, required))
        else:
            raise CaseFileError(path, r.key("type"), "tensor or attr", kind)
    if not tensors:
        raise CaseFileError(path, "inputs", "at least one tensor input (the first carries dtypes and shapes)")
    grads = tuple(t.name for t in spec.grads)
    backward = top.get("backward", bool, "true or false", bool(grads))
    if backward and "dy" not in {t.name for t in tensors}:  # the backward's incoming gradient, shaped like x
        tensors.append(TensorInput("dy", True, (), like=tensors[0].name))
    levels = _levels(per_dtype, len(tensors[0].dtypes))
    return Suite(
        file=path,
        name=op,
        api=top.get("api", str, "the API under test (pytorch, or a dotted name)"),
        backward=backward,
        outputs=tuple(t.name for t in spec.outputs),
        grad_outputs=grads if backward else (),
        standard={"acc": acc, "golden": "float64", "benchmark": "torch", "perf": str(std.data.get("perf", ""))},
        levels=levels,
        tensors=tuple(tensors),
        attrs=tuple(attrs),
        extra_share=_extra_share(top, per_dtype),
    )
