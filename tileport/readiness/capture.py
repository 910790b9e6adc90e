"""The user's function called on drawn CPU tensors with every Triton launch recorded and nothing run.

Arguments come from ``--arg NAME=SHAPE:DTYPE`` (a tensor drawn at that shape, e.g. ``x=4096x2048:bfloat16``) or
``--arg NAME=VALUE`` (a Python literal: ``eps=1e-6``), or from an operator's spec (``tileport lower OP --impl``:
its example inputs mapped onto the function's parameters by name, as ``verify --impl`` maps them). An autograd
``Function.apply`` takes its ``forward``'s parameters, in order. Floating tensors require grad, and where the
result carries a graph its backward is called too, so the backward's kernels are captured as well."""

from __future__ import annotations

import ast
import inspect
import re
from dataclasses import dataclass, field

import torch

from .. import dtypes
from ..backends.triton import lowering
from ..external import ImplError, canonical, load_callable

SHAPED = re.compile(r"^(\d+(?:x\d+)*):(\w+)$")


@dataclass
class Capture:
    target: str
    launches: list[lowering.Launch] = field(default_factory=list)  # every launch, in order
    arguments: dict[str, str] = field(default_factory=dict)  # parameter -> what it was given (shape:dtype, a value)
    backward: str = ""  # the backward's outcome: "" (none called), "captured", or why it did not run
    error: str = ""  # where the function itself raised


def parse_arg(text: str) -> tuple[str, object]:
    """(name, value) of ``NAME=SHAPE:DTYPE`` (a drawn tensor's recipe: (shape, dtype)) or ``NAME=VALUE``."""
    name, eq, value = text.partition("=")
    if not eq or not name.isidentifier():
        raise ImplError(f"--arg {text!r}: expected NAME=SHAPE:DTYPE (x=4096x2048:bfloat16) or NAME=VALUE (eps=1e-6)")
    shaped = SHAPED.match(value)
    if shaped:
        shape = tuple(int(d) for d in shaped.group(1).split("x"))
        try:
            dtype = dtypes.parse(shaped.group(2))
        except ValueError as exc:  # an index dtype (int64, int32, bool) by torch's name
            dtype = getattr(torch, shaped.group(2), None)
            if not isinstance(dtype, torch.dtype):
                raise ImplError(f"--arg {text!r}: {exc}") from None
        return name, (shape, dtype)
    try:
        return name, ast.literal_eval(value)
    except (ValueError, SyntaxError):
        return name, value  # a bare word: a string (casting_mode=llama)


def _draw(shape: tuple, dtype: torch.dtype, gen: torch.Generator) -> torch.Tensor:
    if dtype.is_floating_point:
        return torch.randn(shape, generator=gen).to(dtype).requires_grad_(True)
    if dtype == torch.bool:
        return torch.rand(shape, generator=gen) < 0.5
    return torch.randint(0, max(2, min(shape or (2,))), shape, generator=gen).to(dtype)


def parameters(fn) -> list[inspect.Parameter]:
    """The parameters a call binds: an autograd Function's ``apply`` takes its ``forward``'s, less ``ctx``."""
    owner = getattr(fn, "__self__", None)
    if inspect.isclass(owner) and issubclass(owner, torch.autograd.Function) and fn.__name__ == "apply":
        return list(inspect.signature(owner.forward).parameters.values())[1:]
    try:
        return list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        raise ImplError(f"{fn!r}: its signature cannot be read; wrap it in a Python function") from None


