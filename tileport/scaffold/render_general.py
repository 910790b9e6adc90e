"""The text of each file ``tileport scaffold`` writes for a general operator (tensors by named dimensions): the spec
with its one-line declarations, the sizes every dimension is drawn at, the example and bytes moved from the
declaration; the generated interface; the backend stubs in the general call order; the tests, whose expected
messages are the checks' own (computed here by binding the declaration); the docs page."""

from __future__ import annotations

import math
import re
import sys
import textwrap
import types
from dataclasses import replace
from pathlib import Path

import torch
import yaml

from ..cases.schema import SUITES
from ..ops import dims
from ..ops import spec as s
from ..ops.catalog import kernel_specs
from ..ops.dims import TensorDecl
from ..ops.interface import files as interface_files
from ..ops.interface.declared import general
from .declared import IN_CACHE, LARGE, Sizing, as_spec, root_class, units_of
from .render import PACKAGE_KERNELS, _fill, _tuple, attr_src
from .signature import Signature

# The spec fields a new operator keeps from a general one it is made like, where its tensors are that one's.
KEPT = ("dtypes", "modes", "workloads", "sweep", "bar", "unit_stride")
LEFT_OUT = ("originals", "competitors", "studies", "golden", "aliases", "docs", "signatures")

# backend module -> (what it is, how to write it); {example}: a general operator's module beside it
BACKENDS = {
    "torch": (
        "as the torch composite: the reference (the float64 golden) and the precision benchmark",
        "the math in fp32, fp64 for fp64 inputs (``tileport.backends.torch.compute_dtype``).",
    ),
    "tilelang/cpu": (
        "as TileLang CPU grid kernels (C target) over the tensors as given, one compiled kernel per dtype "
        "combination serving every shape",
        "the kernels as grid kernels (interface.py: N-D strided tensors, tables, integer and optional "
        "buffers, scalars), as {example} does with pairs.py's helpers (docs page: the helpers).",
    ),
    "triton": (
        "in Triton (natively on a GPU, under the interpreter on the CPU for small shapes)",
        "the kernels over the tensors' strides, as {example} beside it does (common.py: blocking, bf16 "
        "rounding, the interpreter's size limit).",
    ),
    "tilelang/cuda": ("as TileLang CUDA kernels", "``build`` and ``lowered``, as {example} beside it does."),
    "tilelang/ascend": (
        "for Ascend arch35 in TileLang's ascend dialect (tiles in the UB)",
        "the kernels and ``lowered``, as the modules beside it do.",
    ),
}

HELPERS = """- TileLang CPU: a grid kernel (`tileport/backends/tilelang/cpu/interface.py`) takes N-D tensors with their
  strides (`T.StridedTensor`), broadcast tables, integer and optional buffers (`has_<name>`) and scalars, its
  work cut into ranges of items (`first`, `count`) by the driver; `pairs.py`/`pairs.h`: `tokens`, `table`,
  `index`, `rotate_heads` (pairs or halves of a head, 16 lanes, the table row chosen by position), `copy_rest`,
  `mul` (a product rounded on its own); `rowwise.py`: `row_map`, `row_sum`, `splat`, `rounded`; `simd.h`: `tp_exp`.
- Triton (`tileport/backends/triton/common.py`): `blocks`, `store`, `round_to`, `check_size`, `launch_context`;
  {example} for strided N-D tensors, tables gathered by position and optional inputs.
- TileLang CUDA (`cuda/_common.py`, {example}); Ascend (`ascend/_common.py`): `bucket`, `CORES`, the UB budget
  (`lower` checks it).
- The interface: nothing to write; `tileport generate` writes `_interface.py` from the spec's declaration
  (`docs/interface.md`): checks naming the tensor, the dimension and both sizes, empty calls answered without a
  kernel, custom ops, autograd (gradients of the `grad` inputs only), the public forms and the module."""


def example_op(new: str) -> str | None:
    """A general operator already written, whose kernel modules and suite a new one's are modelled on (the first
    with a suite), or None: the generic layers name no operator."""

    return next(
        (n for n, spec in kernel_specs().items() if spec.general and n != new and _suite_path(n) is not None), None
    )


# ---------------------------------------------------------------- what the declaration gives the texts


def _every(sig: Signature) -> dict[str, TensorDecl]:
    return {t.name: t for t in as_spec("op", sig).declaration.tensors}


def _test_dtype(t: TensorDecl, every: dict[str, TensorDecl], dtype: torch.dtype = torch.float32) -> torch.dtype:
    return {"float": dtype, "int32": torch.int32, "bool": torch.bool}.get(root_class(t, every), torch.int64)


def _bound_src(v, binding: str, attrs: dict) -> str:
    """A range bound as source: an int, a dimension's size, an attribute's default."""
    if isinstance(v, int):
        return str(v)
    if v in attrs:
        return repr(attrs[v])
    return f'{binding}.size("{v}")'


