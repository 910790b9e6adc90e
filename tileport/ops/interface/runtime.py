"""Helpers the derived interface's code calls: the reduced dimension moved last and back, output allocation
from the declared roles (empty inputs, fake implementations, ``out=`` checks) and the derived verify executor.
None of them is on an eager call's hot path except ``moved`` and ``back`` (dispatch dtypes are written inline
by the code generator)."""

from __future__ import annotations

import math
from typing import Any

import torch

from ...dtypes import stat_dtype
from .. import _checks, dims
from .. import spec as s
from .._checks import rows_2d  # noqa: F401  (the generated code's name for it)
from .declared import general


def moved(t: torch.Tensor, d: int) -> torch.Tensor:
    """``t`` with dimension ``d`` last (a view)."""
    return t.movedim(d, -1) if d != t.dim() - 1 else t


def back(t: torch.Tensor, d: int) -> torch.Tensor:
    return t.movedim(-1, d) if d != t.dim() - 1 else t


def empty_moved(t: torch.Tensor, d: int, dtype: torch.dtype | None = None) -> torch.Tensor:
    """An uninitialized tensor of t's shape laid out as the outputs are (dimension d innermost)."""
    return back(t.new_empty(moved(t, d).shape, dtype=dtype or t.dtype), d)


def dtype_of(t: s.Tensor, x: torch.Tensor, values: dict[str, Any]) -> torch.dtype:
    """An output's dtype by its declaration: x's, the statistics' (fp32, fp64 for fp64), or an option's."""
    if t.dtype is None:
        return x.dtype
    if t.dtype == "stat":
        return stat_dtype(x.dtype)
    return values.get(t.dtype) or x.dtype


def output_shape(t: s.Tensor, x: torch.Tensor) -> tuple[int, ...]:
    return tuple(x.shape[:-1]) if t.role == s.PER_ROW else tuple(x.shape)


def new_outputs(spec: s.OpSpec, x: torch.Tensor, values: dict[str, Any], dim: int | None = None):
    """The forward's outputs, uninitialized (a fake implementation's result, or empty inputs' before filling)."""
    outs = []
    for t in spec.outputs:
        dtype = dtype_of(t, x, values)
        if dim is not None and t.role == s.ROWS:
            outs.append(empty_moved(x, dim, dtype))
        else:
            outs.append(x.new_empty(output_shape(t, x), dtype=dtype))
    return outs[0] if len(outs) == 1 else tuple(outs)


def empty_forward(spec: s.OpSpec, x: torch.Tensor, values: dict[str, Any], out=None, dim: int | None = None):
    """Outputs of an input with no elements: per-row outputs hold the declared value for a row of nothing
    (the mean of nothing is nan), answered here for every backend (kernels only see non-empty rows)."""
    outs = new_outputs(spec, x, values, dim) if out is None else out
    for t, o in zip(spec.outputs, outs if isinstance(outs, tuple) else (outs,)):
        if t.role == s.PER_ROW:
            o.fill_(t.empty(**values) if callable(t.empty) else t.empty)
    return outs


def backward_results(
    spec: s.OpSpec, primary: torch.Tensor, tensors: dict[str, torch.Tensor | None], fill: bool, dim=None
):
    """The backward's results for an input with no elements (``fill``: reduced gradients are zeros) or as a
    fake implementation's (uninitialized): rows results of the primary's shape, in the dtype of the backward
    tensor their declaration names (default the primary's); an absent vector's gradient is an empty tensor
    (custom ops return tensors only)."""
    outs = []
    for t in spec.backward.returns or spec.grads:
        if t.role == s.REDUCED:
            v = tensors[t.name[1:]]
            outs.append(primary.new_empty(0) if v is None else (torch.zeros_like(v) if fill else torch.empty_like(v)))
            continue
        like = tensors.get(t.dtype) if t.dtype else None
        dtype = primary.dtype if like is None else like.dtype
        if dim is not None:
            outs.append(empty_moved(primary, dim, dtype))
        else:
            outs.append(torch.empty_like(primary, dtype=dtype, memory_format=torch.contiguous_format))
    return outs[0] if len(outs) == 1 else tuple(outs)


def check_out(spec: s.OpSpec, fn: str, out: object, x: torch.Tensor, values: dict[str, Any]) -> tuple:
    """``out=``: a tuple of contiguous tensors of the outputs' shapes, dtypes and x's device."""
    if torch.compiler.is_compiling():
        raise NotImplementedError(f"{fn}(out=...) is eager-only; under torch.compile let it allocate")
    n = len(spec.outputs)
    if not (isinstance(out, (tuple, list)) and len(out) == n):
        kind = {2: "pair", 3: "triple"}.get(n, f"{n}-tuple")
        names = ", ".join(t.name for t in spec.outputs)
        raise TypeError(f"out must be a ({names}) {kind} of tensors, got {type(out).__name__}")
    device = x.device
    for i, (t, o) in enumerate(zip(spec.outputs, out)):
        _checks.output_tensor(o, i, t.name, output_shape(t, x), dtype_of(t, x, values), device)
    return tuple(out)


