"""What the generated interface reads off an operator declared by named dimensions (``OpSpec.general``): the
tensors each call form checks, in order, with their dtypes expressed through tensors the form has; which
optional results are present; the forms' parameter orders. Pure functions of the spec."""

from __future__ import annotations

from dataclasses import dataclass, replace

from .. import spec as s
from ..dims import Declaration, TensorDecl, gradient_of
from .layout import DeclarationError


@dataclass(frozen=True)
class Form:
    """One call form's tensors (forward: the inputs; backward: the backward's tensors), as it checks them."""

    tensors: tuple[TensorDecl, ...]
    declaration: Declaration  # the same tensors, their ``like:`` pointing inside the form (bind's messages)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(t.name for t in self.tensors)

    def __getitem__(self, name: str) -> TensorDecl:
        return self.declaration[name]


@dataclass(frozen=True)
class General:
    """The names the generated code of a general operator is written with."""

    op: str
    primary: str
    inputs: tuple[str, ...]
    attrs: tuple[str, ...]
    outputs: tuple[str, ...]
    forward: Form
    backward: Form | None  # None: a forward-only operator (a decode step), whose backward raises
    bwd_primary: str
    bwd_attrs: tuple[str, ...]
    returns: tuple[str, ...]
    saved: tuple[str, ...]
    differentiable: tuple[str, ...]  # the inputs with a gradient (``grad`` and ``d<input>`` among the returns)
    present: dict[str, tuple[str, ...]]  # an optional output or result -> the tensors whose presence it follows


def _every(spec: s.OpSpec) -> dict[str, TensorDecl]:
    return {t.name: t for t in spec.declaration.tensors}


def root(decls: dict[str, TensorDecl], name: str) -> str:
    """The tensor at the end of ``name``'s ``like:`` chain: the one whose dtype a group of tensors shares."""
    seen = []
    while decls[name].like is not None and name not in seen:
        seen.append(name)
        name = decls[name].like
    return name


def form(spec: s.OpSpec, names: tuple[str, ...]) -> Form:
    """The tensors ``names`` (in order) with each ``like:`` redirected to an earlier tensor of the form in the same
    dtype group, a required one where there is one (the backward has ``dq_out`` and ``cos``, both q's dtype, not q)."""
    every = _every(spec)
    out: list[TensorDecl] = []
    for n in names:
        t = every[n]
        group = root(every, n)
        earlier = [u for u in out if root(every, u.name) == group]
        if earlier:  # a required one where there is one: its dtype is always there to compare with
            ref = next((u for u in earlier if not u.optional), earlier[-1])
            t = replace(t, dtype=f"like:{ref.name}")
        elif t.like is not None:  # the first of its group here: its class is the root's
            t = replace(t, dtype=every[group].dtype)
        if t.stat is not None:  # the statistics of a tensor of the form in that tensor's group
            t = replace(t, dtype=f"stat:{_member(spec, every, names, t.stat)}")
        out.append(t)
    attrs = tuple(a.name for a in spec.attrs)
    return Form(tuple(out), Declaration(tuple(out), (), spec.where, attrs))


def _member(spec: s.OpSpec, every: dict[str, TensorDecl], names: tuple[str, ...], name: str) -> str:
    """The tensor of ``names`` with ``name``'s dtype (a required one where there is one): what a ``stat:`` of the
    form is stated through."""
    group = [n for n in names if root(every, n) == root(every, name)]
    if not group:
        raise DeclarationError(
            f"{spec.name}: a tensor has the statistics dtype of {name}, which the form {names} lacks"
        )
    return next((n for n in group if not every[n].optional), group[0])


def presence(given: Form, result: TensorDecl) -> tuple[str, ...]:
    """The optional tensors of ``given`` that alone bind one of ``result``'s dimensions: the result is present
    exactly when they are (k_out follows k: only k binds Hk). Empty: always present."""
    required = {k for t in given.tensors if not t.optional for k in t.shape.names()}
    follows = []
    for k in result.shape.names():
        if k in required:
            continue
        binders = [t.name for t in given.tensors if k in t.shape.names()]
        follows += [b for b in binders if b not in follows]
    return tuple(follows)


