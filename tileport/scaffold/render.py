"""The text of each file ``tileport scaffold`` writes, from a :class:`~.signature.Signature`: the declaration
as Python source, the backend modules' stubs with the kernel call convention the derived interface uses, the
case suite, the tests and the docs page."""

from __future__ import annotations

import math
from pathlib import Path
from string import Template

import yaml

from ..ops import spec as s
from .signature import Signature

TEMPLATES = Path(__file__).resolve().parent / "templates"

# The spec fields a new operator keeps from the one it is made like (the rest are that operator's own).
KEPT = ("dtypes", "modes", "workloads", "sweep", "bar", "precision_dtypes", "near_eps", "kernel_out", "model_sites")
LEFT_OUT = ("originals", "competitors", "studies", "golden", "aliases", "case_attrs", "run", "docs")

# backend module -> (what it is, how to write it)
BACKENDS = {
    "torch": (
        "as the torch composite: the reference (the float64 golden) and the precision benchmark",
        "the math in fp32, fp64 for fp64 inputs (``tileport.backends.torch.compute_dtype``).",
    ),
    "tilelang/cpu": (
        "as TileLang CPU kernels (C target), one compiled kernel per dtype combination serving every M and D",
        "the kernels on rowwise.py's roles, as the kernel modules beside it do (docs page: the helpers).",
    ),
    "triton": (
        "in Triton (natively on a GPU, under the interpreter on the CPU for small shapes)",
        "the kernels, as the modules beside it do (common.py: blocking, bf16 rounding, the interpreter's size limit).",
    ),
    "tilelang/cuda": (
        "as TileLang CUDA kernels (one CTA per row, D dynamic)",
        "``build_forward`` / ``build_backward`` and ``lowered``, as the modules beside it do.",
    ),
    "tilelang/ascend": (
        "for Ascend arch35 in TileLang's ascend dialect (a persistent grid over row blocks, tiles in the UB)",
        "``build_forward`` / ``build_backward`` and ``lowered``, as the modules beside it do.",
    ),
}

HELPERS = """- TileLang CPU (`tileport/backends/tilelang/cpu/rowwise.py`): `row_map` (an element-wise pass over a row, 16
  lanes, the tail included), `row_sum` (an fp32 row sum in a fixed order), `row_sums64` (fp64 sums of
  exact products, rounded once), `row_sum_squares64` (fp32 blocks of four squares accumulated in fp64),
  `row_max`, `splat`, `rounded`, `partial()` (a gradient summed over rows deterministically); `simd.h`: `tp_exp` (packed
  exp), `tp_resid64`; `norm_stats.py`: `inv_rms` (the
  inverse RMS in fp64, rounded once), `eps_stats`, `by_form`, `dweight_term`, `rstd_pair` (the cancellation-free
  backward).
- Triton (`tileport/backends/triton/common.py`): `blocks`, `row_sum_squares`, `column_sum`, `store`,
  `round_to`, `check_size`, `launch_context`.
- TileLang CUDA: `cuda/_common.py` (`bucket`, `threads`, `rsqrt`), `cuda/rows.py` (a row kernel's walks over a
  per-element step macro: `row_sum`, `row_max`, `each`, `columns` for a parameter's gradient, `sum_squares`,
  `rstd`, `masked`); Ascend: `ascend/_common.py` (`bucket`, `rows_per_block`, `refined_rsqrt`, `CORES`, the UB
  budget: `lower` checks it), `ascend/_walk.py` (`Walk`: `for block in walk.blocks(...)`, `for chunk in
  walk.chunks(...)` with their GM <-> UB moves, `each`, `row_sum`, `row_max`, `sum_squares`, `add_columns`).
- The interface: nothing to write; `tileport.ops.interface` derives it from the spec (`docs/interface.md`)."""


def _fill(template: str, **values) -> str:
    return Template((TEMPLATES / template).read_text()).substitute(values)


def tensor_src(t: s.Tensor, like: str | None) -> str:
    args = [repr(t.name), f"s.{t.role.upper()}"]
    if t.optional:
        args.append("optional=True")
    if t.dtype is not None:
        args.append(f"dtype={t.dtype!r}")
    if not (isinstance(t.empty, float) and math.isnan(t.empty)):
        args.append(f"empty=LIKE.tensor({t.name!r}).empty" if like else f"empty={t.empty!r}")
    return f"s.Tensor({', '.join(args)})"


