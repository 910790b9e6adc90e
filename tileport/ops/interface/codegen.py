"""The interface source of a row-wise operator (roles ``rows``, ``vector``, ``per_row``, ``reduced``: the (M, D)
view its kernels ask for), written from its declaration: straight-line Python with the operator's own parameter
names, so an eager call costs what a hand-written one does (no argument binding, no loops over the declaration)
and a traceback shows readable lines. ``files.text`` puts it in a module; ``derive`` imports it.
"""

from __future__ import annotations

from .. import spec as s
from .layout import Layout, attr_of, layout, schema, signature, tensor_roles


def _join(names) -> str:
    return ", ".join(names)


def _tuple(names) -> str:
    """One name as itself, several as a tuple expression."""
    names = list(names)
    return names[0] if len(names) == 1 else f"({', '.join(names)})"


def _assign(names, call: str) -> str:
    """``y = call`` for one result, ``y, rstd = call`` for several (a custom op returns a tuple only then)."""
    return f"{_join(names)} = {call}"


def _check_attr(spec: s.OpSpec, name: str, ref: str, given: bool = False) -> str:
    """The line checking attribute ``name`` by its kind, rebinding it to the checked value."""
    a = attr_of(spec, name)
    expr = {
        s.EPS: f"_c.eps_value({name}, {name!r})",
        s.REAL: f"_c.finite_real({name}, {name!r})",
        s.PROB: f"_c.probability({name}, {name!r})",
        s.CHOICE: f"_c.choice({name}, {name!r}, _CHOICES_{name}, _ALIASES_{name})",
        s.DIM: f"_c.dim_index({name}, {ref}.dim())",
        s.BOOL: f"_c.flag({name}, {name!r})",
        s.INT: f"_c.integer({name}, {name!r})",
        s.DTYPE: f"_c.output_dtype({name}, {ref}.dtype, {name!r})",
    }.get(a.kind)
    if expr is None:
        return ""
    return f"    {name} = None if {name} is None else {expr}\n" if given else f"    {name} = {expr}\n"


def _check_tensor(t: s.Tensor, ref: str, first: bool) -> str:
    n = t.name
    if first:
        line = f"_c.floating_tensor({n}, {n!r})"
    elif t.role == s.ROWS:
        line = f"_c.like_rows({n}, {n!r}, {ref}, {ref!r})"
    elif t.role == s.VECTOR:
        return f"    _c.vector_tensor({n}, {n!r}, {ref})\n"  # None allowed: it says so itself
    elif t.role == s.PER_ROW:
        line = f"_c.per_row_tensor({n}, {n!r}, {ref}, {ref!r})"
    else:
        line = f"_c.floating_tensor({n}, {n!r})"
    return f"    if {n} is not None:\n        {line}\n" if t.optional else f"    {line}\n"


def _params(spec: s.OpSpec, sig: tuple[str, ...], prefix: str = "_DEFAULT_") -> str:
    """A def's parameter list with the declared defaults (bound as ``<prefix><name>`` in the namespace: the
    backward's own prefix, as a given attribute's default there is None)."""
    roles = tensor_roles(spec)
    required = {n for n, t in roles.items() if not t.optional}
    out = []
    for n in sig:
        if n == "*" or n in required:
            out.append(n)
        else:
            out.append(f"{n}={prefix}{n}")
    return _join(out)


def _dtypes(roles: dict, names) -> str:
    """The dispatch dtypes as an inline tuple expression (a generic helper cost half a microsecond a call):
    each tensor's dtype (an optional one's only when given) and each resolved dtype option."""
    fixed, parts = [], []
    for n in names:
        t = roles.get(n)
        if t is not None and t.optional:
            parts.append(f"(() if {n} is None else ({n}.dtype,))")
        else:
            fixed.append(f"{n}.dtype" if t is not None else n)
            continue
    head = f"({', '.join(fixed)},)"
    return " + ".join([head, *parts]) if parts else head


