"""What the derived interface reads off a declaration: the primary input, the reduced-dimension attribute, the
public forms' parameter orders, each tensor's role and the custom ops' schemas. Pure functions of the spec."""

from __future__ import annotations

from dataclasses import dataclass

from .. import spec as s

# A custom-op schema type per attribute kind (``given`` attributes are optional floats).
SCHEMA_TYPES = {
    s.EPS: "float",
    s.REAL: "float",
    s.PROB: "float",
    s.CHOICE: "str",
    s.DIM: "int",
    s.BOOL: "bool",
    s.INT: "int",
    s.DTYPE: "ScalarType?",
    "": "float",
}


class DeclarationError(ValueError):
    """An OpSpec the interface cannot be derived from; the message names the field and what was expected."""


@dataclass(frozen=True)
class Layout:
    """The names the generated code is written with."""

    op: str
    primary: str  # the first input: a rows tensor
    inputs: tuple[str, ...]
    attrs: tuple[str, ...]
    options: tuple[str, ...]
    dim: str | None  # the attribute naming the reduced dimension (a ``dim`` attribute), or None: the last
    outputs: tuple[str, ...]
    returned: tuple[int, ...]  # indices of the outputs the differentiable function returns
    bwd_tensors: tuple[str, ...]
    bwd_attrs: tuple[str, ...]
    bwd_given: tuple[str, ...]
    bwd_primary: str
    returns: tuple[str, ...]
    saved: tuple[str, ...]  # what autograd saves: the backward's tensors that are inputs or outputs


def tensor_roles(spec: s.OpSpec) -> dict[str, s.Tensor]:
    """Every tensor name the interface meets: inputs, outputs, output gradients (``d<output>``) and the
    backward's results."""
    roles = {t.name: t for t in spec.inputs + spec.outputs}
    for i, t in enumerate(spec.outputs):
        roles.setdefault(f"d{t.name}", s.Tensor(f"d{t.name}", t.role, optional=i > 0))
    for t in returns_of(spec):
        roles.setdefault(t.name, t)
    return roles


def returns_of(spec: s.OpSpec) -> tuple[s.Tensor, ...]:
    return (spec.backward.returns or spec.grads) if spec.backward else ()


def attr_of(spec: s.OpSpec, name: str) -> s.Attr:
    return next(a for a in spec.attrs + spec.options if a.name == name)


def layout(spec: s.OpSpec) -> Layout:
    """The declaration checked and read; DeclarationError naming what is wrong."""
    if not spec.inputs or spec.inputs[0].role != s.ROWS or spec.inputs[0].optional:
        raise DeclarationError(f"{spec.name}: the first input must be a required rows tensor (the primary)")
    if not spec.outputs:
        raise DeclarationError(f"{spec.name}: no outputs declared")
    names = [t.name for t in spec.inputs] + [a.name for a in spec.attrs + spec.options]
    dup = {n for n in names if names.count(n) > 1} | ({"backend", "out"} & set(names))
    if dup:
        raise DeclarationError(f"{spec.name}: names used twice or reserved: {', '.join(sorted(dup))}")
    for a in spec.options:
        if a.kind != s.DTYPE:
            raise DeclarationError(f"{spec.name}: option {a.name!r} must be of kind 'dtype' (options are dtypes)")
    dims = [a.name for a in spec.attrs if a.kind == s.DIM]
    roles = tensor_roles(spec)
    bwd = spec.backward
    if bwd is None:
        raise DeclarationError(f"{spec.name}: no backward declared (OpSpec.backward)")
    unknown = [n for n in bwd.tensors if n not in roles] + [
        n for n in bwd.attrs + bwd.given if n not in {a.name for a in spec.attrs}
    ]
    if unknown:
        raise DeclarationError(f"{spec.name}: the backward names {', '.join(unknown)}, which the spec does not declare")
    primary = next((n for n in bwd.tensors if roles[n].role == s.ROWS), None)
    if primary is None:
        raise DeclarationError(f"{spec.name}: the backward takes no rows tensor")
    inputs = {t.name for t in spec.inputs}
    outputs = [t.name for t in spec.outputs]
    return Layout(
        op=spec.name,
        primary=spec.inputs[0].name,
        inputs=tuple(t.name for t in spec.inputs),
        attrs=tuple(a.name for a in spec.attrs),
        options=tuple(a.name for a in spec.options),
        dim=dims[0] if dims else None,
        outputs=tuple(outputs),
        returned=tuple(i for i, t in enumerate(spec.outputs) if t.role == s.ROWS),
        bwd_tensors=bwd.tensors,
        bwd_attrs=bwd.attrs,
        bwd_given=bwd.given,
        bwd_primary=primary,
        returns=tuple(t.name for t in returns_of(spec)),
        saved=tuple(n for n in bwd.tensors if n in inputs or n in outputs),
    )


def signature(spec: s.OpSpec, form: str) -> tuple[str, ...]:
    """The public parameter order of ``form`` ("function", "forward", "backward"): the spec's, else tensors
    (required first), positional attributes, ``*``, the other attributes and options, ``backend`` (and ``out``
    for a forward that takes it); a backward's attributes are keywords but for the reduced dimension."""
    if form in spec.signatures:
        return spec.signatures[form]
    lay = layout(spec)
    if form == "backward":
        tensors = [n for n in lay.bwd_tensors if not tensor_roles(spec)[n].optional]
        tensors += [n for n in lay.bwd_tensors if tensor_roles(spec)[n].optional]
        attrs = [attr_of(spec, n) for n in lay.bwd_attrs + lay.bwd_given]
    else:
        tensors = [t.name for t in spec.inputs if not t.optional] + [t.name for t in spec.inputs if t.optional]
        attrs = list(spec.attrs) + list(spec.options)
    pos = [a.name for a in attrs if not a.kw_only and (form != "backward" or a.kind == s.DIM)]
    kw = (
        [a.name for a in attrs if a.name not in pos]
        + ["backend"]
        + (["out"] if form == "forward" and spec.kernel_out else [])
    )
    return (*tensors, *pos, "*", *kw)


def schema(spec: s.OpSpec, form: str, params: tuple[str, ...]) -> str:
    """The custom op's schema: its parameters typed by role and kind, its results tensors."""
    roles = tensor_roles(spec)
    given = set(spec.backward.given) if form == "bwd" else set()
    parts = []
    for n in params:
        if n == "backend":
            parts.append("str? backend")
        elif n in roles:
            parts.append(f"Tensor{'?' if roles[n].optional else ''} {n}")
        elif n in given:
            parts.append(f"float? {n}")
        else:
            parts.append(f"{SCHEMA_TYPES[attr_of(spec, n).kind]} {n}")
    count = len(spec.outputs) if form == "fwd" else len(returns_of(spec))
    result = "Tensor" if count == 1 else "(" + ", ".join(["Tensor"] * count) + ")"
    return f"({', '.join(parts)}) -> {result}"
