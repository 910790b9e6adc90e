"""A new operator's signature for ``tileport scaffold``: from an existing operator's declaration (``--like``),
from the command line (``--inputs x:rows,gate:rows,weight:vector? --attrs eps=1e-6 --outputs y:rows,rstd:per_row``),
or the first with the second's parts replacing its own. Tensors by named dimensions (``--inputs "q:[B,T,H,D]"``,
a general operator's) are read by ``declared``."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..ops import spec as s
from ..ops.dims import TensorDecl

ROLES_IN = (s.ROWS, s.VECTOR)
ROLES_OUT = (s.ROWS, s.PER_ROW)


class SignatureError(ValueError):
    """A signature that cannot be written; the message names the item and what was expected."""


@dataclass(frozen=True)
class Signature:
    inputs: tuple[s.Tensor, ...]
    attrs: tuple[s.Attr, ...]
    options: tuple[s.Attr, ...]
    outputs: tuple[s.Tensor, ...]
    backward: s.Backward
    grads: tuple[s.Tensor, ...]
    signatures: dict = field(default_factory=dict)
    where: tuple[str, ...] = ()  # a general operator's constraints between its dimensions

    @property
    def general(self) -> bool:
        """Tensors by named dimensions (``TensorDecl``s), not by the row-wise roles."""
        return isinstance(self.inputs[0], TensorDecl)

    @property
    def weighted(self) -> bool:
        return not self.general and any(t.role == s.VECTOR for t in self.inputs)


def parse_tensors(text: str, what: str, roles: tuple[str, ...]) -> tuple[s.Tensor, ...]:
    """``x:rows,weight:vector?`` -> tensors; ``?`` marks an optional one."""
    out = []
    for item in filter(None, (p.strip() for p in text.split(","))):
        name, _, role = item.partition(":")
        optional = role.endswith("?")
        role = role.rstrip("?")
        if not name.isidentifier() or role not in roles:
            raise SignatureError(
                f"--{what}: {item!r} is not NAME:ROLE with ROLE one of {', '.join(roles)} (a trailing ? marks an "
                "optional input)"
            )
        out.append(s.Tensor(name, role, optional=optional))
    if not out:
        raise SignatureError(f"--{what}: no tensors given")
    return tuple(out)


def _value(text: str):
    low = text.lower()
    if low in ("true", "false"):
        return low == "true"
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    return text


def parse_attrs(text: str) -> tuple[s.Attr, ...]:
    """``eps=1e-6,activation=silu|sigmoid,flag=true`` -> attributes, the kind read off the name and default:
    an eps (finite, >= 0), a finite real, an int (``dim``: the reduced dimension), a bool, or a choice whose
    first option is the default."""
    out = []
    for item in filter(None, (p.strip() for p in text.split(","))):
        name, eq, raw = item.partition("=")
        if not name.isidentifier() or not eq or not raw:
            raise SignatureError(f"--attrs: {item!r} is not NAME=DEFAULT (a choice: NAME=A|B|C, the first the default)")
        if "|" in raw:
            choices = tuple(raw.split("|"))
            out.append(s.Attr(name, choices[0], " or ".join(choices), s.CHOICE, choices))
            continue
        v = _value(raw)
        if isinstance(v, bool):
            out.append(s.Attr(name, v, "True or False", s.BOOL))
        elif isinstance(v, int) and name == "dim":
            out.append(s.Attr(name, v, "an int in [-x.dim(), x.dim())", s.DIM, kw_only=False))
        elif isinstance(v, int):
            out.append(s.Attr(name, v, "an int", s.INT))
        elif isinstance(v, float) and "eps" in name:
            out.append(s.Attr(name, v, "finite, >= 0", s.EPS, kw_only=False))
        elif isinstance(v, float):
            out.append(s.Attr(name, v, "finite", s.REAL))
        else:
            out.append(s.Attr(name, v, repr(v), s.CHOICE, (v,)))
    return tuple(out)


def default_backward(inputs, attrs, outputs) -> tuple[s.Backward, tuple[s.Tensor, ...]]:
    """The backward a new operator starts from: it takes its rows inputs, the forward's per-row statistics,
    the first output's gradient (the others' optional) and its vector inputs, with every attribute; it gives
    each rows input's gradient and each vector input's sum over rows."""
    rows = [t.name for t in inputs if t.role == s.ROWS]
    stats = [t.name for t in outputs if t.role == s.PER_ROW]
    douts = [f"d{t.name}" for t in outputs if t.role == s.ROWS]
    vectors = [t for t in inputs if t.role == s.VECTOR]
    grads = tuple(
        s.Tensor(f"d{t.name}", s.ROWS, dtype=None if i == 0 else t.name)
        for i, t in enumerate(inputs)
        if t.role == s.ROWS
    )
    grads += tuple(s.Tensor(f"d{t.name}", s.REDUCED, optional=t.optional) for t in vectors)
    dims = [a.name for a in attrs if a.kind == s.DIM]
    bwd = s.Backward(
        (*rows, *stats, *douts, *(t.name for t in vectors)),
        tuple(a.name for a in attrs if a.name not in dims) + tuple(dims),
    )
    return bwd, grads


def from_spec(spec: s.OpSpec, backward=None) -> Signature:
    """An operator's own signature (a general one's with its constraints). A backward of its own making (a result
    for two inputs, ``to_grads``) is replaced by the default one, ``backward`` (a general operator's is
    ``declared.default_backward``; the row-wise one here otherwise): the new operator's math is its own."""
    if spec.backward is not None and spec.backward.to_grads is None and not spec.backward.returns:
        bwd, grads = spec.backward, spec.grads
    else:
        bwd, grads = (backward or default_backward)(spec.inputs, spec.attrs, spec.outputs)
    return Signature(
        spec.inputs, spec.attrs, spec.options, spec.outputs, bwd, grads, dict(spec.signatures), tuple(spec.where)
    )


