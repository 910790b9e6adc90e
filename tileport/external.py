"""An implementation tileport does not own, put through an operator's contract: ``--impl MODULE:FUNCTION`` or
``--impl path/to/file.py:FUNCTION`` for ``tileport verify`` and ``tileport bench``.

The callable is resolved once before any case runs (a bad target is a clear error) and again by name in every
worker (pool and Ray): a provider is named ``impl:<target>``. Its parameters are mapped onto the spec's inputs
and attributes by name, with the names users' code gives them (``input`` / ``hidden_states`` for the first
input, ``epsilon`` / ``variance_epsilon`` for eps, ...), ``normalized_shape`` derived from the first input;
``--arg NAME=INPUT`` maps one by hand. Its returned values map onto the spec's outputs in order (a single tensor
is the first); outputs it does not return are listed as not judged. Gradients are judged where the returned
tensors carry autograd history (``torch.autograd.grad`` with the case's output gradients); where they do not,
the backward is listed as not tested.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.metadata
import importlib.util
import inspect
import math
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from .ops import dims
from .ops import spec as s

PREFIX = "impl:"

# the names users' code gives an input or attribute (the first rows input: any of FIRST)
FIRST = ("x", "input", "hidden_states", "hidden", "inp", "inputs", "a", "X")
ALIASES = {
    "residual": ("residual", "res", "residual_in", "R"),
    "weight": ("weight", "w", "W", "gamma", "scale"),
    "bias": ("bias", "b", "B", "beta"),
    "gate": ("gate", "z", "g"),
    "eps": ("eps", "epsilon", "variance_epsilon", "norm_eps", "layer_norm_eps", "rms_norm_eps"),
    "dim": ("dim", "axis"),
}
# parameters derived from the first input
DERIVED = {"normalized_shape": lambda x: tuple(x.shape[-1:]), "hidden_size": lambda x: x.shape[-1]}


def canonical(spec: s.OpSpec, name: str) -> str:
    """The operator's input or attribute a user's name stands for (``input`` -> the first input, ``epsilon`` ->
    eps), or the name itself."""
    names = [t.name for t in spec.inputs] + [a.name for a in spec.attrs]
    if name in names or name in DERIVED:
        return name
    if name in FIRST:
        return spec.inputs[0].name
    return next((n for n in names if name in ALIASES.get(n, ())), name)


class ImplError(ValueError):
    """An implementation that cannot be put through the contract: its target does not resolve, or its signature
    cannot be mapped; the message names the thing and what was expected."""


class ImplCaseError(RuntimeError):
    """One case the implementation could not run as asked, or whose result does not fit the contract."""


def is_impl(provider: str) -> bool:
    return provider.startswith(PREFIX)


def import_file(path: Path):
    """The module in the Python file at ``path``, imported once per process under a name of its own (a stable
    digest of the path); the file's own exception propagates, with the module forgotten."""
    name = "tileport_file_" + hashlib.sha1(str(path).encode()).hexdigest()[:12]
    if name not in sys.modules:
        module_spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(module_spec)
        sys.modules[name] = module
        try:
            module_spec.loader.exec_module(module)
        except BaseException:
            del sys.modules[name]
            raise
    return sys.modules[name]


def is_tile_kernel(obj) -> bool:
    """Whether ``obj`` is a TileLang kernel: a ``T.prim_func`` (no callable) or a ``@tilelang.jit`` function."""
    return type(obj).__module__.startswith(("tilelang", "tvm")) and type(obj).__name__ in {"PrimFunc", "JITImpl"}


def load_callable(target: str) -> tuple[Callable, str, str]:
    """(the callable, its module name, its file) of ``MODULE:FUNCTION`` or ``path/to/file.py:FUNCTION``
    (a dotted FUNCTION reaches into a class or an object); a module-level ``T.prim_func`` is taken too, as the
    TileLang kernel it is (``lower --impl``, ``verify --impl`` build it)."""
    where, sep, name = target.rpartition(":")
    if not sep or not where or not name:
        raise ImplError(f"--impl {target!r}: expected MODULE:FUNCTION or path/to/file.py:FUNCTION")
    if where.endswith(".py") or "/" in where:
        path = Path(where).expanduser().resolve()
        if not path.is_file():
            raise ImplError(f"--impl {target!r}: no file {path}")
        try:
            module = import_file(path)
        except Exception as exc:
            raise ImplError(f"--impl {target!r}: {path} does not import: {type(exc).__name__}: {exc}") from None
    else:
        try:
            module = importlib.import_module(where)
        except ImportError as exc:
            raise ImplError(f"--impl {target!r}: module {where!r} does not import: {exc}") from None
    obj: Any = module
    for part in name.split("."):
        if not hasattr(obj, part):
            raise ImplError(f"--impl {target!r}: {where} has no {name!r}")
        obj = getattr(obj, part)
    if not callable(obj) and not is_tile_kernel(obj):
        raise ImplError(f"--impl {target!r}: {name} is a {type(obj).__name__}, not a callable or a TileLang kernel")
    return obj, getattr(module, "__name__", where), str(getattr(module, "__file__", "") or where)