def draw_src(t: TensorDecl, every: dict, attrs: dict, floating_src: str, gen: str, binding: str = "b") -> str:
    """The source drawing input ``t`` at the binding's sizes: ``floating_src`` (``{shape}``: its shape) for a
    floating one; an integer one within its declared range, else in [0, its last dimension's size); a bool one
    as 0 or 1."""
    shape = f'{binding}.shape_of("{t.name}")'
    cls = root_class(t, every)
    if cls == "float":
        return floating_src.format(shape=shape)
    if cls == "bool":
        return f"torch.randint(0, 2, {shape}, generator={gen}).bool()"
    if t.ranged and not (isinstance(t.low, str) and attrs.get(t.low, 0) is None):
        low = _bound_src(t.low, binding, attrs)
        high = _bound_src(t.high, binding, attrs)
        if not high.lstrip("-").isdigit():
            high = f"max({int(low) + 1}, {high})" if low.lstrip("-").isdigit() else f"max({low} + 1, {high})"
    else:
        low, high = "0", f"max(1, {shape}[-1])" if t.shape.items else "2"
    cast = ".to(torch.int32)" if cls == "int32" else ""
    return f"torch.randint({low}, {high}, {shape}, generator={gen}){cast}"


def elementwise(sig: Signature) -> bool:
    """Every output in an input's shape (no reduction, no gather into another shape)."""
    shapes = {str(t.shape) for t in sig.inputs}
    return all(str(t.shape) in shapes for t in sig.outputs)


def _label(shape: tuple[int, ...]) -> str:
    return "x".join(map(str, shape))


def _shape_src(shape: tuple[int, ...]) -> str:
    return "(" + ", ".join(map(str, shape)) + ("," if len(shape) == 1 else "") + ")"


def _sizes_src(sizes: dict) -> str:
    return "{" + ", ".join(f'"{k}": {v!r}' for k, v in sizes.items()) + "}"


# ---------------------------------------------------------------- spec.py


def declarations(sig: Signature) -> str:
    def group(name: str, items) -> str:
        lines = "".join(f"    {_q(str(t))},\n" for t in items)
        return f"{name} = (\n{lines})\n" if items else f"{name} = ()\n"

    return "\n".join(
        [
            group("INPUTS", sig.inputs),
            group("OUTPUTS", sig.outputs),
            group("GRADS", sig.grads),
            f"WHERE = {_tuple(map(_q, sig.where))}\n",
        ]
    )


def _bar(name: str, sig: Signature, sizing: Sizing) -> str:
    if not elementwise(sig):
        return f"BAR = ()  # TODO({name}): the speed bar (not elementwise: its bytes against a copy's need the math)\n"
    return (
        f"IN_CACHE = ({_q(_label(sizing.sweep[IN_CACHE]))},)\nLARGE = ({_q(_label(sizing.sweep[LARGE]))},)\n\n"
        "# An elementwise operator (each output in an input's shape): kernel-only at 0.8 of the copy of its bytes or\n"
        "# better, in cache and large.\n"
        "BAR = (\n"
        '    s.Criterion("fwd in cache: kernel-only share of copy", ("fwd",), IN_CACHE, "bandwidth_share", 0.8,\n'
        "                kernel_only=True),\n"
        '    s.Criterion("fwd large: kernel-only share of copy", ("fwd",), LARGE, "bandwidth_share", 0.8,\n'
        "                kernel_only=True),\n"
        ")\n"
    )