def _values(names) -> str:
    return "{" + _join(f"{n!r}: {n}" for n in names) + "}"


def _rows_arg(t: s.Tensor, lay: Layout) -> str:
    n = t.name
    if t.role == s.ROWS:
        inner = f"{n}m" if lay.dim else n  # the reduced dimension moved last, once (``_moved_lines``)
        arg = f"_rt.rows_2d({inner})"
    elif t.role == s.PER_ROW:
        arg = f"{n}.reshape(-1)"
    else:
        return n
    return f"(None if {n} is None else {arg})" if t.optional else arg


def _moved_lines(tensors, lay: Layout) -> str:
    """``xm = _rt.moved(x, dim)`` for each rows tensor, where the reduced dimension is an attribute."""
    if not lay.dim:
        return ""
    out = ""
    for t in tensors:
        if t.role == s.ROWS:
            moved = f"_rt.moved({t.name}, {lay.dim})"
            out += f"    {t.name}m = {'None if ' + t.name + ' is None else ' if t.optional else ''}{moved}\n"
    return out


def _rows_view(out: str, like: str) -> str:
    """``out`` (M, D) viewed as ``like``'s shape: itself for a 2-D ``like``, else a view with the sizes as
    arguments (torch parses them faster than a torch.Size: docs/notes/measurements.md)."""
    return f"({out} if {like}.dim() == 2 else {out}.view(*{like}.shape))"


def forward_impl(spec: s.OpSpec, lay: Layout) -> str:
    x, dim = lay.primary, lay.dim
    params = [*lay.inputs, *lay.attrs, *lay.options, "backend"]
    kernel_attrs = [a for a in lay.attrs if a != dim] + list(lay.options)
    args = [_rows_arg(t, lay) for t in spec.inputs] + kernel_attrs
    outs = list(lay.outputs)
    roles = {t.name: t.role for t in spec.outputs}
    src = f"def _forward_impl({_join(params)}, out=None):\n"
    src += (
        f"    impl = REGISTRY.kernels(OP, {x}.device, {_dtypes(tensor_roles(spec), [*lay.inputs, *lay.options])}, "
        "backend)\n"
    )
    src += f"    if {x}.numel() == 0:\n"
    src += (
        f"        return _rt.empty_forward(SPEC, {x}, {_values(lay.attrs + lay.options)}, "
        f"out{', ' + dim if dim else ''})\n"
    )
    if dim:
        src += _moved_lines(spec.inputs, lay)
        src += f"    {_assign(outs, f'impl.forward({_join(args)})')}\n"
        back = [
            f"_rt.back({_rows_view(o, x + 'm')}, {dim})" if roles[o] == s.ROWS else f"{o}.view({x}m.shape[:-1])"
            for o in outs
        ]
        src += f"    return {_tuple(back)}\n"
        return src
    src += "    if out is None:\n"
    src += f"        {_assign(outs, f'impl.forward({_join(args)})')}\n"
    src += f"        if {x}.dim() == 2:\n            return {_tuple(outs)}\n"
    views = [f"{o}.view(*{x}.shape)" if roles[o] == s.ROWS else f"{o}.view({x}.shape[:-1])" for o in outs]
    src += f"        return {_tuple(views)}\n"
    flat = [
        f"out[{i}].view(-1, {x}.shape[-1])" if roles[o] == s.ROWS else f"out[{i}].view(-1)" for i, o in enumerate(outs)
    ]
    src += (
        f"    impl.forward({_join(args)}, out=out if {x}.dim() == 2 else ({_join(flat)},))  # checked: (M, D), (M,)\n"
    )
    src += f"    return {'out' if len(outs) > 1 else 'out[0]'}\n"
    return src