def _version(module: str) -> str:
    top = module.split(".")[0]
    try:
        dist = importlib.metadata.packages_distributions().get(top, [top])[0]
        return f"{dist} {importlib.metadata.version(dist)}"
    except (importlib.metadata.PackageNotFoundError, IndexError):
        return "not an installed package"


def parse_args(args: list[str] | None) -> dict[str, str]:
    """{parameter: input} of ``--arg NAME=INPUT``; for a TileLang kernel also a build argument (``block_M=64``),
    kept as its text."""
    out = {}
    for a in args or ():
        name, eq, target = a.partition("=")
        if not eq or not name.isidentifier() or not (target.isidentifier() or target.isdigit()):
            raise ImplError(
                f"--arg {a!r}: expected NAME=INPUT (a parameter of the function = an input or attribute of the "
                "operator) or, for a TileLang jit kernel, PARAM=VALUE (an integer or a name)"
            )
        out[name] = target
    return out


def _tile_kernel(spec: s.OpSpec, obj, target: str, args: dict[str, str]):
    """(the kernel, the ``--arg`` mappings left) for a TileLang kernel (``T.prim_func``, ``@tilelang.jit``), built
    for this CPU's C target and called with torch tensors (``backends/tilelang/cpu/foreign.py``): an ``--arg``
    naming a parameter of the jit function is a build argument (``block_M=64``, ``accum_dtype=float64``); its
    buffers that are the operator's inputs (by name, alias or ``--arg``) are its parameters, the others its
    outputs. None for anything else."""
    if not is_tile_kernel(obj):
        return None
    from .backends.tilelang.cpu import foreign  # tilelang: kept out of start-up

    names = {t.name for t in spec.inputs} | {a.name for a in spec.attrs}
    params = inspect.signature(obj.func).parameters if type(obj).__name__ == "JITImpl" else {}
    build = {p: int(v) if v.isdigit() else v for p, v in args.items() if p in params}
    mapped = {p: v for p, v in args.items() if p not in params}
    try:
        kernel = foreign.Kernel(obj, lambda p: canonical(spec, mapped.get(p, p)) in names, build)
    except foreign.KernelBuildError as exc:
        raise ImplError(f"--impl {target!r}: {exc}") from None
    return kernel, mapped


