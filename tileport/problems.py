"""A KernelBench-style problem judged by the standard: ``tileport verify --problem ref.py --impl new.py``.

The convention agents and kernel benchmarks use for "a reference and a candidate": ``ref.py`` holds ``Model``,
``get_inputs()`` and ``get_init_inputs()``; the candidate ``ModelNew`` (``new.py``, or ``new.py:NAME``). The
problem becomes a suite whose reference is its Model (``tileport.reference``, the mechanism a test-kit file
naming a torch function goes through): the golden is ``Model`` in float64 on the CPU, the benchmark ``Model`` in
the case's dtype, the implementation under test ``ModelNew`` in that dtype; both models are built from
``get_init_inputs()`` under the same seed, as the benchmark's own evaluation does. The problem's input shapes
(read on the meta device: nothing is allocated) carry the standard's value distributions, dtypes, repeated runs
and retests; inputs that are not floating point are passed as the problem gives them. Shapes larger than a
worker may hold are generalized down (the same rank; the last dimension kept whole where it fits, the leading
ones scaled), and the report says which shapes ran and why.
"""

from __future__ import annotations

import inspect
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from . import reference
from .cases.schema import Level, ShapeRule, Suite, TensorInput
from .external import import_file
from .precision import COUNTS

MAX_ELEMENTS = 1 << 24  # per input: what a worker of a 2-core, 24 GiB machine holds in fp64 beside its copies
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
    params = [p for p, v in inspect.signature(model.forward).parameters.items() if p != "self" and v.kind in (v.POSITIONAL_ONLY, v.POSITIONAL_OR_KEYWORD)]
    return params[:n] if len(params) >= n else [f"in{i}" for i in range(n)]


def read(ref: str) -> tuple[Any, Problem]:
    """The problem module in ``ref`` and what it states (shapes, given values); ProblemError naming what is
    missing."""
    module, path = _load_module(ref, "--problem")
    missing = [n for n in ("Model", "get_inputs", "get_init_inputs") if not hasattr(module, n)]
    if missing:
        raise ProblemError(f"--problem {ref}: no {', '.join(missing)} (a problem file defines Model, get_inputs() and get_init_inputs())")
    with torch.device("meta"):  # the shapes, without allocating (real problems draw 10^8-10^9 elements)
        meta = module.get_inputs()
    shapes, given, original, notes = [], [], [], []
    for i, v in enumerate(meta):
        if isinstance(v, torch.Tensor) and v.dtype.is_floating_point:
            g = generalize(tuple(v.shape))
            original.append(tuple(v.shape))
            shapes.append(g)
            given.append(None)
            if g != tuple(v.shape):
                notes.append(f"input {i}: {tuple(v.shape)} ({math.prod(v.shape):.3g} elements) ran as {g}: more than a worker here "
                             f"holds ({MAX_ELEMENTS} elements per input in float64 beside its copies)")  # fmt: skip
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
    return module, Problem(path, _names(module.Model, len(meta)), shapes, given, original, notes=notes)


def load(ref: str, candidate: str) -> Problem:
    """The problem in ``ref`` and the candidate ``candidate`` (``new.py`` or ``new.py:NAME``, default
    ``ModelNew``); ProblemError naming what is missing."""
    _, problem = read(ref)
    file, _, attr = candidate.partition(":") if candidate.count(":") == 1 and not candidate.endswith(".py") else (candidate, "", "")
    new, new_path = _load_module(file, "--impl")
    attr = attr or "ModelNew"
    if not hasattr(new, attr):
        raise ProblemError(f"--impl {candidate}: no {attr} (a candidate file defines ModelNew, or name the class: new.py:NAME)")
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
    return reference.Source(reference.PROBLEM + str(problem.ref), lambda dtype: build(module.Model, dtype), list(problem.names),
                            list(problem.names), given, build, f"torch {torch.__version__}")  # fmt: skip


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
    return Suite(problem.ref, problem.name, str(problem.ref), False, (), (), {"acc": "double_bm", "golden": "float64", "benchmark": "torch"},
                 levels, tuple(tensors), (), reference=reference.PROBLEM + str(problem.ref))  # fmt: skip


def describe(problem: Problem) -> dict[str, Any]:
    return {
        "problem": str(problem.ref),
        "candidate": problem.candidate,
        "shapes run": "; ".join("x".join(map(str, s)) if s else "given" for s in problem.shapes),
        "shapes of the problem": "; ".join("x".join(map(str, s)) if s else "given" for s in problem.original),
    }