def arguments(
    fn,
    target: str,
    given: dict[str, object],
    spec=None,
    example: dict | None = None,
    gen: torch.Generator | None = None,
) -> tuple[list, dict, dict[str, str]]:
    """(positional, keyword, described) arguments for ``fn``: ``given`` (parsed --arg values) first, then the
    spec's ``example`` inputs by name; ImplError naming a required parameter nothing gives."""
    gen = gen or torch.Generator().manual_seed(0)
    params = parameters(fn)
    names = {p.name for p in params}
    unknown = [n for n in given if n not in names and not any(p.kind == p.VAR_KEYWORD for p in params)]
    if unknown:
        raise ImplError(f"--arg {unknown[0]}=...: {target} has no parameter {unknown[0]!r} ({', '.join(names)})")
    positional = getattr(fn, "__name__", "") == "apply"  # Function.apply binds by position only
    args, kwargs, described = [], {}, {}
    for p in params:
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            continue
        if p.name in given:
            v = given[p.name]
            if isinstance(v, tuple) and len(v) == 2 and isinstance(v[1], torch.dtype):
                described[p.name] = f"{'x'.join(map(str, v[0]))}:{str(v[1]).removeprefix('torch.')}"
                v = _draw(v[0], v[1], gen)
            else:
                described[p.name] = repr(v)
        elif example is not None and canonical(spec, p.name) in example:
            v = example[canonical(spec, p.name)]
            if isinstance(v, torch.Tensor) and v.dtype.is_floating_point:
                v = v.detach().clone().requires_grad_(True)
            described[p.name] = (
                f"{'x'.join(map(str, v.shape))}:{str(v.dtype).removeprefix('torch.')}"
                if isinstance(v, torch.Tensor)
                else repr(v)
            )
        elif p.default is not p.empty:
            if positional:
                args.append(p.default)
            continue
        else:
            raise ImplError(
                f"{target}: nothing gives parameter {p.name!r} (--arg {p.name}=SHAPE:DTYPE or {p.name}=VALUE)"
            )
        if positional:
            args.append(v)
        else:
            kwargs[p.name] = v
    return args, kwargs, described


def _tensors(out) -> list[torch.Tensor]:
    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, (tuple, list)):
        return [t for o in out for t in _tensors(o)]
    return []


def _problem_call(fn, problem, target: str) -> tuple[object, list, dict[str, str]]:
    """A KernelBench problem's inputs for ``fn``: ``get_inputs()`` (floating tensors requiring grad); a module
    class (ModelNew) is built from ``get_init_inputs()`` first."""
    torch.manual_seed(0)
    inputs = [
        t.detach().requires_grad_(True) if isinstance(t, torch.Tensor) and t.dtype.is_floating_point else t
        for t in problem.get_inputs()
    ]
    if inspect.isclass(fn) and issubclass(fn, torch.nn.Module):
        fn = fn(*problem.get_init_inputs())
    described = {
        f"input {i}": (
            f"{'x'.join(map(str, t.shape))}:{str(t.dtype).removeprefix('torch.')}"
            if isinstance(t, torch.Tensor)
            else repr(t)
        )
        for i, t in enumerate(inputs)
    }
    return fn, inputs, described


def _run(fn, args: list, kwargs: dict, result: Capture) -> None:
    """One call, and the backward of what it returns where that carries a graph."""
    try:
        with torch.enable_grad():
            out = fn(*args, **kwargs)
    except Exception as exc:  # noqa: BLE001 - the launches before it still count; the report says where it stopped
        result.error = f"{type(exc).__name__}: {' '.join(str(exc).split())[:400]}"
        return
    graph = [t for t in _tensors(out) if t.requires_grad and t.grad_fn is not None]
    if graph:
        try:
            torch.autograd.backward(graph, [torch.ones_like(t) for t in graph])
            result.backward = result.backward or "captured"
        except Exception as exc:  # noqa: BLE001 - a backward that cannot run on garbage still had its launches
            result.backward = f"stopped: {type(exc).__name__}: {' '.join(str(exc).split())[:300]}"


def capture(
    target: str, given: dict[str, object], spec=None, examples: list[dict] | None = None, problem=None
) -> Capture:
    """Import ``target`` (MODULE:FUNCTION or path/file.py:FUNCTION) and call it, its launches recorded: on
    ``given`` arguments, once per drawn ``examples`` (an operator's inputs: a spec's example, a case file's
    cases), or on a KernelBench ``problem``'s inputs. The caller holds the stand-in (``standin.standing_in``)
    so the import takes the chip's path."""
    result = Capture(target)
    with lowering.recording() as found:
        fn, _, _ = load_callable(target)
        if problem is not None:
            fn, inputs, result.arguments = _problem_call(fn, problem, target)
            _run(fn, inputs, {}, result)
        for example in examples or [None]:
            if problem is not None:
                break
            args, kwargs, described = arguments(fn, target, given, spec, example)
            result.arguments = result.arguments or described
            _run(fn, args, kwargs, result)
    result.launches = list(found)
    return result
