"""The interface source of an operator declared by named dimensions (``OpSpec.general``): the checks written out
from the declaration (``shapecode``), the kernels handed the tensors as given (N-D, their strides; last-dimension
stride 1), the empty-input rule (every output empty: allocated here, no kernel called), custom ops with fake
implementations shaped by the declaration, an autograd Function differentiating only the ``grad`` inputs with
each output's gradient in its own shape, and the public forms. Straight-line code with the operator's names."""

from __future__ import annotations

from .. import spec as s
from ..dims import TensorDecl
from .codegen import _check_attr
from .declared import Form, General, general, root, signature
from .layout import SCHEMA_TYPES, attr_of
from .shapecode import Checks, index, run, size_of, variable


def _join(names) -> str:
    return ", ".join(names)


def _tuple(names) -> str:
    names = list(names)
    return names[0] if len(names) == 1 else f"({', '.join(names)})"


def _values(names) -> str:
    return "{" + _join(f"{n!r}: {n}" for n in names) + "}"


def params(spec: s.OpSpec, sig: tuple[str, ...], optional: set[str]) -> str:
    """A def's parameters: an optional tensor defaults to None where every later positional one has a default
    too (``f(q, k, cos)``: k may be None but is always passed), attributes to their declared defaults."""
    out: list[str] = []
    star = sig.index("*") if "*" in sig else len(sig)
    attrs = {a.name for a in spec.attrs}
    for i, n in enumerate(sig):
        if n == "*":
            out.append(n)
        elif n in ("backend", "out"):
            out.append(f"{n}=None")
        elif n in attrs:
            out.append(f"{n}=_DEFAULT_{n}")
        elif n in optional and all(m in optional or m in attrs for m in sig[i + 1 : star]):
            out.append(f"{n}=None")
        else:
            out.append(n)
    return _join(out)


def _shape(t: TensorDecl, bound: dict[str, str]) -> str:
    parts = []
    for item in t.shape.items:
        if item.value is not None:
            parts.append(str(item.value))
        elif item.variadic:
            parts.append(f"*{bound[item.key]}")
        else:
            v = bound[item.key]
            parts.append(
                v
                if item.mul == item.div == 1
                else f"{v} * {item.mul}"
                if item.div == 1
                else f"{v} // {item.div}"
                if item.mul == 1
                else f"{v} * {item.mul} // {item.div}"
            )
    return "(" + ", ".join(parts) + ("," if len(parts) == 1 else "") + ")"