def backward_impl(spec: s.OpSpec, lay: Layout) -> str:
    roles = tensor_roles(spec)
    p, dim = lay.bwd_primary, lay.dim
    params = [*lay.bwd_tensors, *lay.bwd_attrs, "backend", *lay.bwd_given]
    dispatch = [n for n in lay.bwd_tensors if roles[n].role in (s.ROWS, s.VECTOR)]
    args = (
        [_rows_arg(roles[n], lay) for n in lay.bwd_tensors]
        + [a for a in lay.bwd_attrs if a != dim]
        + list(lay.bwd_given)
    )
    rets = list(lay.returns)
    src = f"def _backward_impl({_join(params)}):\n"
    src += f"    impl = REGISTRY.kernels(OP, {p}.device, {_dtypes(roles, dispatch)}, backend)\n"
    src += f"    if {p}.numel() == 0:\n"
    src += (
        f"        return _rt.backward_results(SPEC, {p}, {_values(lay.bwd_tensors)}, True{', ' + dim if dim else ''})\n"
    )
    src += _moved_lines([roles[n] for n in lay.bwd_tensors], lay)
    src += f"    {_assign(rets, f'impl.backward({_join(args)})')}\n"
    final = []
    for r in rets:
        t = roles[r]
        if t.role == s.REDUCED:
            final.append(f"({p}.new_empty(0) if {r} is None else {r}.to({r[1:]}.dtype))")
        elif dim:
            final.append(f"_rt.back({_rows_view(r, p + 'm')}, {dim})")
        else:
            src += f"    if {p}.dim() != 2:\n        {r} = {r}.view(*{p}.shape)\n"
            final.append(r)
    src += f"    return {_tuple(final)}\n"
    return src


def custom_ops(spec: s.OpSpec, lay: Layout) -> str:
    fwd = [*lay.inputs, *lay.attrs, *lay.options, "backend"]
    bwd = [*lay.bwd_tensors, *lay.bwd_attrs, "backend", *lay.bwd_given]
    resolved = [f"({o} if {o} is not None else {lay.primary}.dtype)" for o in lay.options]
    dim = f", {lay.dim}" if lay.dim else ""
    return f"""def _fwd_op({_join(fwd)}):
    return _forward_impl({_join([*lay.inputs, *lay.attrs, *resolved, "backend"])})


def _fwd_fake({_join(fwd)}):
    return _rt.new_outputs(SPEC, {lay.primary}, {_values(lay.options)}{dim})


_fwd_custom = torch.library.custom_op("tileport::{spec.name}_fwd", _fwd_op, mutates_args=(), schema={schema(spec, "fwd", tuple(fwd))!r})
_fwd_custom.register_fake(_fwd_fake)


def _bwd_op({_join(bwd)}):
    return _backward_impl({_join(bwd)})


def _bwd_fake({_join(bwd)}):
    return _rt.backward_results(SPEC, {lay.bwd_primary}, {_values(lay.bwd_tensors)}, False{dim})


_bwd_custom = torch.library.custom_op("tileport::{spec.name}_bwd", _bwd_op, mutates_args=(), schema={schema(spec, "bwd", tuple(bwd))!r})
_bwd_custom.register_fake(_bwd_fake)


def _fwd({_join(fwd)}):
    if torch.compiler.is_compiling():
        return _fwd_custom({_join(fwd)})
    return _forward_impl({_join(fwd)})


def _bwd({_join(bwd)}):
    if torch.compiler.is_compiling():
        return _bwd_custom({_join(bwd)})
    return _backward_impl({_join(bwd)})
"""