def spec_text(
    name: str, sig: Signature, sizing: Sizing, like: s.OpSpec | None, spec_path: str, package: str | None = None
) -> tuple[str, list[str]]:
    """spec.py, and the fields of ``like`` not kept."""
    every = _every(sig)
    attrs = {a.name: a.default for a in sig.attrs}
    p = sig.inputs[0].name
    keep = like is not None and like.general and like.inputs == sig.inputs
    imports = "from tileport.ops import dims\nfrom tileport.ops import spec as s\n"
    if keep:
        imports += f"from tileport.ops.{like.name}.spec import SPEC as LIKE  # the fields kept from it\n"
    ins = sig.inputs
    params = [f"{t.name}=None" if all(u.optional for u in ins[i:]) else t.name for i, t in enumerate(ins)]
    params += [f"{a.name}={a.default!r}" for a in sig.attrs]
    others = [k for k in sizing.rules]
    rules = ", ".join(f'"{k}": {sizing.rule_src(k)}' for k in others)
    said = ", ".join(others)
    if not others:
        rules = None
    if others:
        them = "it" if len(others) == 1 else "them"
        sizes_doc = f"those it binds, and {said} from them.\n    TODO({name}): {said} as a real workload sizes {them}."
    else:
        sizes_doc = "those it binds (every dimension is one of its)."
    floats = "torch.randn({shape}, generator=generator).to(dtype)"
    draws = [f'        "{t.name}": {draw_src(t, every, attrs, floats, "generator")}.to(device),' for t in sig.inputs]
    draws += [f'        "{a.name}": {a.default!r},' for a in sig.attrs]
    itemsize = {
        t.name: _test_dtype(t, every).itemsize for t in sig.inputs + sig.outputs if root_class(t, every) != "float"
    }
    b = sig.backward
    reads_b = [n for n in b.tensors]
    kept = ["    dtypes=s.FLOATS,"]  # the kept fields, or a new operator's
    sweep = "[" + ", ".join(_shape_src(sh) for sh in sizing.sweep) + "]"
    workloads = f'{{"in-cache": {_shape_src(sizing.sweep[IN_CACHE])}, "large": {_shape_src(sizing.sweep[LARGE])}}}'
    fields = {
        "workloads": f"{workloads},  # TODO({name}): a model's shapes of {p}",
        "sweep": f"{sweep},  # shapes of {p}",
        "bar": "BAR,",
        "unit_stride": "True,  # the kernels get stride 1 in each tensor's last dimension (False: as given)",
    }
    if keep:
        own = [f for f in KEPT if getattr(like, f) or f == "unit_stride"]
        kept = [f"    {f}=LIKE.{f},  # kept from {like.name}" if f in own else f"    {f}={fields[f]}" for f in KEPT]
        kept = [line for line in kept if "=LIKE." in line or not line.startswith(("    dtypes=", "    modes="))]
    else:
        kept += [f"    {k}={v}" for k, v in fields.items()]
    bwd = f"s.Backward({_tuple(map(_q, b.tensors))}, {_tuple(map(_q, b.attrs))})"
    api = package or "tileport"
    outs = ", ".join(o.name for o in sig.outputs)
    usage = [
        f"{outs} = {api}.{name}({', '.join(t.name for t in sig.inputs)})",
        f"grads = {api}.{name}_bwd({', '.join(b.tensors)})",
    ]
    text = _fill(
        "general_spec.py.tmpl",
        name=name,
        like_note=f" like {like.name}" if like else "",
        imports=imports,
        declarations=declarations(sig),
        composite_params=", ".join(params),
        spec_path=spec_path,
        primary=p,
        sizes_doc=sizes_doc,
        rows_shape=_rows_shape(sig.inputs[0]),
        rules=f"{{**b.sizes, {rules}}}" if rules else "b.sizes",
        draws="\n".join(draws),
        itemsize=f"ITEMSIZE = {_sizes_src(itemsize)}" if itemsize else "ITEMSIZE: dict[str, int] = {}",
        fwd_reads=", ".join(_q(t.name) for t in sig.inputs),
        fwd_writes=", ".join(_q(t.name) for t in sig.outputs),
        bwd_reads=", ".join(map(_q, reads_b)),
        bwd_writes=", ".join(_q(t.name) for t in sig.grads),
        bar="" if keep else _bar(name, sig, sizing) + "\n",
        attrs=_tuple(attr_src(a) for a in sig.attrs),
        backward=bwd,
        kept="\n".join(kept) + (_package_fields(package) if package else ""),
        usage="\n".join(usage),
        api=api,
    )
    return text, left_out(sig, like)


def _rows_shape(primary: TensorDecl) -> str:
    """The lines of ``sizes`` reading a (rows, width) shape (the Triton lowering's) as the primary's: the rows in
    its first dimension, the width in its last, 1 elsewhere; none where a 2-D shape is one of its own already."""
    rank = len(primary.shape.items)
    if primary.shape.variadic is not None or rank == 2 or rank == 0:
        return ""
    as_primary = "(shape[0] * shape[1],)" if rank == 1 else f"(shape[0], {'1, ' * (rank - 2)}shape[1])"
    return f"    if len(shape) == 2:  # (rows, width): the Triton lowering's\n        shape = {as_primary}\n"


def _package_fields(package: str) -> str:

    mods = ", ".join(f"{k!r}: '{package}.kernels.{v}'" for k, v in PACKAGE_KERNELS.items())
    return f'\n    kernels={{{mods}}},\n    suite="suite.yaml",'


def interface_text(spec_source: str, module: str, path: str) -> str:
    """The generated ``_interface.py`` of the spec ``spec_source`` (``tileport generate``'s text): the spec module
    run under its own name (``module``), so that the file imports its SPEC from ``.spec``, then removed again."""
    mod = types.ModuleType(module)
    mod.__file__ = path
    saved = sys.modules.get(module)
    sys.modules[module] = mod
    try:
        exec(compile(spec_source, path, "exec"), mod.__dict__)
        return interface_files.text(mod.SPEC)
    finally:
        if saved is None:
            sys.modules.pop(module, None)
        else:
            sys.modules[module] = saved


# ---------------------------------------------------------------- the package, the backends


def contract(sig: Signature) -> str:
    """The contract paragraph of the operator's docstring: its declarations, and what each kernel is handed."""
    attrs = ", ".join(f"``{a.name}`` (default {a.default!r}: {a.valid})" for a in sig.attrs) or "none"
    where = f"; where {', '.join(sig.where)}" if sig.where else ""
    b = sig.backward
    items = [
        f"Inputs {', '.join(f'``{t}``' for t in sig.inputs)}; attributes {attrs}{where}.",
        f"Outputs {', '.join(f'``{t}``' for t in sig.outputs)}.",
        f"Backward: {', '.join(f'``{t.name}``' for t in sig.grads)} from {', '.join(f'``{n}``' for n in b.tensors)}.",
        "Empty inputs give empty outputs (no kernel is called).",
    ]
    text = "".join(textwrap.fill(item, 116, initial_indent="- ", subsequent_indent="  ") + "\n" for item in items)
    handed = (
        f"What a backend's kernel module gives (called by the interface for a non-empty "
        f"``{sig.inputs[0].name}``; each tensor N-D with its strides, stride 1 in its last dimension "
        "(``unit_stride``); an optional one may be None):"
    )
    fwd = ", ".join([t.name for t in sig.inputs] + [a.name for a in sig.attrs])
    bwd = ", ".join([*b.tensors, *b.attrs])
    calls = (
        f"    forward({fwd}) -> {', '.join(t.name for t in sig.outputs)}\n"
        f"    backward({bwd}) -> {', '.join(t.name for t in sig.grads)}\n"
    )
    return f"{text}\n{textwrap.fill(handed, 116)}\n\n{calls}"