def attr_src(a: s.Attr) -> str:
    args = [repr(a.name), repr(a.default), repr(a.valid)]
    if a.kind:
        args.append(f"s.{a.kind.upper()}")
    if a.choices:
        args.append(repr(tuple(a.choices)))
    if a.aliases:
        args.append(f"aliases={tuple(a.aliases)!r}")
    if not a.kw_only:
        args.append("kw_only=False")
    return f"s.Attr({', '.join(args)})"


def _tuple(items) -> str:
    items = list(items)
    return "(" + ", ".join(items) + ("," if len(items) == 1 else "") + ")"


def declaration(sig: Signature, like: str | None) -> str:
    b = sig.backward
    bwd = [_tuple(map(repr, b.tensors)), _tuple(map(repr, b.attrs))] + (
        [f"given={_tuple(map(repr, b.given))}"] if b.given else []
    )
    lines = [
        f"    inputs={_tuple(tensor_src(t, like) for t in sig.inputs)},",
        f"    attrs={_tuple(attr_src(a) for a in sig.attrs)},",
        f"    options={_tuple(attr_src(a) for a in sig.options)},",
        f"    outputs={_tuple(tensor_src(t, like) for t in sig.outputs)},",
        f"    backward=s.Backward({', '.join(bwd)}),",
        f"    grads={_tuple(tensor_src(t, like) for t in sig.grads)},",
    ]
    if sig.signatures:
        lines.append(f"    signatures={sig.signatures!r},")
    return "\n".join(lines)


def kept_fields(sig: Signature, like: s.OpSpec | None) -> tuple[str, list[str]]:
    """The spec lines kept from ``like`` (or a new operator's defaults), and the fields left out."""
    outs = {t.name for t in sig.outputs}
    ins = {t.name for t in sig.inputs} | {f"d{t.name}" for t in sig.outputs}
    if like is None:
        stats = {t.name: "torch.float32" for t in sig.outputs if t.role == s.PER_ROW}
        body = [
            "    bar=s.ROWWISE_BAR,",
            f"    precision_dtypes={{{', '.join(f'{k!r}: {v}' for k, v in stats.items())}}},",
            "    kernel_out=True,",
        ]
        return "\n".join(body), []
    body = []
    for f in KEPT:
        v = getattr(like, f)
        if f == "precision_dtypes":
            v = {k: d for k, d in v.items() if k in outs}
            body.append(
                f"    precision_dtypes={{{', '.join(f'{k!r}: {d}' for k, d in v.items())}}},  # kept from {like.name}"
            )
        elif f == "model_sites":
            body.append(f"    model_sites={ {k: w for k, w in v.items() if k in ins}!r},  # kept from {like.name}")
        elif f == "kernel_out":
            body.append(f"    kernel_out={v!r},  # kept from {like.name}: forward(out=...)")
        elif v is not None:
            body.append(f"    {f}=LIKE.{f},  # kept from {like.name}")
    left = [f for f in LEFT_OUT if (like.own_run if f == "run" else getattr(like, f))]
    return "\n".join(body), left


def example(sig: Signature) -> str:
    lines = []
    for t in sig.inputs:
        if t.role == s.ROWS:
            lines.append(f"    {t.name} = torch.randn(shape, generator=generator).to(dtype).to(device)")
        else:
            lines.append(
                f"    {t.name} = (1.0 + 0.1 * torch.randn(shape[-1:], generator=generator)).to(dtype).to(device)"
            )
    values = [f"{t.name!r}: {t.name}" for t in sig.inputs] + [f"{a.name!r}: {a.default!r}" for a in sig.attrs]
    lines.append(f"    return {{{', '.join(values)}}}")
    return "\n".join(lines) + "\n"


def byte_counts(sig: Signature) -> tuple[str, str]:
    rows_in = sum(t.role == s.ROWS for t in sig.inputs)
    vectors = sum(t.role == s.VECTOR for t in sig.inputs)
    rows_out = sum(t.role == s.ROWS for t in sig.outputs)
    stats = sum(t.role == s.PER_ROW for t in sig.outputs)
    fwd = f"{rows_in}, {rows_out}, per_row={stats}, vectors={vectors}"
    bwd = f"{rows_in + rows_out}, {rows_in}, per_row={stats}, vectors={2 * vectors}"
    return fwd, bwd