def autograd(spec: s.OpSpec, lay: Layout) -> str:
    fwd = [*lay.inputs, *lay.attrs, *lay.options, "backend"]
    outs = list(lay.outputs)
    roles = {t.name: t.role for t in spec.outputs}
    stats = [o for o in outs if roles[o] != s.ROWS]
    options = [*lay.bwd_attrs, "backend", *lay.bwd_given]
    incoming = [f"d{o}" for o in outs]
    bwd = [*lay.bwd_tensors, *lay.bwd_attrs, "backend", *lay.bwd_given]
    rets = list(lay.returns)
    src = "class _Function(torch.autograd.Function):\n    @staticmethod\n"
    src += f"    def forward(ctx, {_join(fwd)}):\n"
    src += f"        {_assign(outs, f'_fwd({_join(fwd)})')}\n"
    src += f"        ctx.save_for_backward({_join(lay.saved)})\n"
    src += f"        ctx.options = ({_join(options)},)\n"
    if spec.backward.to_grads:
        src += f"        ctx.dtypes = ({_join(f'None if {n} is None else {n}.dtype' for n in lay.inputs)},)\n"
    if stats:
        src += f"        ctx.mark_non_differentiable({_join(stats)})\n"
    src += f"        return {_tuple(outs)}\n\n    @staticmethod\n"
    src += f"    def backward(ctx, {_join(incoming)}):\n"
    if lay.saved:
        src += f"        {_join(lay.saved)}{',' if len(lay.saved) == 1 else ''} = ctx.saved_tensors\n"
    src += f"        {_join(options)}{',' if len(options) == 1 else ''} = ctx.options\n"
    src += f"        {_assign(rets, f'_bwd({_join(bwd)})')}\n"
    src += "        need = ctx.needs_input_grad\n"
    if spec.backward.to_grads:
        src += f"        g = _TO_GRADS({_values(rets)}, dict(zip({lay.inputs!r}, ctx.dtypes)))\n"
    grads = []
    for i, t in enumerate(spec.inputs):
        d = f"d{t.name}"
        value = f"g.get({d!r})" if spec.backward.to_grads else (d if d in rets else "None")
        guard = f"need[{i}]" + (f" and {t.name} is not None" if t.optional and t.name in lay.saved else "")
        grads.append(f"({value} if {guard} else None)" if value != "None" else "None")
    grads += ["None"] * (len(fwd) - len(spec.inputs))
    src += f"        return {_join(grads)}\n"
    return src


def public(spec: s.OpSpec, lay: Layout, names: dict[str, str]) -> str:
    x = lay.primary
    fwd = [*lay.inputs, *lay.attrs, *lay.options, "backend"]
    checks = "".join(_check_tensor(t, x, i == 0) for i, t in enumerate(spec.inputs))
    checks += "".join(_check_attr(spec, a, x) for a in lay.attrs + lay.options)
    tracked = [
        f"({t.name} is not None and {t.name}.requires_grad)" if t.optional else f"{t.name}.requires_grad"
        for t in spec.inputs
    ]
    pick = (
        ""
        if len(lay.outputs) == 1
        else (
            f"[{lay.returned[0]}]"
            if len(lay.returned) == 1
            else (f"[:{len(lay.returned)}]" if lay.returned == tuple(range(len(lay.returned))) else "")
        )
    )
    src = f"def {names['function']}({_params(spec, signature(spec, 'function'))}):\n{checks}"
    src += f"    if not (({' or '.join(tracked)}) and torch.is_grad_enabled()):\n"
    src += f"        return _fwd({_join(fwd)}){pick}  # no graph to record: skip Function.apply\n"
    src += f"    return _Function.apply({_join(fwd)}){pick}\n\n\n"
    fsig = signature(spec, "forward")
    src += f"def {names['forward']}({_params(spec, fsig)}):\n{checks}"
    if "out" in fsig:
        src += "    if out is not None:\n"
        src += f"        out = _rt.check_out(SPEC, {names['forward']!r}, out, {x}, {_values(lay.options)})\n"
        src += f"        return _forward_impl({_join(fwd)}, out)\n"
    src += f"    return _fwd({_join(fwd)})\n\n\n"
    if len(lay.outputs) == 1:  # the generic layers' convention, a tuple, with the same parameters (no repacking)
        star = fsig.index("*") if "*" in fsig else len(fsig)
        call = [*fsig[:star], *(f"{n}={n}" for n in fsig[star + 1 :])]
        src += f"def _forward_tuple({_params(spec, fsig)}):\n    return ({names['forward']}({_join(call)}),)\n\n\n"
    roles = tensor_roles(spec)
    p = lay.bwd_primary
    bchecks = "".join(_check_tensor(roles[n], p, n == p) for n in lay.bwd_tensors)
    bchecks += "".join(_check_attr(spec, a, p) for a in lay.bwd_attrs)
    bchecks += "".join(_check_attr(spec, a, p, given=True) for a in lay.bwd_given)
    bwd = [*lay.bwd_tensors, *lay.bwd_attrs, "backend", *lay.bwd_given]
    rets = list(lay.returns)
    final = [f"({r} if {r[1:]} is not None else None)" if roles[r].role == s.REDUCED else r for r in rets]
    src += f"def {names['backward']}({_params(spec, signature(spec, 'backward'), '_BWD_DEFAULT_')}):\n{bchecks}"
    src += f"    {_assign(rets, f'_bwd({_join(bwd)})')}\n"
    src += f"    return {_tuple(final)}\n"
    return src


