"""An operator spec made from a reference callable, so that any function goes through the standard: a torch
function a test-kit file names (``verify --cases FILE.yaml``, ``verify --api torch.nn.functional.gelu``) or a
KernelBench problem's ``Model`` (``verify --problem``). One mechanism for both:

- golden: the reference in float64 on the CPU; benchmark: the reference in the case's dtype on the CPU;
- under test: ``--impl`` (a function, or a class built as the problem's Model is), else the reference itself on
  ``--device`` (provider ``function``: on the CPU it is judged against itself, which proves the harness only);
- inputs: the suite's, named by the function's own parameters; outputs: whatever it returns (a tensor, a tuple,
  a named tuple's fields), found by running it once on a small input;
- gradients of the floating tensor inputs where a floating output is differentiable (autograd), each output's
  gradient ``d<output>`` drawn per case in that output's shape;
- an output that is not floating point (indices, masks) must equal the golden's exactly (the kit's ``equal``);
- an input the reference refuses (it raises) must be refused by the implementation too.

A spec is rebuilt from its suite in every process (local workers, Ray): the suite names its reference.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from .ops import spec as s

PROBLEM = "problem:"  # a reference that is a KernelBench problem file: problem:/abs/path/ref.py
SELF = "function"  # the provider of the reference itself on --device
DERIVED = {"normalized_shape": lambda x: tuple(x.shape[-1:])}  # parameters derived from the first tensor


class ReferenceError(ValueError):
    """A reference that cannot be used: it does not import, or it does not take the inputs it is given."""


@dataclass
class Source:
    """The reference callable, per dtype. ``params``: its parameter names where they can be read (None for a
    builtin such as ``torch.max``); ``given``: inputs it supplies itself (a problem's non-floating inputs);
    ``build``: how a class given as the implementation becomes a callable (a problem's ModelNew)."""

    target: str
    make: Callable[[torch.dtype], Callable]
    params: list[str] | None
    required: list[str] = field(default_factory=list)
    given: dict = field(default_factory=dict)
    build: Callable[[type, torch.dtype], Callable] | None = None
    version: str = ""


def function(target: str) -> Callable:
    """The function at a dotted name (``torch.nn.functional.gelu``); ReferenceError where it does not import."""
    module, _, name = target.rpartition(".")
    if not module:
        raise ReferenceError(f"{target!r} is not a dotted name of a function (module.function)")
    try:
        obj: Any = importlib.import_module(module)
    except ImportError:  # a function inside a class or a submodule attribute: walk down from the top module
        top, *rest = target.split(".")
        try:
            obj = importlib.import_module(top)
        except ImportError as exc:
            raise ReferenceError(f"{target!r} does not import: {exc}") from None
        name_parts = rest
    else:
        name_parts = [name]
    for part in name_parts:
        if not hasattr(obj, part):
            raise ReferenceError(f"{target!r} does not import: {getattr(obj, '__name__', obj)!s} has no {part!r}")
        obj = getattr(obj, part)
    if not callable(obj):
        raise ReferenceError(f"{target!r} is a {type(obj).__name__}, not a function")
    return obj


def parameters(fn: Callable) -> tuple[list[str] | None, list[str]]:
    """(parameter names, the required ones) of a Python callable; (None, []) for a builtin (torch's C functions
    have no readable signature: the probe call checks the names instead)."""
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return None, []
    names = [p for p, v in params.items() if v.kind not in (v.VAR_POSITIONAL, v.VAR_KEYWORD) and p != "self"]
    required = [p for p in names if params[p].default is inspect.Parameter.empty]
    return names, required


def source(target: str) -> Source:
    """The reference a dotted function name names (cached per process); a problem file's is made by
    ``cases/problems.py``, which reads the file."""
    if target.startswith(PROBLEM):
        raise ReferenceError(f"{target}: a problem file's reference is made by tileport.cases.problems.source")
    found = _SOURCES.get(target)
    if found is None:
        fn = function(target)
        names, required = parameters(fn)
        top = target.split(".")[0]
        version = f"{top} {getattr(importlib.import_module(top), '__version__', '')}".strip()
        found = _SOURCES[target] = Source(target, lambda dtype, fn=fn: fn, names, required, version=version)
    return found


_SOURCES: dict[str, Source] = {}
_SPECS: dict[tuple, s.OpSpec] = {}


def split(returned: Any) -> tuple[list[str], list[torch.Tensor]]:
    """(names, tensors) of what a function returned: one tensor is ``out``, a named tuple gives its field names
    (``torch.max``'s values and indices), another tuple ``out0``, ``out1``, ...; ReferenceError otherwise."""
    if isinstance(returned, torch.Tensor):
        return ["out"], [returned]
    if isinstance(returned, (tuple, list)) and returned and all(isinstance(v, torch.Tensor) for v in returned):
        fields = getattr(type(returned), "_fields", None) or getattr(type(returned), "__match_args__", None)
        names = list(fields) if fields and len(fields) == len(returned) else [f"out{i}" for i in range(len(returned))]
        return names, list(returned)
    what = (
        type(returned).__name__
        if not isinstance(returned, (tuple, list))
        else f"a {type(returned).__name__} of " + ", ".join(type(v).__name__ for v in returned)
    )
    raise ReferenceError(f"returned {what}; a reference returns a tensor or a tuple of tensors")


@dataclass(frozen=True)
class Declared:
    """What a suite says of its reference: its tensors and attributes, by the function's own names."""

    target: str
    tensors: tuple[str, ...]
    attrs: tuple[tuple[str, Any], ...]  # name, the value a probe uses
    derived: tuple[str, ...] = ()
    backward: bool = True


def _call(src: Source, declared: Declared, inputs: dict, dtype: torch.dtype):
    first = inputs[declared.tensors[0]]
    kwargs = {n: DERIVED[n](first) for n in declared.derived} | src.given | inputs
    return src.make(dtype)(**kwargs)


def probe(declared: Declared, shapes: tuple[tuple[int, ...], ...], src: Source) -> tuple[list[str], list[bool]]:
    """The reference's output names and which are floating point, from one call on small fp32 inputs of
    ``shapes`` (one per tensor); ReferenceError with the reference's own message where it refuses the call."""
    if src.params is not None:
        given = set(declared.tensors) | {n for n, _ in declared.attrs} | set(declared.derived) | set(src.given)
        unknown = [n for n in given if n not in src.params]
        if unknown:
            raise ReferenceError(
                f"{declared.target} has no parameter {unknown[0]!r}; its parameters: {', '.join(src.params)}"
            )
        missing = [n for n in src.required if n not in given]
        if missing:
            raise ReferenceError(f"{declared.target}'s required parameter {missing[0]!r} is not given")
    gen = torch.Generator().manual_seed(0)
    inputs = {n: torch.randn(shape, generator=gen) for n, shape in zip(declared.tensors, shapes)} | dict(declared.attrs)
    try:
        with torch.no_grad():
            returned = _call(src, declared, inputs, torch.float32)
    except Exception as exc:  # noqa: BLE001 - the reference's own message says what it wanted
        raise ReferenceError(
            f"{declared.target} refused a call with {', '.join(inputs)} (shapes {', '.join(map(str, shapes))}): "
            f"{type(exc).__name__}: {' '.join(str(exc).split())[:400]}"
        ) from None
    names, values = split(returned)
    return names, [v.is_floating_point() for v in values]


def spec_for(
    declared: Declared, name: str, probe_shapes: tuple[tuple[int, ...], ...], src: Source | None = None
) -> s.OpSpec:
    """The operator spec of a reference (cached per process): its run, its golden, its outputs and gradients.
    ``src``: the reference where it is no function (a problem's Model, ``cases/problems.py``)."""
    key = (declared, name, probe_shapes)
    found = _SPECS.get(key)
    if found is not None:
        return found
    src = src or source(declared.target)
    outs, floating = probe(declared, probe_shapes, src)
    grads = tuple(s.Tensor(f"d{t}", s.FREE) for t in declared.tensors) if declared.backward and any(floating) else ()
    shapes_cache: dict = {}

    def run(inputs: dict, backend: str, backward: bool) -> dict:
        on_cpu = backend != SELF  # the benchmark and the golden: the reference on the CPU
        args = {
            k: (v.cpu() if on_cpu and isinstance(v, torch.Tensor) else v) for k, v in inputs.items() if k not in douts
        }
        dtype = next(v.dtype for v in args.values() if isinstance(v, torch.Tensor) and v.is_floating_point())
        leaves = [
            k
            for k in declared.tensors
            if backward and isinstance(args.get(k), torch.Tensor) and args[k].is_floating_point()
        ]
        for k in leaves:
            args[k] = args[k].detach().requires_grad_(True)
        with torch.enable_grad() if backward else torch.no_grad():
            _, values = split(_call(src, declared, args, dtype))
        if len(values) != len(outs):
            raise ReferenceError(f"{declared.target} returned {len(values)} outputs here and {len(outs)} on the probe")
        result = {n: v.detach() for n, v in zip(outs, values)}
        tracked = [(v, inputs[f"d{n}"]) for n, v in zip(outs, values) if v.requires_grad and f"d{n}" in inputs]
        if backward and tracked and leaves:
            found = torch.autograd.grad(
                [v for v, _ in tracked],
                [args[k] for k in leaves],
                [g.to(v.device, v.dtype) for v, g in tracked],
                allow_unused=True,
            )
            result |= {f"d{k}": g for k, g in zip(leaves, found) if g is not None}
        return result

    def grad_shapes(inputs: dict) -> dict:
        """The output gradients' shapes for these inputs: the floating outputs' shapes (one forward, cached)."""
        key = tuple(
            (k, tuple(v.shape), v.dtype) if isinstance(v, torch.Tensor) else (k, repr(v))
            for k, v in sorted(inputs.items())
        )
        if key not in shapes_cache:
            result = run(inputs, "torch", False)
            shapes_cache[key] = {f"d{n}": tuple(result[n].shape) for n, f in zip(outs, floating) if f}
        return shapes_cache[key]

    douts = {f"d{n}" for n in outs}
    found = s.OpSpec(
        name=name,
        summary=f"the reference {declared.target}",
        math="",
        inputs=tuple(s.Tensor(t, s.FREE) for t in declared.tensors),
        attrs=tuple(s.Attr(a, v) for a, v in declared.attrs) + tuple(s.Attr(k, v) for k, v in src.given.items()),
        outputs=tuple(s.Tensor(n, s.FREE) for n in outs),
        grads=grads,
        composite=src.make(torch.float32),
        example=None,
        bytes_moved=lambda shape, dtype, mode: 0,
        run=run,
        modes=("fwd",),
        build=src.build,
        grad_shapes=grad_shapes if grads else None,
        reference=True,
        exact=tuple(n for n, f in zip(outs, floating) if not f),
    )
    _SPECS[key] = found
    return found