class Writer:
    def __init__(self, spec: s.OpSpec, g: General):
        self.spec, self.g = spec, g
        self.every = {t.name: t for t in spec.declaration.tensors}

    # ------------------------------------------------------------ pieces shared by the forms

    def dtype(self, name: str, form: Form) -> str:
        """An output's dtype as an expression over the form's tensors: its dtype group's first required tensor
        there (or its first), the statistics dtype of that of the tensor a ``stat:`` names, a fixed class's
        dtype, or the primary's."""
        t = self.every[name]
        head = self.every[root(self.every, name)]
        if head.stat is not None:
            return f"_rt.stat_dtype({self._pick(head.stat, form)}.dtype)"
        if t.like is None and t.dtype != "float":
            return {"int64": "torch.int64", "index": "torch.int64", "int32": "torch.int32", "bool": "torch.bool"}[
                t.dtype
            ]
        pick = self._pick(name, form)
        if any(u.name == pick and u.optional for u in form.tensors):  # absent: so is the result (no dtype read)
            return f"({pick}.dtype if {pick} is not None else None)"
        return f"{pick}.dtype"

    def _pick(self, name: str, form: Form) -> str:
        """The form's tensor of ``name``'s dtype group: its first required one (or its first), else the primary."""
        group = root(self.every, name)
        members = [u for u in form.tensors if root(self.every, u.name) == group]
        return next((u for u in members if not u.optional), members[0] if members else form.tensors[0]).name

    def _differentiable(self, output: str) -> bool:
        """Whether an output carries a gradient: a floating one (``float``, ``stat:``) whose ``d<output>`` the
        backward takes (an integer output, or a statistic such as a logsumexp kept for the backward, has none)."""
        head = self.every[root(self.every, output)]
        return (head.dtype == "float" or head.stat is not None) and f"d{output}" in self.spec.backward.tensors

    def shapes(self, fn: str, form: Form, results: tuple[str, ...]) -> str:
        """``fn(tensors)``: the results' shapes from the bound dimensions (None for an absent optional one)."""
        taken = set(form.names)
        needed = {k for r in results for k in self.every[r].shape.names()}
        bound: dict[str, str] = {}
        src = f"def {fn}({_join(form.names)}):\n"
        src += f'    """The shapes of {", ".join(results)} from the dimensions the tensors bind."""\n'
        for t in form.tensors:
            lines = []
            for i, item in enumerate(t.shape.items):
                if item.value is None and item.key in needed and item.key not in bound:
                    var = variable(item.key, taken)
                    if item.variadic:
                        value = f"{t.name}.shape[{run(t.shape)}]"
                    else:
                        value = size_of(f"{t.name}.shape[{index(i, t.shape)}]", item)
                    lines.append(f"{var} = {value}")
                    bound[item.key] = var
            if not lines:
                continue
            if t.optional:
                src += "".join(f"    {line.split(' = ')[0]} = None\n" for line in lines)
                src += f"    if {t.name} is not None:\n" + "".join(f"        {line}\n" for line in lines)
            else:
                src += "".join(f"    {line}\n" for line in lines)
        out = []
        for n in results:
            shape = _shape(self.every[n], bound)
            follows = self.g.present.get(n)
            out.append(
                f"({shape} if {' and '.join(f'{f} is not None' for f in follows)} else None)" if follows else shape
            )
        src += f"    return {_tuple(out) if len(out) > 1 else out[0]}\n"
        return src

    def check(self, fn: str, form: Form, decl_name: str, attrs: tuple[str, ...]) -> str:
        """``fn(tensors, attrs)``: the form's checks; integer ranges (reading the data) where declared."""
        names = (*form.names, *attrs)
        explain = f"_rt.explain({decl_name}, {_values(form.names)}, {_values(attrs)})"
        body = Checks(form, set(names), explain).write(_where_in(self.spec, form))
        src = f"def {fn}({_join(names)}):\n"
        src += (
            f'    """The {"forward" if form is self.g.forward else "backward"}\'s tensors against the declaration: '
            'each dimension bound once, checked everywhere."""\n'
        )
        src += body
        if any(t.ranged for t in form.tensors):
            src += f"    _rt.check_values({decl_name}, {_values(form.names)}, {_values(attrs)})\n"
        return src

    def impl(
        self, fn: str, form: Form, attrs: tuple[str, ...], kernel: str, results: tuple[str, ...], shapes: str
    ) -> str:
        """``fn``: dispatch, the empty-input rule, the kernel call."""
        p = form.tensors[0].name if form is self.g.forward else self.g.bwd_primary
        dispatch = [t for t in form.tensors if t.dtype == "float" and t.like is None]
        required = [t.name for t in dispatch if not t.optional]
        dtypes = "(" + _join(f"{n}.dtype" for n in required) + ("," if len(required) == 1 else "") + ")"
        for t in dispatch:  # an optional tensor of a dtype of its own: served too, where it is given
            if t.optional:
                dtypes += f" + (() if {t.name} is None else ({t.name}.dtype,))"
        call = [*form.names, *attrs]
        out = form is self.g.forward and self.spec.kernel_out  # ``out=``: written into (eager, checked by the caller)
        src = f"def {fn}({_join([*call, 'backend', *(['out=None'] if out else [])])}):\n"
        src += f"    impl = REGISTRY.kernels(OP, {p}.device, {dtypes}, backend)\n"
        src += f"    if {p}.numel() == 0:  # every output empty: no kernel is called\n"
        one = len(results) == 1
        src += f"        shapes = {'(' if one else ''}{shapes}({_join(form.names)}){',)' if one else ''}\n"
        src += "        if _rt.all_empty(shapes):\n"
        dts = "(" + _join(self.dtype(r, form) for r in results) + ("," if one else "") + ")"
        if out:
            src += (
                f"            return (out{'[0]' if one else ''} if out is not None else _rt.allocate(shapes, {dts}, "
                f"{p}.device){'[0]' if one else ''})\n"
            )
        else:
            src += f"            return _rt.allocate(shapes, {dts}, {p}.device){'[0]' if one else ''}\n"
        if self.spec.unit_stride:  # the kernels ask for stride 1 in the last dimension
            for t in form.tensors:
                line = f"{t.name} = _rt.unit_last({t.name})"
                src += f"    if {t.name} is not None:\n        {line}\n" if t.optional else f"    {line}\n"
        if out:
            src += f"    if out is not None:\n        return impl.{kernel}({_join(call)}, out=out)\n"
        src += f"    return impl.{kernel}({_join(call)})\n"
        return src

    def custom(
        self, tag: str, fn: str, form: Form, attrs: tuple[str, ...], results: tuple[str, ...], shapes: str
    ) -> str:
        """The custom op ``tileport::<op>_<tag>`` around ``fn`` (absent results as empty tensors: a custom op
        returns tensors), its fake, and ``_<tag>``: the custom op under torch.compile, ``fn`` in eager mode."""
        call = [*form.names, *attrs, "backend"]
        p = form.tensors[0].name
        dts = [self.dtype(r, form) for r in results]
        sch = self.schema(form, attrs, len(results))
        src = f"def _{tag}_op({_join(call)}):\n"
        if any(t.ranged for t in form.tensors):  # the checks reading data, skipped while tracing, run here
            decl = "_FORWARD" if form is self.g.forward else "_BACKWARD"
            src += f"    _rt.check_values({decl}, {_values(form.names)}, {_values(attrs)})\n"
        src += f"    return _rt.as_tensors({fn}({_join(call)}), {p})\n\n\n"
        src += f"def _{tag}_fake({_join(call)}):\n"
        if len(dts) == 1:
            src += f"    return _rt.fake(({shapes}({_join(form.names)}),), ({dts[0]},), {p})[0]\n\n\n"
        else:
            src += f"    return _rt.fake({shapes}({_join(form.names)}), ({_join(dts)}), {p})\n\n\n"
        src += (
            f'_{tag}_custom = torch.library.custom_op("tileport::{self.spec.name}_{tag}", _{tag}_op, '
            f"mutates_args=(), schema={sch!r})\n"
        )
        src += f"_{tag}_custom.register_fake(_{tag}_fake)\n\n\n"
        src += f"def _{tag}({_join(call)}):\n"
        src += "    if torch.compiler.is_compiling():\n"
        if any(r in self.g.present for r in results):
            src += f"        {_join(results)} = _{tag}_custom({_join(call)})\n"
            back = [
                f"({r} if {' and '.join(f'{f} is not None' for f in self.g.present[r])} else None)"
                if r in self.g.present
                else r
                for r in results
            ]
            src += f"        return {_tuple(back)}\n"
        else:
            src += f"        return _{tag}_custom({_join(call)})\n"
        src += f"    return {fn}({_join(call)})\n"
        return src

    def schema(self, form: Form, attrs: tuple[str, ...], count: int) -> str:
        parts = [f"Tensor{'?' if t.optional else ''} {t.name}" for t in form.tensors]
        parts += [f"{SCHEMA_TYPES[attr_of(self.spec, a).kind]} {a}" for a in attrs] + ["str? backend"]
        result = "Tensor" if count == 1 else "(" + ", ".join(["Tensor"] * count) + ")"
        return f"({', '.join(parts)}) -> {result}"

    # ------------------------------------------------------------ the autograd Function and public forms

    def autograd(self) -> str:
        g = self.g
        if g.backward is None:
            return self.no_backward()
        fwd = [*g.inputs, *g.attrs, "backend"]
        outs = list(g.outputs)
        grads_in = {t.name: f"d{t.name}" for t in self.spec.outputs}
        options = [*g.bwd_attrs, "backend"]
        stats = [o for o in outs if not self._differentiable(o)]
        src = "class _Function(torch.autograd.Function):\n    @staticmethod\n"
        src += f"    def forward(ctx, {_join(fwd)}):\n"
        src += f"        {_join(outs)} = _fwd({_join(fwd)})\n"
        src += f"        ctx.save_for_backward({_join(g.saved)})\n"
        src += f"        ctx.options = ({_join(options)},)\n"
        if stats:
            src += f"        ctx.mark_non_differentiable({_join(stats)})\n"
        src += f"        return {_tuple(outs)}\n\n    @staticmethod\n"
        src += f"    def backward(ctx, {_join(grads_in[o] for o in outs)}):\n"
        if g.saved:
            src += f"        {_join(g.saved)}{',' if len(g.saved) == 1 else ''} = ctx.saved_tensors\n"
        src += f"        {_join(options)}{',' if len(options) == 1 else ''} = ctx.options\n"
        rets = list(g.returns)
        src += f"        {_join(rets)} = _bwd({_join([*g.backward.names, *g.bwd_attrs, 'backend'])})\n"
        src += "        need = ctx.needs_input_grad\n"
        values = []
        for i, n in enumerate(g.inputs):
            values.append(f"(d{n} if need[{i}] else None)" if n in g.differentiable else "None")
        values += ["None"] * (len(fwd) - len(g.inputs))
        src += f"        return {_join(values)}\n"
        return src

    def no_backward(self) -> str:
        """A forward-only operator's Function: the forward, and a backward that says there is none."""
        g = self.g
        fwd = [*g.inputs, *g.attrs, "backend"]
        outs = list(g.outputs)
        src = "class _Function(torch.autograd.Function):\n    @staticmethod\n"
        src += f"    def forward(ctx, {_join(fwd)}):\n"
        src += f"        return _fwd({_join(fwd)})\n\n    @staticmethod\n"
        src += f"    def backward(ctx, {_join(f'd{o}' for o in outs)}):\n"
        message = f"{self.spec.name} has no backward: it is a forward-only operator"
        src += f"        raise NotImplementedError({message!r})\n"
        return src

    def public(self, names: dict[str, str]) -> str:
        g, spec = self.g, self.spec
        optional = {t.name for t in spec.inputs if t.optional}
        fwd = [*g.inputs, *g.attrs, "backend"]
        checks = "".join(_check_attr(spec, a, g.primary) for a in g.attrs)
        checks += f"    _check_forward({_join([*g.inputs, *g.attrs])})\n"
        tracked = [
            f"({n} is not None and {n}.requires_grad)" if n in optional else f"{n}.requires_grad"
            for n in g.differentiable
        ]
        src = f"def {names['function']}({params(spec, signature(spec, 'function'), optional)}):\n"
        src += (
            _doc(
                spec.docs.get(
                    "function", f"Differentiable {spec.name}: {spec.math} (the contract: the operator's package)."
                )
            )
            + checks
        )
        if tracked:
            src += f"    if not (({' or '.join(tracked)}) and torch.is_grad_enabled()):\n"
            src += f"        return _fwd({_join(fwd)})  # no graph to record: skip Function.apply\n"
            src += f"    return _Function.apply({_join(fwd)})\n\n\n"
        else:
            src += f"    return _fwd({_join(fwd)})\n\n\n"
        fsig = signature(spec, "forward")
        src += f"def {names['forward']}({params(spec, fsig, optional)}):\n"
        src += (
            _doc(spec.docs.get("forward", f"The outputs of {spec.name} ({', '.join(g.outputs)}), without autograd."))
            + checks
        )
        if "out" in fsig:
            one = len(g.outputs) == 1
            shapes = f"{'(' if one else ''}_forward_shapes({_join(g.inputs)}){',)' if one else ''}"
            dts = "(" + _join(self.dtype(o, g.forward) for o in g.outputs) + ("," if one else "") + ")"
            src += "    if out is not None:\n"
            src += (
                f"        out = _rt.check_outs({names['forward']!r}, out, {shapes}, {dts}, {g.primary}.device, "
                f"{g.outputs!r})\n"
            )
            src += f"        return _forward_impl({_join(fwd)}, {'out[0]' if one else 'out'})\n"
        src += f"    return _fwd({_join(fwd)})\n\n\n"
        if len(g.outputs) == 1:
            passed = [*g.inputs, *g.attrs, "backend", *(["out"] if "out" in fsig else [])]
            src += f"def _forward_tuple({params(spec, fsig, optional)}):\n"
            src += f"    return ({names['forward']}({_join(f'{n}={n}' for n in passed)}),)\n\n\n"
        else:
            src += f"_forward_tuple = {names['forward']}\n\n\n"
        if g.backward is None:
            return src
        boptional = {t.name for t in g.backward.tensors if t.optional}
        bwd = [*g.backward.names, *g.bwd_attrs, "backend"]
        src += f"def {names['backward']}({params(spec, signature(spec, 'backward'), boptional)}):\n"
        src += _doc(
            spec.docs.get(
                "backward", f"The gradients of {spec.name} ({', '.join(g.returns)}) from what the forward saved."
            )
        )
        src += "".join(_check_attr(spec, a, g.bwd_primary) for a in g.bwd_attrs)
        src += f"    _check_backward({_join([*g.backward.names, *g.bwd_attrs])})\n"
        src += f"    return _bwd({_join(bwd)})\n"
        return src

    def module(self, function: str) -> str:
        """A ``torch.nn.Module``: the attributes its constructor's arguments, every tensor input a ``forward``
        argument."""
        g, spec = self.g, self.spec
        optional = {t.name for t in spec.inputs if t.optional}
        src = "class _Module(torch.nn.Module):\n"
        src += f"    def __init__(self, {_join([*(f'{n}=_DEFAULT_{n}' for n in g.attrs), 'backend=None'])}):\n"
        src += "        super().__init__()\n"
        for n in g.attrs:
            src += _check_attr(spec, n, "None").replace("    ", "        ", 1)
            src += f"        self.{n} = {n}\n"
        src += "        self.backend = backend\n\n"
        sig = tuple(n for n in signature(spec, "function") if n in g.inputs)
        src += f"    def forward(self, {params(spec, sig, optional)}):\n"
        kw = [f"{n}=self.{n}" for n in g.attrs] + ["backend=self.backend"]
        src += f"        return {function}({_join([*(f'{n}={n}' for n in g.inputs), *kw])})\n\n"
        shown = [f"f'{n}={{self.{n}!r}}'" for n in g.attrs]
        src += f"    def extra_repr(self):\n        return ', '.join([{_join(shown)}])\n"
        return src