def derived_run(spec: s.OpSpec, api, inputs: dict, backend: str | None, backward: bool) -> dict[str, torch.Tensor]:
    """verify's executor: the forward with every input and attribute a case sets, then the backward from
    what the forward gave (the cascade), the output gradients (``dy``...) from the case, and the forward's
    attributes (a ``given`` one always given: the autograd path's call)."""
    names = {t.name for t in spec.inputs} | {a.name for a in spec.attrs}
    results = api.forward_tuple(**{k: v for k, v in inputs.items() if k in names}, backend=backend)
    out = dict(zip((t.name for t in spec.outputs), results))
    if backward and spec.backward is not None:  # a forward-only operator has no backward to cascade into
        bwd = spec.backward
        kw = {n: out[n] if n in out else inputs.get(n) for n in bwd.tensors}
        defaults = {a.name: a.default for a in spec.attrs}
        kw |= {n: inputs.get(n, defaults[n]) for n in bwd.attrs + bwd.given}
        grads = api.backward(**kw, backend=backend)
        grads = grads if isinstance(grads, tuple) else (grads,)
        out |= {t.name: g for t, g in zip(bwd.returns or spec.grads, grads) if g is not None}
    return out


# ---------------------------------------------------------------- the generated module's bindings

DERIVING: dict[str, s.OpSpec] = {}  # operator -> its spec, for a generated module that cannot import it by name


def deriving(op: str) -> s.OpSpec:
    """The spec ``derive`` is importing ``op``'s interface for (a plugin's, or one not in its package's spec)."""
    return DERIVING[op]


def default(spec: s.OpSpec, name: str):
    """An attribute's default that has no literal form in the source."""
    return next(a.default for a in spec.attrs + spec.options if a.name == name)


# ---------------------------------------------------------------- operators declared by named dimensions


def form_declaration(spec: s.OpSpec, form: str) -> dims.Declaration:
    """The declaration a general operator's ``form`` ("forward", "backward") is checked against (bind's messages)."""
    g = general(spec)
    return (g.forward if form == "forward" else g.backward).declaration


def explain(declaration: dims.Declaration, tensors: dict, attrs: dict) -> None:
    """Raise the error of a call the generated checks refused: ``dims.bind`` of the same declaration, whose message
    names the tensor, the dimension and both sizes. A call bind accepts here is a fault of the generated checks."""
    dims.bind(declaration, tensors, attrs)
    shown = ", ".join(f"{n}: {tuple(t.shape) if isinstance(t, torch.Tensor) else t!r}" for n, t in tensors.items())
    raise RuntimeError(
        f"tileport: the generated checks refused a call the declaration accepts ({shown}): please report it"
    )


def check_values(declaration: dims.Declaration, tensors: dict, attrs: dict) -> None:
    """Integer tensors' values within their declared ranges (IndexError naming the first outside). Reading the
    data would break a torch.compile graph: while dynamo traces, the check is skipped; the custom op's body, which
    runs when the compiled graph does (never while tracing), makes it again."""
    if torch.compiler.is_compiling():
        return
    dims.bind(declaration, tensors, attrs).check_values()


def unit_last(t: torch.Tensor) -> torch.Tensor:
    """``t`` with stride 1 in its last dimension: itself where it has it (or the dimension has one element), else
    a contiguous copy (an expanded gradient, a transposed view)."""
    if t.dim() == 0 or t.stride(-1) == 1 or t.shape[-1] <= 1:
        return t
    return t.contiguous()


def check_outs(fn: str, out: object, shapes: tuple, dtypes: tuple, device, names: tuple[str, ...]) -> tuple:
    """``out=`` of a general operator: one contiguous tensor per output of its declared shape, dtype and the
    inputs' device, None for an output absent from this call (k_out without k)."""
    if torch.compiler.is_compiling():
        raise NotImplementedError(f"{fn}(out=...) is eager-only; under torch.compile let it allocate")
    if not (isinstance(out, (tuple, list)) and len(out) == len(names)):
        raise TypeError(f"out must be a tuple ({', '.join(names)}) of tensors, got {type(out).__name__}")
    for i, (name, o, shape, dtype) in enumerate(zip(names, out, shapes, dtypes)):
        if shape is None:
            if o is not None:
                raise ValueError(f"out[{i}] ({name}) must be None: {name} is absent from this call")
            continue
        _checks.output_tensor(o, i, name, tuple(shape), dtype, device)
    return tuple(out)


def all_empty(shapes: tuple) -> bool:
    """Whether every present result (its shape, or None for an absent one) has no elements."""
    return all(sh is None or math.prod(sh) == 0 for sh in shapes)


def allocate(shapes: tuple, dtypes: tuple, device) -> tuple:
    """Empty results of these shapes (None stays None): what an input with no elements gives."""
    return tuple(None if sh is None else torch.empty(sh, dtype=dt, device=device) for sh, dt in zip(shapes, dtypes))


def as_tensors(results, like: torch.Tensor):
    """A custom op's results: an absent (None) result as an empty tensor (custom ops return tensors only), each
    contiguous, as its fake is (inductor asserts the fake's strides: a backend's result laid out otherwise, such
    as a gradient written per head and given back as a permuted view, is copied once)."""
    if isinstance(results, tuple):
        return tuple(like.new_empty(0) if r is None else r.contiguous() for r in results)
    return results.contiguous()


def fake(shapes: tuple, dtypes: tuple, like: torch.Tensor) -> tuple:
    """A fake implementation's results: uninitialized, of the declared shapes (an absent one empty)."""
    return tuple(like.new_empty(0) if sh is None else like.new_empty(sh, dtype=dt) for sh, dt in zip(shapes, dtypes))