@dataclass
class Impl:
    """An external implementation bound to an operator's spec."""

    target: str
    fn: Callable
    module: str
    file: str
    version: str
    signature: str
    mapping: dict[str, str]  # parameter -> spec input / attribute (or a DERIVED name)
    takes_out: bool
    views: bool = False  # it returns its outputs as its own views of the shapes (a TileLang kernel's 2-D buffers)
    not_judged: dict[str, str] = field(default_factory=dict)  # output -> why (filled as cases run)

    @property
    def provider(self) -> str:
        return PREFIX + self.target

    def describe(self) -> dict:
        return {
            "target": self.target,
            "module": self.module,
            "file": self.file,
            "version": self.version,
            "signature": self.signature,
            "mapping": dict(self.mapping),
        }

    def call(self, **inputs):
        """The function on inputs named as the spec's (bench's convention): its parameters mapped."""
        primary = next(iter(inputs))
        kwargs = {
            p: (DERIVED[n](inputs[primary]) if n in DERIVED else inputs[n])
            for p, n in self.mapping.items()
            if n in inputs or n in DERIVED
        }
        return self.fn(**kwargs)

    def run(self, spec: s.OpSpec, inputs: dict, backward: bool) -> dict[str, torch.Tensor]:
        """{output name: tensor} for a case: the forward outputs it returns and, with ``backward``, the inputs'
        gradients through its autograd graph."""
        primary = spec.inputs[0].name
        mapped = set(self.mapping.values())
        for t in spec.inputs:  # an input the case gives that the function cannot take: this case cannot run
            if inputs.get(t.name) is not None and t.name not in mapped:
                raise ImplCaseError(f"the function takes no {t.name} (the case gives one)")
        for a in spec.attrs:
            if (
                a.name in inputs
                and a.name not in mapped
                and inputs[a.name] is not a.default
                and inputs[a.name] != a.default
            ):
                raise ImplCaseError(f"the function takes no {a.name} (the case sets {a.name}={inputs[a.name]!r})")
        kwargs = {}
        for param, name in self.mapping.items():
            if name in DERIVED:
                kwargs[param] = DERIVED[name](inputs[primary])
            elif name in inputs and (inputs[name] is not None or name not in {t.name for t in spec.inputs}):
                kwargs[param] = inputs[name]
        grads = [
            t.name
            for t in spec.inputs
            if isinstance(kwargs.get(self._param(t.name)), torch.Tensor)
            and f"d{t.name}" in {g.name for g in spec.grads}
            and kwargs[self._param(t.name)].dtype.is_floating_point
        ]
        if backward:
            for name in grads:
                p = self._param(name)
                kwargs[p] = kwargs[p].detach().requires_grad_(True)
        if self.takes_out:
            kwargs["out"] = self._poisoned(spec, inputs[primary], inputs)
        fn = self.fn
        if inspect.isclass(fn) and spec.build is not None:  # a module class (a problem's ModelNew), built per dtype
            fn = spec.build(fn, inputs[primary].dtype)
        with torch.enable_grad() if backward else torch.no_grad():
            returned = fn(**kwargs)
        outs = self._outputs(spec, returned, inputs[primary], inputs)
        result = {name: t.detach() for name, t in outs.items()}
        if backward:
            result |= self._grads(spec, outs, inputs, kwargs, grads)
        return result

    def _param(self, name: str) -> str | None:
        return next((p for p, n in self.mapping.items() if n == name), None)

    def _poisoned(self, spec: s.OpSpec, x: torch.Tensor, inputs: dict) -> torch.Tensor:
        """The first output NaN-filled, its shape and dtype (the standard's section 3): ``out=`` as torch's
        functions take it, one tensor for the main result."""
        t = spec.outputs[0]
        if spec.general:
            b = _bound(spec, inputs)
            return torch.full(b.shape_of(t.name), math.nan, dtype=b.dtype(t.name))
        return torch.full(
            tuple(x.shape[:-1]) if t.role == s.PER_ROW else tuple(x.shape),
            math.nan,
            dtype=torch.float32 if t.dtype == "stat" and x.dtype != torch.float64 else x.dtype,
        )

    def _outputs(self, spec: s.OpSpec, returned, x: torch.Tensor, inputs: dict) -> dict[str, torch.Tensor]:
        values = tuple(returned) if isinstance(returned, (tuple, list)) else (returned,)
        out = {}
        b = _bound(spec, inputs) if spec.general else None
        for t, v in zip(spec.outputs, values):
            want = _declared_shape(b, t.name) if b is not None else None
            if v is None and b is not None and t.optional and want is None:  # absent as the inputs say (k=None's k_out)
                continue
            if not isinstance(v, torch.Tensor):
                raise ImplCaseError(f"returned {type(v).__name__} for {t.name}, expected a tensor")
            if b is None and t.role == s.FREE:  # a reference's output: its shape is judged against the golden's
                out[t.name] = v
                continue
            if b is None:
                want = tuple(x.shape[:-1]) if t.role == s.PER_ROW else tuple(x.shape)
            if self.views and tuple(v.shape) != want and v.numel() == math.prod(want):
                v = v.reshape(want)
            if tuple(v.shape) != want:
                raise ImplCaseError(f"returned {t.name} of shape {tuple(v.shape)}, expected {want}")
            out[t.name] = v
        for t in spec.outputs[len(values) :]:
            self.not_judged.setdefault(t.name, "not returned by the function")
        return out

    def _grads(self, spec, outs, inputs, kwargs, grads) -> dict[str, torch.Tensor]:
        tracked = [(name, t) for name, t in outs.items() if t.requires_grad and inputs.get(f"d{name}") is not None]
        if not tracked or not grads:
            why = (
                "backward not tested: the returned tensors carry no autograd history"
                if not tracked
                else "no input to differentiate"
            )
            for g in spec.grads:
                self.not_judged.setdefault(g.name, why)
            return {}
        leaves = [kwargs[self._param(n)] for n in grads]
        found = torch.autograd.grad(
            [t for _, t in tracked], leaves, [inputs[f"d{n}"] for n, _ in tracked], allow_unused=True
        )
        out = {}
        for name, g in zip(grads, found):
            if g is None:
                self.not_judged.setdefault(f"d{name}", f"the returned tensors do not depend on {name}")
            else:
                out[f"d{name}"] = g
        return out