def backend_text(name: str, sig: Signature, target: str, path: str) -> str:
    b = sig.backward
    what, how = BACKENDS[target]
    op = example_op(name)
    how = how.replace("{example}", f"{op}.py" if op else "the general operators' modules")
    device = target in ("tilelang/cuda", "tilelang/ascend")
    lowered = ""
    if device:
        lowered = f'''

def lowered(dtype: torch.dtype, dim: int, **options) -> dict:
    """{{kernel name: prim_func}} of the forward and backward for a last dimension of ``dim`` (``tileport lower``)."""
    raise NotImplementedError("TODO({name}): the {target.split("/")[-1]} kernels, in {path}")
'''
    if target.startswith("tilelang"):  # kernel modules: annotations stay evaluated (T.prim_func reads them)
        imports = "\n# No `from __future__ import annotations`: it breaks T.prim_func annotations.\n" + (
            "import torch\n" if device else ""
        )
    else:
        imports = "\nfrom __future__ import annotations\n"
    return _fill(
        "general_backend.py.tmpl",
        name=name,
        what=what,
        how=how,
        imports=imports,
        primary=sig.inputs[0].name,
        forward_params=", ".join([t.name for t in sig.inputs] + [a.name for a in sig.attrs]),
        backward_params=", ".join([*b.tensors, *b.attrs]),
        outputs=", ".join(t.name for t in sig.outputs),
        returns=", ".join(t.name for t in sig.grads),
        target=target.split("/")[-1],
        path=path,
        lowered=lowered,
    )


# ---------------------------------------------------------------- the tests


def _meta(t: TensorDecl, shape, every: dict, dtype: torch.dtype | None = None) -> torch.Tensor:
    return torch.empty(shape, dtype=dtype or _test_dtype(t, every), device="meta")


def _error(form_decl, tensors: dict, attrs: dict) -> Exception | None:
    """What the generated checks raise for these tensors: ``dims.bind`` of the form's declaration (``explain``)."""
    try:
        dims.bind(form_decl, tensors, attrs)
    except (TypeError, ValueError) as exc:
        return exc
    return None


def _mismatches(sig: Signature, sizes: dict, form_decl, every: dict, attrs: dict) -> list[tuple[str, tuple, str]]:
    """(input, its shape with one dimension changed, the message) for each dimension an input shares with an
    earlier one."""
    b = dims.bind_sizes(sig.inputs, sizes, attrs)
    base = {t.name: _meta(t, b.shape_of(t.name), every) for t in sig.inputs}
    seen: set[str] = set()
    out = []
    for t in sig.inputs:
        shape = b.shape_of(t.name)
        at, extra = 0, len(shape) - t.shape.fixed
        done = set()
        for item in t.shape.items:
            width = extra if item.variadic else 1
            if item.value is None and item.key in seen and item.key not in done and width > 0:
                done.add(item.key)
                changed = list(shape)
                changed[at] += 1
                exc = _error(form_decl, base | {t.name: _meta(t, tuple(changed), every)}, attrs)
                if isinstance(exc, ValueError):
                    out.append((t.name, tuple(changed), str(exc)))
            at += width
        seen |= set(t.shape.names())
    return out


_WRONG = {"float": torch.int32, "int64": torch.int32, "int32": torch.int64, "index": torch.float32, "bool": torch.int64}


def _dtype_errors(
    sig: Signature, sizes: dict, form_decl, every: dict, attrs: dict
) -> list[tuple[str, torch.dtype, str]]:
    """(input, a dtype outside its class, the message) for each input."""
    b = dims.bind_sizes(sig.inputs, sizes, attrs)
    base = {t.name: _meta(t, b.shape_of(t.name), every) for t in sig.inputs}
    out = []
    for t in sig.inputs:
        wrong = (
            torch.float16 if t.like is not None and root_class(t, every) == "float" else _WRONG[root_class(t, every)]
        )
        exc = _error(form_decl, base | {t.name: _meta(t, b.shape_of(t.name), every, wrong)}, attrs)
        if isinstance(exc, TypeError):
            out.append((t.name, wrong, str(exc)))
    return out


def _constraint_errors(
    sig: Signature, sizing: Sizing, form_decl, every: dict, attrs: dict
) -> list[tuple[str, dict, str]]:
    """(the constraint, the sizes changed, the message) breaking each constraint, where changing one of its
    dimensions does."""
    sizes = sizing.tests[0]
    units = units_of(as_spec("op", sig).declaration)
    out = []
    for c in dims.Declaration(sig.inputs, (), sig.where, tuple(attrs)).where:
        for n in (n for n in c.names if isinstance(sizes.get(n), int)):
            unit = units.get(n, 1)
            tries = [sizes[n] + unit, 2 * sizes[n], 4 * sizes[n] + unit, unit, 2 * unit]
            found = None
            for v in tries:
                change = {n: v}
                b = dims.bind_sizes(sig.inputs, sizes | change, attrs)
                tensors = {t.name: _meta(t, b.shape_of(t.name), every) for t in sig.inputs}
                exc = _error(form_decl, tensors, attrs)
                if isinstance(exc, ValueError) and str(exc).startswith(f"the sizes must satisfy {c},"):
                    found = (str(c), change, str(exc))
                    break
            if found:
                out.append(found)
                break
    return out