def _where_in(spec: s.OpSpec, form: Form) -> list:
    """The constraints (with their indices) every name of which the form binds or an attribute gives."""
    known = {k for t in form.tensors for k in t.shape.names()} | {a.name for a in spec.attrs}
    return [(i, c) for i, c in enumerate(spec.declaration.where) if set(c.names) <= known]


def _doc(text: str) -> str:
    text = text.strip("\n")
    if '"""' in text or "\\" in text:
        return f"    __doc__ = {text!r}\n"
    return f'    """{text}"""\n' if "\n" not in text else f'    """{text}\n    """\n'


def source_parts(spec: s.OpSpec, names: dict[str, str]) -> list[str]:
    """The sections of a general operator's interface module (after the shared header)."""
    g = general(spec)
    w = Writer(spec, g)
    fa, ba = g.attrs, g.bwd_attrs
    if g.backward is None:  # a forward-only operator
        return [
            "_FORWARD = _rt.form_declaration(SPEC, 'forward')\n_WHERE = SPEC.declaration.where\n",
            w.check("_check_forward", g.forward, "_FORWARD", fa),
            w.shapes("_forward_shapes", g.forward, g.outputs),
            w.impl("_forward_impl", g.forward, fa, "forward", g.outputs, "_forward_shapes"),
            w.custom("fwd", "_forward_impl", g.forward, fa, g.outputs, "_forward_shapes"),
            w.autograd(),
            w.public(names),
            w.module(names["function"]),
        ]
    return [
        "_FORWARD = _rt.form_declaration(SPEC, 'forward')\n_BACKWARD = _rt.form_declaration(SPEC, 'backward')\n"
        "_WHERE = SPEC.declaration.where\n",
        w.check("_check_forward", g.forward, "_FORWARD", fa),
        w.check("_check_backward", g.backward, "_BACKWARD", ba),
        w.shapes("_forward_shapes", g.forward, g.outputs),
        w.shapes("_backward_shapes", g.backward, g.returns),
        w.impl("_forward_impl", g.forward, fa, "forward", g.outputs, "_forward_shapes"),
        w.impl("_backward_impl", g.backward, ba, "backward", g.returns, "_backward_shapes"),
        w.custom("fwd", "_forward_impl", g.forward, fa, g.outputs, "_forward_shapes"),
        w.custom("bwd", "_backward_impl", g.backward, ba, g.returns, "_backward_shapes"),
        w.autograd(),
        w.public(names),
        w.module(names["function"]),
    ]