def _call(sig: Signature, name: str) -> str:
    ins = ", ".join(t.name for t in sig.inputs)
    return f"{name}({ins})"


# an out-of-tree package's kernel modules: backend (and device kind) -> module under <package>.kernels
PACKAGE_KERNELS = {
    "torch": "torch_ref",
    "tilelang": "cpu",
    "triton": "triton",
    "tilelang:cuda": "cuda",
    "tilelang:npu-arch35": "ascend",
}
PACKAGE_TARGET = {
    "torch": "torch",
    "tilelang": "tilelang/cpu",
    "triton": "triton",
    "tilelang:cuda": "tilelang/cuda",
    "tilelang:npu-arch35": "tilelang/ascend",
}


def spec_text(
    name: str, sig: Signature, like: s.OpSpec | None, spec_path: str, package: str | None = None
) -> tuple[str, list[str]]:
    kept, left = kept_fields(sig, like)
    if package:  # an operator outside tileport names its kernels and its suite
        mods = ", ".join(f"{k!r}: '{package}.kernels.{v}'" for k, v in PACKAGE_KERNELS.items())
        kept += f'\n    kernels={{{mods}}},\n    suite="suite.yaml",'
    imports = "from tileport.ops import spec as s\n"
    if like is not None:
        imports += f"from tileport.ops.{like.name}.spec import SPEC as LIKE  # the fields kept from it\n"
    params = [t.name if not t.optional else f"{t.name}=None" for t in sig.inputs] + [
        f"{a.name}={a.default!r}" for a in sig.attrs
    ]
    fwd, bwd = byte_counts(sig)
    api = package or "tileport"
    usage = [
        f"y = {api}.{_call(sig, name)}",
        f"outputs = {api}.{_call(sig, name + '_fwd')}",
        f"grads = {api}.{name}_bwd({', '.join(sig.backward.tensors)})",
    ]
    text = _fill(
        "ops_spec.py.tmpl",
        name=name,
        like_note=f" like {like.name}" if like else "",
        imports=imports,
        composite_params=", ".join(params),
        spec_path=spec_path,
        example=example(sig),
        fwd_bytes=fwd,
        bwd_bytes=bwd,
        declaration=declaration(sig, like.name if like else None),
        kept=kept,
        usage="\n".join(usage),
    ).replace("import tileport\n\n", f"import {api}\n\n")
    return text, left


def contract(sig: Signature) -> str:
    ins = ", ".join(f"``{t.name}`` ({t.role}{', optional' if t.optional else ''})" for t in sig.inputs)
    outs = ", ".join(f"``{t.name}`` ({t.role})" for t in sig.outputs)
    grads = ", ".join(f"``{t.name}``" for t in sig.grads)
    attrs = ", ".join(f"``{a.name}`` (default {a.default!r}: {a.valid})" for a in sig.attrs) or "none"
    return (
        f"- Inputs {ins}; attributes {attrs}.\n- Outputs {outs}.\n- Backward: {grads} from "
        f"{', '.join(f'``{n}``' for n in sig.backward.tensors)}.\n- Empty inputs give empty outputs; a row of "
        f"nothing gives nan statistics."
    )


def backend_text(name: str, sig: Signature, target: str, path: str) -> str:
    dims = {a.name for a in sig.attrs if a.kind == s.DIM}
    fwd = (
        [t.name for t in sig.inputs] + [a.name for a in sig.attrs if a.name not in dims] + [o.name for o in sig.options]
    )
    b = sig.backward
    bwd = list(b.tensors) + [a for a in b.attrs if a not in dims] + list(b.given)
    what, how = BACKENDS[target]
    device = target in ("tilelang/cuda", "tilelang/ascend")
    lowered = ""
    if device:
        lowered = f'''

def lowered(dtype: torch.dtype, dim: int, **options) -> dict:
    """{{kernel name: prim_func}} of the forward and backward serving rows of ``dim`` columns, for ``tileport lower``."""
    raise NotImplementedError("TODO({name}): the {target.split("/")[-1]} kernels, in {path}")
'''
    if target.startswith("tilelang"):  # kernel modules: annotations stay evaluated (T.prim_func reads them)
        imports = "\n# No `from __future__ import annotations`: it breaks T.prim_func annotations.\n" + (
            "import torch\n" if device else ""
        )
    else:
        imports = "\nfrom __future__ import annotations\n"
    return _fill(
        "backend.py.tmpl",
        name=name,
        what=what,
        how=how,
        imports=imports,
        forward_params=", ".join(fwd),
        backward_params=", ".join(bwd),
        outputs=", ".join(t.name for t in sig.outputs),
        returns=", ".join(t.name for t in (b.returns or sig.grads)),
        target=target.split("/")[-1],
        path=path,
        lowered=lowered,
    )