def _range_errors(sig: Signature, sizes: dict, form_decl, every: dict, attrs: dict) -> list[tuple[str, int, str]]:
    """(input, a value just past its range's top, the message) for each integer input with a declared range."""
    b = dims.bind_sizes(sig.inputs, sizes, attrs)

    def value(v):
        return v if isinstance(v, int) else attrs.get(v, b.sizes.get(v))

    lows = {u.name: value(u.low) for u in sig.inputs if u.ranged}
    tensors = {u.name: torch.zeros(b.shape_of(u.name), dtype=_test_dtype(u, every)) for u in sig.inputs}
    for n, low in lows.items():
        if isinstance(low, int):
            tensors[n].fill_(low)
    out = []
    for t in sig.inputs:
        if not t.ranged or math.prod(b.shape_of(t.name)) == 0:
            continue
        high, low = value(t.high), lows[t.name]
        if not isinstance(high, int) or not isinstance(low, int) or high in [value(a) for a in t.allow]:
            continue
        tensors = tensors | {t.name: tensors[t.name].clone()}
        tensors[t.name].view(-1)[0] = high
        try:
            dims.bind(form_decl, tensors, attrs).check_values()
        except IndexError as exc:
            out.append((t.name, high, str(exc)))
    return out


# an attribute kind -> (a value it refuses, the error, what the message says)
BAD_ATTRS = {
    s.EPS: ("-1.0", "ValueError", "must be finite and >= 0"),
    s.REAL: ("math.inf", "ValueError", "must be finite"),
    s.PROB: ("1.5", "ValueError", "must be in \\[0, 1\\]"),
    s.CHOICE: ("'no such choice'", "ValueError", "must be one of"),
    s.BOOL: ("1", "TypeError", "must be a bool"),
    s.INT: ("1.5", "TypeError", "must be an int"),
}


def _empty(sig: Signature, sizing: Sizing) -> tuple[dict, dict] | None:
    """(sizes with one of the primary's dimensions 0, each result's shape then) where every output and gradient is
    then empty and the constraints still hold; None where no such dimension is."""
    every = as_spec("op", sig).declaration
    g = general(as_spec("op", sig))
    for k in sig.inputs[0].shape.names():
        change = {k: (0,) if k.startswith("*") else 0}
        if k.startswith("*") and not sizing.tests[0][k]:
            continue
        try:
            b = dims.bind_sizes(every, sizing.tests[0] | change, {a.name: a.default for a in sig.attrs})
        except ValueError:
            continue
        shapes = {n: b.shape_of(n) for n in g.outputs + g.returns}
        if all(math.prod(sh) == 0 for sh in shapes.values()):
            return change, shapes
    return None


def numerics_text(name: str, sig: Signature, sizing: Sizing, ops_import: str = "OPS = tileport") -> str:
    g = general(as_spec(name, sig))
    p = sig.inputs[0].name
    outs = {t.name for t in sig.outputs}
    douts = [n for n in sig.backward.tensors if n.startswith("d") and n[1:] in outs]
    sizes = "\n".join(f"    {_sizes_src(z)}," for z in sizing.tests)
    strided = ""
    if sig.inputs[0].shape.items:
        strided = f'''

def test_a_strided_{p}_gives_the_bits_of_its_contiguous_copy(randn):
    """Kernels take the tensors as given (N-D, with strides): {p} as a view into a wider buffer computes what its
    contiguous copy does."""
    inputs, _ = _draw(SIZES[0], torch.float32, randn)
    x = inputs["{p}"]
    wide = randn((*x.shape[:-1], x.shape[-1] + 3), seed=99)
    wide[..., : x.shape[-1]] = x
    strided = OPS.{name}_fwd(**(inputs | {{"{p}": wide[..., : x.shape[-1]]}}))
    for a, b in zip(_tuple(strided), _tuple(OPS.{name}_fwd(**inputs)), strict=True):
        assert (a is None and b is None) or torch.equal(a, b)
'''
    return _fill(
        "general_test_numerics.py.tmpl",
        name=name,
        primary=p,
        ops_import=ops_import,
        sizes=sizes,
        ids="[" + ", ".join(map(_q, ("small", "odd", "single")[: len(sizing.tests)])) + "]",
        outputs=_tuple(map(_q, g.outputs)),
        results=_tuple(map(_q, g.returns)),
        backward=_tuple(map(_q, g.backward.names)),
        inputs="(" + ", ".join(_q(t.name) for t in sig.inputs) + ("," if len(sig.inputs) == 1 else "") + ")",
        gradients="(" + ", ".join(map(_q, douts)) + ("," if len(douts) == 1 else "") + ")",
        strided=strided,
    )


def _q(text: str) -> str:
    """A string literal, in double quotes where it has none."""
    return f'"{text}"' if '"' not in text and "\\" not in text else repr(text)


