"""A KernelBench-style problem judged by the standard: ``tileport verify --problem ref.py --impl new.py``.

The convention agents and kernel benchmarks use for "a reference and a candidate": ``ref.py`` holds ``Model``,
``get_inputs()`` and ``get_init_inputs()``; the candidate ``ModelNew`` (``new.py``, or ``new.py:NAME``). The
problem becomes a suite whose reference is its Model (``tileport.reference``, the mechanism a test-kit file
naming a torch function goes through): the golden is ``Model`` in float64 on the CPU, the benchmark ``Model`` in
the case's dtype, the implementation under test ``ModelNew`` in that dtype; both models are built from
``get_init_inputs()`` under the same seed, as the benchmark's own evaluation does. The problem's input shapes
(read on the meta device: nothing is allocated) carry the standard's value distributions, dtypes, repeated runs
and retests; inputs that are not floating point are passed as the problem gives them.

A problem runs at its own sizes where a case fits ``MEMORY_BUDGET``; past it, it is scaled down to
``MAX_ELEMENTS`` per input, and the report says which shapes ran and why. KernelBench states its sizes as module
constants that ``get_inputs()`` and ``get_init_inputs()`` both read at call time (``batch_size``, ``features``):
those constants are scaled, the outermost dimension's first, so the model's init arguments follow the inputs.
A problem whose shapes are literal numbers has its input shapes generalized instead (the same rank; the last
dimension kept whole where it fits, the leading ones scaled).
"""

from __future__ import annotations

import inspect
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from .. import reference
from ..external import import_file
from ..precision import COUNTS
from .schema import Level, ShapeRule, Suite, TensorInput

MAX_ELEMENTS = 1 << 24  # per input, a problem past the budget: what keeps its quick level within minutes here
# A case's peak memory per element of its floating inputs: the golden's fp64 copies of input and output, the
# benchmark's and the candidate's outputs (twice: repeated runs) and the metrics' fp64 temporaries (measured on
# a KernelBench problem: docs/notes/measurements.md).
BYTES_PER_ELEMENT = 64
# What a case may take at the problem's own sizes: two workers of a 24 GiB machine, beside other work. A
# constant, not this machine's free memory: the shapes, and so the cases, must be the same on every machine.
MEMORY_BUDGET = 6 << 30
DTYPES = (torch.float32, torch.float16, torch.bfloat16)
SEED = 0  # Model and ModelNew are built under this seed, in every process
QUICK = Level("quick", 24, 2, "L0")  # a short, non-conforming level for development


class ProblemError(ValueError):
    """A problem or candidate file that cannot be used: the message names the file and what was expected."""


def _load_module(path: str, what: str):
    p = Path(path).expanduser().resolve()
    if not p.is_file():
        raise ProblemError(f"{what} {path}: no such file")
    try:
        return import_file(p), p
    except Exception as exc:
        raise ProblemError(f"{what} {path} does not import: {type(exc).__name__}: {exc}") from None


@dataclass
class Problem:
    ref: Path
    names: list[str]  # the forward's parameter names, one per input (in0, in1, ... where it has none)
    shapes: list  # per positional input: a shape (floating tensor), or None (passed as given)
    given: list  # the problem's own value of each input that is not a floating tensor
    original: list  # the problem's shapes before generalizing
    candidate: str = ""  # --impl's target: new.py:ModelNew
    notes: list[str] = field(default_factory=list)
    need: int = 0  # bytes a case takes at the problem's own sizes (estimated)
    scaled: dict[str, tuple[int, int]] = field(
        default_factory=dict
    )  # module constant -> (its own value, the value run)

    @property
    def name(self) -> str:
        return f"problem:{self.ref.stem}"