def general(spec: s.OpSpec) -> General:
    """The declaration checked and read; DeclarationError naming what is wrong."""
    if not spec.inputs or spec.inputs[0].optional or spec.inputs[0].dtype != "float":
        raise DeclarationError(f"{spec.name}: the first input must be a required floating tensor (the primary)")
    every = _every(spec)
    if spec.backward is None:
        if spec.grads or spec.options:
            raise DeclarationError(f"{spec.name}: gradients declared without a backward (OpSpec.backward)")
        return _forward_only(spec, every)
    bwd = spec.backward
    unknown = [n for n in bwd.tensors if n not in every] + [
        n for n in bwd.attrs + bwd.given if n not in {a.name for a in spec.attrs}
    ]
    if unknown:
        raise DeclarationError(f"{spec.name}: the backward names {', '.join(unknown)}, which the spec does not declare")
    if bwd.given or bwd.to_grads or spec.options:
        raise DeclarationError(f"{spec.name}: a general declaration has no options, given attributes or to_grads yet")
    fwd = form(spec, tuple(t.name for t in spec.inputs))
    back = form(spec, bwd.tensors)
    floats = [t.name for t in back.tensors if not t.optional and t.dtype == "float"]
    if not floats:
        raise DeclarationError(f"{spec.name}: the backward takes no required floating tensor")
    returns = tuple(t.name for t in (bwd.returns or spec.grads))
    present = {t.name: presence(fwd, t) for t in spec.outputs if t.optional}
    present |= {n: presence(back, every[n]) for n in returns if every[n].optional}
    for n, follows in present.items():
        if not follows:
            raise DeclarationError(f"{spec.name}: {n} is optional, but no optional tensor alone binds its dimensions")
    inputs = tuple(t.name for t in spec.inputs)
    outputs = tuple(t.name for t in spec.outputs)
    differentiable = tuple(t.name for t in spec.inputs if t.grad and f"d{t.name}" in returns)
    return General(
        op=spec.name,
        primary=inputs[0],
        inputs=inputs,
        attrs=tuple(a.name for a in spec.attrs),
        outputs=outputs,
        forward=fwd,
        backward=back,
        bwd_primary=floats[0],
        bwd_attrs=bwd.attrs,
        returns=returns,
        saved=tuple(n for n in bwd.tensors if n in inputs or n in outputs),
        differentiable=differentiable,
        present=present,
    )


def _forward_only(spec: s.OpSpec, every: dict[str, TensorDecl]) -> General:
    """A forward-only operator's names: no backward form, no gradients (its ``grad`` inputs are those whose
    backward raises, as flash-linear-attention's decode steps do)."""
    fwd = form(spec, tuple(t.name for t in spec.inputs))
    present = {t.name: presence(fwd, t) for t in spec.outputs if t.optional}
    for n, follows in present.items():
        if not follows:
            raise DeclarationError(f"{spec.name}: {n} is optional, but no optional tensor alone binds its dimensions")
    inputs = tuple(t.name for t in spec.inputs)
    return General(
        op=spec.name,
        primary=inputs[0],
        inputs=inputs,
        attrs=tuple(a.name for a in spec.attrs),
        outputs=tuple(t.name for t in spec.outputs),
        forward=fwd,
        backward=None,
        bwd_primary="",
        bwd_attrs=(),
        returns=(),
        saved=(),
        differentiable=tuple(t.name for t in spec.inputs if t.grad),
        present=present,
    )


def signature(spec: s.OpSpec, form_name: str) -> tuple[str, ...]:
    """The public parameter order of ``form_name``: the spec's, else tensors in declaration order, positional
    attributes, ``*``, the other attributes, ``backend``."""
    if form_name in spec.signatures:
        return spec.signatures[form_name]
    g = general(spec)
    tensors = g.backward.names if form_name == "backward" else g.inputs
    attrs = [a for a in spec.attrs if form_name != "backward" or a.name in g.bwd_attrs]
    pos = [a.name for a in attrs if not a.kw_only and form_name != "backward"]
    kw = [a.name for a in attrs if a.name not in pos]
    out = ["out"] if form_name == "forward" and spec.kernel_out else []
    return (*tensors, *pos, "*", *kw, "backend", *out)


def gradients(spec: s.OpSpec) -> tuple[TensorDecl, ...]:
    """The output gradients' declarations (``d<output>``), as ``spec.declaration`` has them."""
    return tuple(gradient_of(t, optional=i > 0) for i, t in enumerate(spec.outputs))