_OPS = {
    "<=": "le",
    ">=": "ge",
    "==": "eq",
    "!=": "ne",
    "<": "lt",
    ">": "gt",
    "%": "mod",
    "//": "div",
    "/": "over",
    "*": "times",
    "+": "plus",
    "-": "minus",
}


def _slug(constraint: str) -> str:
    """``R <= D`` -> ``r_le_d``: a constraint in a test's name."""
    text = re.sub("|".join(re.escape(o) for o in _OPS), lambda m: f" {_OPS[m[0]]} ", constraint)
    return re.sub(r"\W+", "_", text).strip("_").lower()


def errors_text(name: str, sig: Signature, sizing: Sizing, ops_import: str = "OPS = tileport") -> str:
    every = _every(sig)
    attrs = {a.name: a.default for a in sig.attrs}
    spec = as_spec(name, sig)
    g = general(spec)
    form = g.forward.declaration
    sizes = sizing.tests[0]
    p = sig.inputs[0].name
    draws = "\n".join(
        f'        "{t.name}": ' + draw_src(t, every, attrs, "torch.randn({shape})", "g") + "," for t in sig.inputs
    )
    tests = []
    mismatches = _mismatches(sig, sizes, form, every, attrs)
    if mismatches:
        rows = "".join(f"        ({_q(n)}, {_shape_src(sh)}, {_q(m)}),\n" for n, sh, m in mismatches)
        tests.append(f'''


@pytest.mark.parametrize(
    "name,shape,message",
    [
{rows}    ],
)
def test_a_dimension_that_disagrees_is_named_with_both_sizes(name, shape, message):
    """Each dimension an input shares with an earlier one, changed in it alone: ValueError naming the tensor, the
    dimension and both sizes."""
    ins = _inputs()
    ins[name] = torch.zeros(shape, dtype=ins[name].dtype)
    for fn in (OPS.{name}, OPS.{name}_fwd):
        with pytest.raises(ValueError, match=f"^{{re.escape(message)}}$"):
            fn(**ins)''')
    wrong = _dtype_errors(sig, sizes, form, every, attrs)
    if wrong:
        rows = "".join(f"        ({_q(n)}, {d}, {_q(m)}),\n" for n, d, m in wrong)
        tests.append(f"""


@pytest.mark.parametrize(
    "name,dtype,message",
    [
{rows}    ],
)
def test_a_dtype_outside_its_class_is_refused(name, dtype, message):
    ins = _inputs()
    ins[name] = ins[name].to(dtype)
    with pytest.raises(TypeError, match=f"^{{re.escape(message)}}$"):
        OPS.{name}(**ins)""")
    for c, change, message in _constraint_errors(sig, sizing, form, every, attrs):
        said = ", ".join(f"{k} = {v}" for k, v in change.items())
        tests.append(f'''


def test_sizes_that_break_{_slug(c)}():
    """{said}: every tensor drawn at those sizes, {c} broken."""
    with pytest.raises(ValueError, match=re.escape({_q(message)})):
        OPS.{name}(**_inputs({_sizes_src(change)}))''')
    for t, value, message in _range_errors(sig, sizes, form, every, attrs):
        tests.append(f'''


def test_{t}_outside_its_range():
    """A value of {t} outside its declared range: IndexError naming the value, where it is and the range."""
    ins = _inputs()
    ins["{t}"].view(-1)[0] = {value}
    with pytest.raises(IndexError, match=re.escape({_q(message)})):
        OPS.{name}(**ins)''')
    for a in sig.attrs:
        bad, exc, match = BAD_ATTRS.get(a.kind, (None, None, None))
        match = f"{a.name} {match}"
        if bad is not None:
            tests.append(f'''


def test_bad_{a.name}():
    with pytest.raises({exc}, match=r"{match}"):
        OPS.{name}(**_inputs(), {a.name}={bad})''')
    empty = _empty(sig, sizing)
    if empty is not None:
        change, shapes = empty
        said = ", ".join(f"{k} = {v}" for k, v in change.items())
        outs = [_shape_src(shapes[n]) for n in g.outputs]
        rets = [_shape_src(shapes[n]) for n in g.returns]
        douts = [n for n in g.backward.names if n not in {t.name for t in sig.inputs} | set(g.outputs)]
        tests.append(f'''


def test_an_empty_call_gives_empty_results_without_a_kernel():
    """{said}: every output and gradient is empty, answered by the interface (no kernel is called: the stubs
    are not reached)."""
    ins = _inputs({_sizes_src(change)})
    b = dims.bind_sizes(SPEC.inputs, SIZES | {_sizes_src(change)}, {{a.name: a.default for a in SPEC.attrs}})
    outs = _tuple(OPS.{name}_fwd(**ins))
    assert [tuple(o.shape) for o in outs] == [{", ".join(outs)}]
    given = ins | dict(zip({_tuple(map(_q, g.outputs))}, outs))
    given |= {{n: torch.zeros(b.shape_of(SPEC.declaration[n])) for n in {_tuple(map(_q, douts))}}}
    results = _tuple(OPS.{name}_bwd(**{{n: given[n] for n in {_tuple(map(_q, g.backward.names))}}}))
    assert [tuple(r.shape) for r in results] == [{", ".join(rets)}]''')
    return _fill(
        "general_test_errors.py.tmpl",
        name=name,
        primary=p,
        ops_import=ops_import,
        sizes=_sizes_src(sizes),
        draws=draws,
        tests="".join(tests) + "\n",
        math_import="import math\n" if "math.inf" in "".join(tests) else "",
    )