def generalize(shape: tuple[int, ...], limit: int = MAX_ELEMENTS) -> tuple[int, ...]:
    """``shape`` within ``limit`` elements: the same rank, the last dimension kept whole where it fits, the
    leading dimensions scaled down together (each at least 1)."""
    if math.prod(shape) <= limit or not shape:
        return tuple(shape)
    last = min(shape[-1], limit)
    lead = list(shape[:-1])
    budget = max(1, limit // last)
    while math.prod(lead) > budget:
        i = max(range(len(lead)), key=lambda k: lead[k])
        lead[i] = max(1, lead[i] // 2)
    return (*lead, last)


def _names(model: type, n: int) -> list[str]:
    params = [
        p
        for p, v in inspect.signature(model.forward).parameters.items()
        if p != "self" and v.kind in (v.POSITIONAL_ONLY, v.POSITIONAL_OR_KEYWORD)
    ]
    return params[:n] if len(params) >= n else [f"in{i}" for i in range(n)]


def _constants(module) -> list[str]:
    """The module's integer constants that ``get_inputs`` or ``get_init_inputs`` read (directly, in nested code,
    or through the module's own functions they call): the problem's sizes."""
    seen, names, todo = set(), set(), [module.get_inputs.__code__, module.get_init_inputs.__code__]
    while todo:
        code = todo.pop()
        if code in seen:
            continue
        seen.add(code)
        todo += [c for c in code.co_consts if inspect.iscode(c)]
        for n in code.co_names:
            v = getattr(module, n, None)
            if inspect.isfunction(v) and v.__module__ == module.__name__:
                todo.append(v.__code__)
            elif isinstance(v, int) and not isinstance(v, bool):
                names.add(n)
    return sorted(names)


def _meta_inputs(module) -> list:
    with torch.device("meta"):  # the shapes, without allocating (real problems draw 10^8-10^9 elements)
        return module.get_inputs()


def _floating_shapes(inputs: list) -> list[tuple[int, ...]]:
    return [tuple(v.shape) for v in inputs if isinstance(v, torch.Tensor) and v.dtype.is_floating_point]


def bytes_needed(shapes: list[tuple[int, ...]]) -> int:
    """A case's estimated peak memory for floating inputs of these shapes."""
    return sum(math.prod(s) for s in shapes) * BYTES_PER_ELEMENT


def _controls(module, names: list[str]) -> dict[str, int]:
    """Each constant that sizes a floating input, with the outermost dimension it sizes (found by doubling it
    and reading the shapes again); constants that size none, or whose doubling get_inputs refuses, are left out."""
    base = _floating_shapes(_meta_inputs(module))
    out = {}
    for n in names:
        value = getattr(module, n)
        setattr(module, n, 2 * value if value else 1)
        try:
            shapes = _floating_shapes(_meta_inputs(module))
        except Exception:  # noqa: BLE001 - a size get_inputs cannot take is not one to scale
            shapes = base
        finally:
            setattr(module, n, value)
        dims = [d for a, b in zip(shapes, base) if len(a) == len(b) for d in range(len(a)) if a[d] != b[d]]
        if dims:
            out[n] = min(dims)
    return out


def _too_large(shapes: list[tuple[int, ...]], limit: int) -> bool:
    return any(math.prod(s) > limit for s in shapes) or bytes_needed(shapes) > MEMORY_BUDGET


def _scale_constants(module, names: list[str], limit: int) -> dict[str, tuple[int, int]]:
    """Halve the size constants, the one of the outermost dimension first (the larger on a tie), until every
    floating input holds at most ``limit`` elements and a case fits the budget, or none is left to halve;
    returns constant -> (own value, value run)."""
    controls, own = _controls(module, names), {n: getattr(module, n) for n in names}
    while _too_large(_floating_shapes(_meta_inputs(module)), limit):
        left = [n for n in controls if getattr(module, n) > 1]
        if not left:
            break
        n = min(left, key=lambda n: (controls[n], -getattr(module, n)))
        setattr(module, n, getattr(module, n) // 2)
    return {n: (own[n], getattr(module, n)) for n in names if getattr(module, n) != own[n]}


_OWN: dict[str, dict[str, int]] = {}  # module name -> its constants' own values (read() may run twice in a process)


def read(ref: str) -> tuple[Any, Problem]:
    """The problem module in ``ref`` and what it states (shapes, given values), its size constants scaled where
    a case at its own sizes would not fit ``MEMORY_BUDGET``; ProblemError naming what is missing."""
    module, path = _load_module(ref, "--problem")
    missing = [n for n in ("Model", "get_inputs", "get_init_inputs") if not hasattr(module, n)]
    if missing:
        raise ProblemError(
            f"--problem {ref}: no {', '.join(missing)} (a problem file defines Model, get_inputs() and "
            "get_init_inputs())"
        )
    names = _constants(module)
    own = _OWN.setdefault(module.__name__, {n: getattr(module, n) for n in names})
    for n, v in own.items():
        setattr(module, n, v)
    own_shapes = _floating_shapes(_meta_inputs(module))
    need = bytes_needed(own_shapes)
    scaled = _scale_constants(module, names, MAX_ELEMENTS) if need > MEMORY_BUDGET else {}
    meta = _meta_inputs(module)
    past = (
        f"at its own sizes a case needs about {need / 2**30:.3g} GiB, more than the {MEMORY_BUDGET / 2**30:g} GiB "
        "budget of a case here"
    )
    shapes, given, original, notes = [], [], [], []
    if scaled:
        notes.append(
            f"sizes scaled down ({past}): "
            + ", ".join(f"{n} {a} -> {b}" for n, (a, b) in scaled.items())
            + " (module constants: get_inputs() and get_init_inputs() both follow)"
        )
    full = iter(own_shapes)
    for i, v in enumerate(meta):
        if isinstance(v, torch.Tensor) and v.dtype.is_floating_point:
            run, mine = tuple(v.shape), next(full)
            g = generalize(run, MAX_ELEMENTS) if need > MEMORY_BUDGET else run
            original.append(mine)
            shapes.append(g)
            given.append(None)
            if g != run:
                notes.append(
                    f"input {i}: {mine} ({math.prod(mine):.3g} elements) ran as {g} ({past}; its shape is "
                    f"generalized to {MAX_ELEMENTS} elements; init arguments, if any, are not scaled with it)"
                )
        else:
            shapes.append(None)
            original.append(None)
            given.append(v)
    if any(isinstance(v, torch.Tensor) and v.device.type == "meta" for v in given):
        torch.manual_seed(SEED)  # tensors the problem draws itself that are not floating point (indices)
        real = module.get_inputs()
        given = [r if isinstance(v, torch.Tensor) and v.device.type == "meta" else v for v, r in zip(given, real)]
    if not any(s is not None for s in shapes):
        raise ProblemError(f"--problem {ref}: get_inputs() gives no floating-point tensor to draw values for")
    return module, Problem(
        path, _names(module.Model, len(meta)), shapes, given, original, notes=notes, need=need, scaled=scaled
    )


def load(ref: str, candidate: str) -> Problem:
    """The problem in ``ref`` and the candidate ``candidate`` (``new.py`` or ``new.py:NAME``, default
    ``ModelNew``); ProblemError naming what is missing."""
    _, problem = read(ref)
    file, _, attr = (
        candidate.partition(":") if candidate.count(":") == 1 and not candidate.endswith(".py") else (candidate, "", "")
    )
    new, new_path = _load_module(file, "--impl")
    attr = attr or "ModelNew"
    if not hasattr(new, attr):
        raise ProblemError(
            f"--impl {candidate}: no {attr} (a candidate file defines ModelNew, or name the class: new.py:NAME)"
        )
    problem.candidate = f"{new_path}:{attr}"
    return problem


def source(ref: str) -> reference.Source:
    """The problem as a reference: Model built under SEED from its init inputs, per dtype, called with the
    inputs in the forward's order; a candidate class is built the same way."""
    module, problem = read(ref)
    models: dict = {}

    def build(cls: type, dtype: torch.dtype):
        key = (cls, dtype)
        if key not in models:
            torch.manual_seed(SEED)  # Model and ModelNew built under the same seed
            with torch.no_grad():
                m = cls(*module.get_init_inputs())
            models[key] = m.to(dtype) if isinstance(m, torch.nn.Module) else m
        m = models[key]
        return lambda **kw: m(*[kw[n] for n in problem.names])

    given = {n: v for n, v, shape in zip(problem.names, problem.given, problem.shapes) if shape is None}
    return reference.Source(
        reference.PROBLEM + str(problem.ref),
        lambda dtype: build(module.Model, dtype),
        list(problem.names),
        list(problem.names),
        given,
        build,
        f"torch {torch.__version__}",
    )


def suite(problem: Problem) -> Suite:
    """The problem's case suite: its floating inputs at their (generalized) shapes, every case at those shapes,
    the standard's value mix and counts; levels quick (24 cases, 2 runs, not conforming) and L0-L2."""
    tensors = []
    for name, shape in zip(problem.names, problem.shapes):
        if shape is None:
            continue
        if not tensors:
            rule = ShapeRule((len(shape),), shape[-1] if shape else 1, math.prod(shape), fixed=(shape,), free=False)
            tensors.append(TensorInput(name, True, (), DTYPES, rule, {}))
        else:
            tensors.append(TensorInput(name, True, (), like=tensors[0].name, shape=shape))
    levels = {"quick": QUICK} | {n: Level(n, c.cases, c.runs_per_case, n) for n, c in COUNTS.items()}
    return Suite(
        problem.ref,
        problem.name,
        str(problem.ref),
        False,
        (),
        (),
        {"acc": "double_bm", "golden": "float64", "benchmark": "torch"},
        levels,
        tuple(tensors),
        (),
        reference=reference.PROBLEM + str(problem.ref),
    )


def describe(problem: Problem) -> dict[str, Any]:
    """What the report's environment says of the problem: the files, the shapes run and the problem's own, and
    whether they differ and why."""
    own = (
        f"a case needs about {problem.need / 2**30:.3g} GiB, within the {MEMORY_BUDGET / 2**30:g} GiB budget of a case"
    )
    return {
        "problem": str(problem.ref),
        "candidate": problem.candidate,
        "shapes run": "; ".join("x".join(map(str, s)) if s else "given" for s in problem.shapes),
        "shapes of the problem": "; ".join("x".join(map(str, s)) if s else "given" for s in problem.original),
        "sizes": "; ".join(problem.notes) if problem.notes else f"the problem's own: {own}",
    }