def _inputs_literal(sig: Signature, numerics: bool) -> str:
    items = []
    for i, t in enumerate(sig.inputs):
        if t.role == s.ROWS:
            value = f"randn(M, D, dtype=dtype, seed={i})" if numerics else "torch.randn(4, D)"
        else:
            value = f"(1.0 + 0.5 * randn(D, seed={10 + i})).to(dtype)" if numerics else "torch.ones(D)"
        items.append(f"{t.name!r}: {value}")
    return "{" + ", ".join(items) + "}"


def errors_text(name: str, sig: Signature, ops_import: str = "OPS = tileport") -> str:
    p = sig.inputs[0].name
    tests = []
    for t in sig.inputs[1:]:
        if t.role == s.ROWS:
            tests.append(f'''

def test_{t.name}_of_another_shape():
    ins = _inputs()
    ins["{t.name}"] = torch.randn(4, 7)
    with pytest.raises(ValueError, match=r"{t.name} must have {p}'s shape \\(4, 8\\), got \\(4, 7\\)"):
        OPS.{name}(**ins)''')
        else:
            tests.append(f'''

def test_{t.name}_of_another_length():
    ins = _inputs()
    ins["{t.name}"] = torch.ones(5)
    with pytest.raises(ValueError, match=r"{t.name} must have shape x.shape\\[-1:\\] = \\(8,\\), got \\(5,\\)"):
        OPS.{name}(**ins)''')
    for a in sig.attrs:
        bad, exc, match = {
            s.EPS: ("-1.0", "ValueError", f"{a.name} must be finite and >= 0"),
            s.REAL: ("math.inf", "ValueError", f"{a.name} must be finite"),
            s.CHOICE: ("'no such choice'", "ValueError", f"{a.name} must be one of"),
            s.BOOL: ("1", "TypeError", f"{a.name} must be a bool"),
            s.INT: ("1.5", "TypeError", f"{a.name} must be an int"),
        }.get(a.kind, (None, None, None))
        if bad is None:
            continue
        tests.append(f'''

def test_bad_{a.name}():
    with pytest.raises({exc}, match="{match}"):
        OPS.{name}(**_inputs(), {a.name}={bad})''')
    stats = [
        i
        for i, t in enumerate(sig.outputs)
        if t.role == s.PER_ROW and isinstance(t.empty, float) and math.isnan(t.empty)
    ]
    empty = "".join(f"    assert torch.isnan(first[{i}]).all()\n" for i in stats)
    return _fill(
        "test_errors.py.tmpl",
        name=name,
        primary=p,
        inputs=_inputs_literal(sig, False),
        per_input="".join(tests) + "\n",
        empty_stats=empty,
        ops_import=ops_import,
    )


def numerics_text(name: str, sig: Signature, ops_import: str = "OPS = tileport") -> str:
    douts = [f"d{t.name}" for t in sig.outputs if t.role == s.ROWS]
    grads = "{" + ", ".join(f"{d!r}: randn(M, D, dtype=dtype, seed={20 + i})" for i, d in enumerate(douts)) + "}"
    ins = {t.name for t in sig.inputs}
    outs = {t.name for t in sig.outputs}
    saved = [n for n in sig.backward.tensors if n in ins or n in outs]
    saved_expr = (
        "lambda o: {" + ", ".join(f"{n!r}: o[{n!r}]" if n in outs else f"{n!r}: ins[{n!r}]" for n in saved) + "}"
    )
    return _fill(
        "test_numerics.py.tmpl",
        name=name,
        primary=sig.inputs[0].name,
        inputs=_inputs_literal(sig, True),
        grads_in=grads,
        outputs=repr(tuple(t.name for t in sig.outputs)),
        bwd_args=f"**({saved_expr})",
        returns=repr(tuple(t.name for t in (sig.backward.returns or sig.grads))),
        ops_import=ops_import,
    )