def docs_text(name: str, how: str, sig: Signature, remains: str) -> str:
    signature = "; ".join(f"`{t}`" for t in sig.inputs) + (f"; where {', '.join(sig.where)}" if sig.where else "")
    signature += f"; attributes {', '.join(f'{a.name}={a.default!r}' for a in sig.attrs) or 'none'}"
    signature += f" -> {', '.join(f'`{t}`' for t in sig.outputs)}; backward -> {', '.join(f'`{t}`' for t in sig.grads)}"
    op = example_op(name)
    helpers = HELPERS.replace("{example}", f"`{op}.py`" if op else "the general operators' modules")
    return _fill("docs.md.tmpl", name=name, how=how, signature=signature, remains=remains, helpers=helpers)


def module_path(root: Path, name: str) -> str:
    return str(root / "tileport" / "ops" / name / "spec.py")


def left_out(sig: Signature, like: s.OpSpec | None) -> list[str]:
    """The fields of ``like`` its own (not kept): those of its math, its users, its own executor."""
    if like is None:
        return []
    own = LEFT_OUT if like.general else LEFT_OUT + ("case_attrs", "near_eps", "precision_dtypes", "model_sites")
    return [f for f in own if getattr(like, f)] + (["run"] if like.own_run else [])


# A primary dimension's range by its place from the right (the last: a head or row; then heads, tokens, batch).
PRIMARY_RANGES = ((1, 160), (1, 8), (1, 64), (1, 4))
SINGLE_RANGE = (1, 4096)  # a primary of one dimension
RUN_RULE = {"ranks": [0, 1, 2], "range": [1, 8]}  # a variadic run's ranks, and each of its items
INT_DTYPE_NAMES = {"index": ["int64", "int32"], "int64": ["int64"], "int32": ["int32"]}


def _dim_rules(sig: Signature, sizing: Sizing) -> dict:
    """Every dimension's rule, the primary's first (the others' bounds read them): a range by its place, in steps
    that keep every ``NAME/k`` whole; another dimension mostly equal to the one ``sizes`` sets it to (its
    constraints then hold), sometimes anywhere up to it."""
    units = units_of(as_spec("op", sig).declaration)
    steps = dict(units)
    for other, rule in sizing.rules.items():  # a primary dimension another one equals takes its steps too
        if isinstance(rule, str) and not rule.startswith("*"):
            steps[rule] = math.lcm(steps.get(rule, 1), units.get(other, 1))
    keys = list(sizing.primary.shape.names())
    singles = [k for k in keys if not k.startswith("*")]
    rules: dict = {}
    for k in keys:
        if k.startswith("*"):
            rules[k] = dict(RUN_RULE)
            continue
        j = len(singles) - 1 - singles.index(k)
        low, high = SINGLE_RANGE if len(singles) == 1 and not keys[0].startswith("*") else PRIMARY_RANGES[min(j, 3)]
        if j == 1 and singles.index(k) == 0:
            low, high = PRIMARY_RANGES[2]  # the first of two: rows, as many as tokens
        step = steps.get(k, 1)
        rules[k] = [max(low, step), high] if step == 1 else {"range": [step, max(high, step)], "step": step}
    for other, rule in sizing.rules.items():
        step = units.get(other, 1)
        if other.startswith("*"):
            rules[other] = {"ranks": [len(rule)], "range": [1, 8]} if isinstance(rule, tuple) else dict(RUN_RULE)
        elif isinstance(rule, str):
            rules[other] = [{"range": [rule, rule], "weight": 3}, {"range": [step, rule], "weight": 1}]
        else:
            rules[other] = [{"choices": [rule], "weight": 3}, {"range": [step, 4 * rule], "weight": 1}]
        for option in rules[other] if isinstance(rules[other], list) else ():
            option.update({"step": step} if step > 1 and "range" in option else {})
    return rules


def _value_rule(t: TensorDecl) -> dict | None:
    """An integer input's suite value rule: its declared range (``index``, a share at its allowed values), else
    positions in [0, the size of its last dimension), as the tests draw them."""
    if t.ranged:
        return {"kind": "index", "ignore": 0.1} if t.allow else None
    last = t.shape.items[-1] if t.shape.items else None
    if last is None or last.variadic:
        high: int | str = 2
    elif last.value is not None:
        high = last.value
    else:
        high = (
            last.name
            if last.mul == last.div == 1
            else f"{last.mul}*{last.name}"
            if last.div == 1
            else f"{last.name} // {last.div}"
        )
    return {"kind": "positions", "low": 0, "high": high}


def _suite_path(op: str) -> Path | None:

    path = SUITES / f"{op}.yaml"
    return path if path.exists() else None


def _base_suite(new: str) -> tuple[str, dict]:
    """A general operator's suite whose standard and levels a new one starts from (its name, its data)."""
    op = example_op(new)
    return (op, yaml.safe_load(_suite_path(op).read_text())) if op else ("the standard", {})