def build(
    like: s.OpSpec | None,
    inputs: str | None,
    attrs: str | None,
    outputs: str | None,
    where: str | None = None,
    general_outputs: bool = False,
) -> Signature:
    """A row-wise signature: ``like``'s with the given parts replaced (without ``like``, the parts given: --inputs
    and --outputs are then required). ``general_outputs``: --outputs are by named dimensions (refused here)."""
    if where is not None:
        raise SignatureError("--where: constraints are between named dimensions: give --inputs by them (NAME:[SHAPE])")
    if general_outputs:
        raise SignatureError("--outputs: by named dimensions (NAME:[SHAPE]) needs --inputs by named dimensions too")
    if like is not None and like.general and outputs is None:
        raise SignatureError(f"--outputs: {like.name}'s are by named dimensions: give row-wise ones with --inputs")
    if like is None and (inputs is None or outputs is None):
        raise SignatureError("give --like OP, or --inputs and --outputs (and --attrs) for a new signature")
    base = from_spec(like) if like is not None and not like.general else None  # a general like lends its attrs
    if inputs is None and attrs is None and outputs is None:
        return base  # type: ignore[return-value]
    ins = parse_tensors(inputs, "inputs", ROLES_IN) if inputs is not None else base.inputs
    ats = parse_attrs(attrs) if attrs is not None else (base.attrs if base else (like.attrs if like else ()))
    outs = parse_tensors(outputs, "outputs", ROLES_OUT) if outputs is not None else base.outputs
    if ins[0].role != s.ROWS or ins[0].optional:
        raise SignatureError(
            f"--inputs: the first input must be a required rows tensor (the primary), got {ins[0].name}:{ins[0].role}"
        )
    if outs[0].role != s.ROWS:
        raise SignatureError(f"--outputs: the first output must be a rows tensor, got {outs[0].name}:{outs[0].role}")
    names = [t.name for t in ins + outs] + [a.name for a in ats]
    dup = sorted({n for n in names if names.count(n) > 1} | ({"backend", "out", "output_dtype"} & set(names)))
    if dup:
        raise SignatureError(f"names used twice or reserved: {', '.join(dup)}")
    outs = tuple(s.Tensor(t.name, t.role, dtype="output_dtype" if t.role == s.ROWS else "stat") for t in outs)
    options = (s.Attr("output_dtype", None, "a floating dtype (default x's)", s.DTYPE),)
    bwd, grads = default_backward(ins, ats, outs)
    return Signature(ins, ats, options, outs, bwd, grads)