def suite_text(name: str, sig: Signature, base_suite: Path) -> str:
    """The case suite: the base operator's levels, standard and primary input (dtypes, ranges, shapes,
    boundary cases), the other inputs and attributes from the signature."""
    base = yaml.safe_load(base_suite.read_text())
    inputs = base["inputs"]
    primary = dict(next(i for i in inputs if i.get("type") == "tensor"))
    p = sig.inputs[0].name
    primary["name"] = p
    attrs_base = {i["name"]: i for i in inputs if i.get("type") == "attrs"}
    new = [primary]
    for t in sig.inputs[1:]:
        if t.role == s.ROWS:
            new.append(
                {
                    "name": t.name,
                    "type": "tensor",
                    "required": True,
                    "like": p,
                    "ranges": {"normal": {"kind": "normal", "scale": 1.0, "weight": 1}},
                }
            )
        else:
            new.append(
                {
                    "name": t.name,
                    "type": "tensor",
                    "required": not t.optional,
                    "like": p,
                    "ranges": {"uniform": {"kind": "uniform", "low": -2.0, "high": 2.0, "weight": 1}},
                }
            )
    for _i, t in enumerate(t for t in sig.outputs if t.role == s.ROWS):
        new.append(
            {
                "name": f"d{t.name}",
                "type": "tensor",
                "required": True,
                "like": p,
                "ranges": {"normal": {"kind": "normal", "scale": 1.0, "weight": 1}},
            }
        )
    for a in sig.attrs:
        kept = attrs_base.get(a.name)
        values = (
            list(a.choices) if a.kind == s.CHOICE else ([a.default, not a.default] if a.kind == s.BOOL else [a.default])
        )
        new.append(kept or {"name": a.name, "type": "attrs", "required": False, "values": values})
    suite = {k: v for k, v in base.items() if k != "inputs"}
    suite.update(
        name=name,
        api=f"tileport.{name}_fwd",
        backward=True,
        outputs=[t.name for t in sig.outputs],
        grad_outputs=[t.name for t in sig.grads],
        inputs=new,
    )
    order = [
        "name",
        "api",
        "api_type",
        "version",
        "extra_share",
        "backward",
        "outputs",
        "grad_outputs",
        "standard",
        "levels",
        "inputs",
    ]
    ordered = {k: suite[k] for k in order if k in suite} | {k: v for k, v in suite.items() if k not in order}
    header = (
        f"# {name} case suite, written by `tileport scaffold` from {base_suite.stem}'s levels, standard and primary "
        f"input (TODO({name}): its ranges and attributes).\n"
    )
    return header + yaml.safe_dump(ordered, sort_keys=False, width=110, default_flow_style=None)


def docs_text(name: str, how: str, sig: Signature, remains: str) -> str:
    signature = (
        f"({', '.join(t.name + ('?' if t.optional else '') for t in sig.inputs)}; "
        f"{', '.join(f'{a.name}={a.default!r}' for a in sig.attrs)}) -> ({', '.join(t.name for t in sig.outputs)}), "
        f"({', '.join(t.name for t in sig.grads)})"
    )
    return _fill("docs.md.tmpl", name=name, how=how, signature=signature, remains=remains, helpers=HELPERS)


def pyproject_text(name: str, dist: str, package: str) -> str:
    return f"""[build-system]
requires = ["setuptools>=61"]
build-backend = "setuptools.build_meta"

[project]
name = "{dist}"
version = "0.1.0"
description = "{name}: an operator for tileport (TODO({name}): what it computes)"
requires-python = ">=3.10"
dependencies = ["tileport"]

# tileport finds the operator through this entry point (`tileport ops` lists it once the package is installed)
[project.entry-points."tileport.ops"]
{name} = "{package}.spec:SPEC"

[tool.setuptools.packages.find]
include = ["{package}*"]

[tool.setuptools.package-data]
"{package}" = ["suite.yaml"]
"""