def _same_tensors(sig: Signature, like: s.OpSpec | None) -> bool:
    return (
        like is not None
        and like.general
        and (like.inputs, like.outputs, like.grads) == (sig.inputs, sig.outputs, sig.grads)
    )


def with_like_sizes(sizing: Sizing, sig: Signature, like: s.OpSpec | None) -> Sizing:
    """``sizing`` with the tests' sizes of an operator of the same tensors taken from its suite's fixed sizes
    (which its own rules hold: a packed row's one batch and N + 1 offsets, a state per sequence), where it has
    them; else as drawn from the declaration."""
    own = _suite_path(like.name) if _same_tensors(sig, like) else None
    fixed = (yaml.safe_load(own.read_text()) or {}).get("fixed") if own is not None else None
    return replace(sizing, tests=tuple(fixed[:3])) if fixed else sizing


def _declared_values(item: dict, sig: Signature) -> dict:
    """An attribute's values in a suite copied from another operator's: those the new declaration takes (a None
    the other operator's own executor read as its default is no number for a derived interface)."""
    attr = next((a for a in sig.attrs if a.name == item.get("name")), None)
    if item.get("type") != "attrs" or attr is None or attr.kind not in (s.REAL, s.EPS, s.INT, s.PROB):
        return item
    keep = [i for i, v in enumerate(item["values"]) if v is not None] or [None]
    out = dict(item, values=[item["values"][i] if i is not None else attr.default for i in keep])
    if "weights" in item:
        out["weights"] = [item["weights"][i] for i in keep if i is not None] or None
        if out["weights"] is None:
            del out["weights"]
    return out


def suite_text(name: str, sig: Signature, sizing: Sizing, like: s.OpSpec | None = None) -> str:
    """The case suite by named dimensions (``tileport.cases.named``): a general operator's standard and levels,
    every dimension's rule, every input (the first floating one with the case dtypes and the special scenarios, the
    optional ones left out in a share of the cases, integer ones with their value rules), the attributes' values."""
    if _same_tensors(sig, like):
        own = _suite_path(like.name)
        if own is not None:  # the same tensors: that operator's own rules
            data = yaml.safe_load(own.read_text()) | {"name": name, "api": f"tileport.{name}_fwd"}
            data["inputs"] = [_declared_values(item, sig) for item in data["inputs"]]
            head = f"# {name} case suite, written by `tileport scaffold` from {like.name}'s (the same declaration).\n"
            return head + yaml.safe_dump(data, sort_keys=False, width=110, default_flow_style=None)
    every = _every(sig)
    base_op, base = _base_suite(name)
    g = general(as_spec(name, sig))
    inputs: list[dict] = []
    first = True
    for t in sig.inputs:
        item: dict = {"name": t.name, "type": "tensor"}
        if t.optional:
            item |= {"required": False, "omit": 0.25}
        cls = root_class(t, every)
        if cls == "float" and first:
            item["dtypes"] = {"values": ["float16", "bfloat16", "float32"]}
            item["boundary"] = {
                f: True for f in ("has_empty", "has_infnan", "has_scalar", "has_upper_border", "has_lower_border")
            }
            first = False
        elif cls != "float":
            item["dtypes"] = {"values": list(INT_DTYPE_NAMES.get(cls, [cls]))}
            rule = None if cls == "bool" else _value_rule(t)  # a bool mask is drawn at even odds
            if rule is not None:
                item["values"] = rule
        inputs.append(item)
    for a in sig.attrs:
        values = (
            list(a.choices) if a.kind == s.CHOICE else ([a.default, not a.default] if a.kind == s.BOOL else [a.default])
        )
        inputs.append({"name": a.name, "type": "attrs", "values": values})
    suite = {
        "name": name,
        "api": f"tileport.{name}_fwd",
        "api_type": base.get("api_type", "function"),
        "version": base.get("version", 2),
        "backward": True,
        "outputs": list(g.outputs),
        "grad_outputs": list(g.returns),
        "standard": base.get("standard", {"acc": "double_bm", "golden": "float64", "benchmark": "torch"}),
        "levels": base.get("levels", {"quick": {"cases": 48, "runs": 2, "limits": "L0"}}),
        "dims": _dim_rules(sig, sizing),
        "max_length": 65536,
        "fixed": [sizing.tests[1]],
        "base": sizing.tests[0],
        "inputs": inputs,
    }
    shapes = ", ".join(f"{t.name} {t.shape}" for t in sig.inputs)
    said = (
        f"{name} case suite, by named dimensions, written by `tileport scaffold` with {base_op}'s standard and "
        f"levels: `tileport verify {name}` expands it into seeded cases, each tensor in the shape its declaration "
        f"gives it ({shapes}) from the case's sizes, d<output> in its output's shape. A dimension the primary does "
        f"not have is mostly the size `sizes` in spec.py gives it (the constraints then hold), sometimes smaller. "
        f"TODO({name}): the dimensions' ranges, the integer inputs' value rules and the attribute values a model uses."
    )
    header = "\n".join("# " + line for line in textwrap.wrap(said, 114)) + "\n"
    return header + yaml.safe_dump(suite, sort_keys=False, width=110, default_flow_style=None)