def module(spec: s.OpSpec, lay: Layout, function: str) -> str:
    """A ``torch.nn.Module`` of the operator: its vector inputs are parameters (``hidden_size`` of them,
    present unless ``elementwise_affine=False`` for optional ones), its attributes constructor arguments."""
    vectors = [t for t in spec.inputs if t.role == s.VECTOR]
    rows = [t.name for t in spec.inputs if t.role == s.ROWS]
    scalars = [*lay.attrs, *lay.options]
    params = (["hidden_size"] if vectors else []) + [f"{n}=_DEFAULT_{n}" for n in scalars]
    if vectors:
        params += ["elementwise_affine=True", "backend=None", "device=None", "dtype=None"]
    else:
        params += ["backend=None"]
    src = "class _Module(torch.nn.Module):\n"
    src += f"    def __init__(self, {_join(params)}):\n        super().__init__()\n"
    if vectors:
        src += "        self.hidden_size = _c.integer(hidden_size, 'hidden_size')\n"
    for n in scalars:
        a = attr_of(spec, n)
        if a.kind == s.DIM:
            src += f"        {n} = _c.integer({n}, {n!r})\n"
        elif a.kind == s.DTYPE:
            src += f"        {n} = _c.output_dtype({n}, None, {n!r})\n"
        else:
            src += _check_attr(spec, n, "None").replace("    ", "        ", 1)
        src += f"        self.{n} = {n}\n"
    src += "        self.backend = backend\n"
    for t in vectors:
        cond = "elementwise_affine" if t.optional else "True"
        src += f"        if {cond}:\n"
        src += (
            f"            self.{t.name} = torch.nn.Parameter(torch.full((hidden_size,), {t.init!r}, device=device, "
            "dtype=dtype))\n"
        )
        src += f"        else:\n            self.register_parameter({t.name!r}, None)\n"
    src += f"\n    def forward(self, {_join(rows)}):\n"
    kw = [f"{t.name}=self.{t.name}" for t in vectors] + [f"{n}=self.{n}" for n in scalars] + ["backend=self.backend"]
    src += f"        return {function}({_join(rows)}, {_join(kw)})\n"
    shown = (["self.hidden_size"] if vectors else []) + [
        f"f'{n}={{self.{n}!r}}'" if attr_of(spec, n).kind == s.CHOICE else f"f'{n}={{self.{n}}}'" for n in scalars
    ]
    shown = [f"str({v})" if v == "self.hidden_size" else v for v in shown]
    src += f"\n    def extra_repr(self):\n        return ', '.join([{_join(shown)}])\n"
    return src


def parts(spec: s.OpSpec, names: dict[str, str]) -> list[str]:
    """The sections of a row-wise operator's interface module (after the shared header: ``files.text``)."""
    lay = layout(spec)
    tail = f"_forward_tuple = {names['forward']}\n" if len(spec.outputs) > 1 else ""
    return [
        forward_impl(spec, lay),
        backward_impl(spec, lay),
        custom_ops(spec, lay),
        autograd(spec, lay),
        public(spec, lay, names),
        module(spec, lay, names["function"]),
        tail,
    ]