def _bound(spec: s.OpSpec, inputs: dict):
    """An operator by named dimensions' declaration bound to a case's inputs (its outputs' shapes and dtypes)."""
    tensors = {t.name: inputs.get(t.name) for t in spec.inputs}
    return dims.bind(spec.declaration, tensors, {a.name: inputs[a.name] for a in spec.attrs if a.name in inputs})


def _declared_shape(b, name: str) -> tuple[int, ...] | None:
    """An output's shape by the binding; None for one whose dimensions no given input binds (an absent output)."""
    try:
        return b.shape_of(name)
    except ValueError:
        return None


def bind(spec: s.OpSpec, fn: Callable, target: str, args: dict[str, str]) -> dict[str, str]:
    """{parameter: spec input/attribute} for ``fn``'s parameters; ImplError naming a parameter that maps to
    nothing (and what it could be) or a required input no parameter takes."""
    try:
        params = dict(
            inspect.signature(fn.forward if inspect.isclass(fn) and issubclass(fn, torch.nn.Module) else fn).parameters
        )
    except (TypeError, ValueError):
        raise ImplError(
            f"--impl {target!r}: its signature cannot be read (a builtin?); wrap it in a Python function"
        ) from None
    params.pop("self", None)
    names = [t.name for t in spec.inputs] + [a.name for a in spec.attrs]
    primary = spec.inputs[0].name
    known = {n: (FIRST if n == primary else ALIASES.get(n, (n,))) for n in names}
    mapping: dict[str, str] = {}
    for p, prm in params.items():
        if prm.kind in (prm.VAR_POSITIONAL, prm.VAR_KEYWORD) or p == "out":
            continue
        if p in args:
            if args[p] not in names:
                raise ImplError(
                    f"--arg {p}={args[p]}: {args[p]!r} is not an input or attribute of {spec.name} ({', '.join(names)})"
                )
            mapping[p] = args[p]
        elif p in names:
            mapping[p] = p
        elif any(p in aliases for aliases in known.values()):
            mapping[p] = next(n for n, aliases in known.items() if p in aliases)
        elif p in DERIVED:
            mapping[p] = p
        elif prm.default is inspect.Parameter.empty:
            raise ImplError(
                f"--impl {target!r}: parameter {p!r} maps to nothing in {spec.name}'s contract; it could be one of "
                f"{', '.join(names)} (--arg {p}=NAME)"
            )
    unknown = set(args) - set(params)
    if unknown:
        raise ImplError(f"--arg {sorted(unknown)[0]}=...: the function has no parameter {sorted(unknown)[0]!r}")
    missing = [t.name for t in spec.inputs if not t.optional and t.name not in mapping.values()]
    if missing:
        raise ImplError(
            f"--impl {target!r}: no parameter takes {spec.name}'s required input {missing[0]!r} (--arg "
            f"PARAM={missing[0]})"
        )
    return mapping


_CACHE: dict[tuple, Impl] = {}


def resolve(spec: s.OpSpec, target: str, args: list[str] | dict[str, str] | None = None) -> Impl:
    """The implementation at ``target`` bound to ``spec`` (once per process and request)."""
    overrides = args if isinstance(args, dict) else parse_args(args)
    key = (spec.name, target, tuple(sorted(overrides.items())))
    found = _CACHE.get(key)
    if found is None:
        fn, module, file = load_callable(target)
        kernel = _tile_kernel(spec, fn, target, overrides)
        if kernel is not None:
            fn, overrides = kernel
        mapping = bind(spec, fn, target, overrides)
        try:
            sig = str(inspect.signature(fn))
        except (TypeError, ValueError):
            sig = "(...)"
        takes_out = "out" in inspect.signature(fn).parameters and spec.outputs[0].role != s.FREE
        found = _CACHE[key] = Impl(
            target,
            fn,
            module,
            file,
            _version(module),
            f"{getattr(fn, '__name__', target)}{sig}" + (" (TileLang, built for the C target)" if kernel else ""),
            mapping,
            takes_out,
            views=kernel is not None,
        )
    return found


def parse_provider(provider: str) -> str:
    return provider[len(PREFIX) :]
