"""A KernelBench-style problem judged by the standard: ``tileport verify --problem ref.py --impl new.py``.

The convention agents and kernel benchmarks use for "a reference and a candidate": ``ref.py`` holds ``Model``,
``get_inputs()`` and ``get_init_inputs()``; the candidate ``ModelNew`` (``new.py``, or ``new.py:NAME``). The
golden is ``Model`` in float64 on the CPU, the benchmark ``Model`` in the case's dtype, the implementation under
test ``ModelNew`` in that dtype; both models are built from ``get_init_inputs()`` under the same seed, as the
benchmark's own evaluation does. The problem's input shapes (read on the meta device: nothing is allocated)
carry the standard's value distributions, dtypes, repeated runs and retests; inputs that are not floating
point are passed as the problem gives them. Shapes larger than a worker may hold are generalized down (the
same rank; the last dimension kept whole where it fits, the leading ones scaled), and the report says which
shapes ran and why.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch

from .cases.values import draw_mu_sigma, standard_values
from .dtypes import name as dtype_name
from .external import import_file
from .precision import COUNTS, CaseResult, Metrics, Verdict, aggregate, compare, retest_verdicts
from .precision.standard import DISTRIBUTIONS, RETEST_MIN_SEEDS
from .verify.accuracy import same_bits

MAX_ELEMENTS = 1 << 24  # per input: what a worker of a 2-core, 24 GiB machine holds in fp64 beside its copies
DTYPES = (torch.float32, torch.float16, torch.bfloat16)


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
    model: type
    get_inputs: Callable
    get_init_inputs: Callable
    candidate: type
    candidate_file: Path
    candidate_name: str
    shapes: list  # per positional input: a shape (floating tensor), or None (passed as given)
    given: list  # the problem's own value of each input that is not a floating tensor
    original: list  # the problem's shapes before generalizing
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


def load(ref: str, candidate: str) -> Problem:
    """The problem in ``ref`` and the candidate ``candidate`` (``new.py`` or ``new.py:NAME``, default
    ``ModelNew``); ProblemError naming what is missing."""
    module, path = _load_module(ref, "--problem")
    missing = [n for n in ("Model", "get_inputs", "get_init_inputs") if not hasattr(module, n)]
    if missing:
        raise ProblemError(f"--problem {ref}: no {', '.join(missing)} (a problem file defines Model, get_inputs() and get_init_inputs())")
    file, _, attr = candidate.partition(":") if candidate.count(":") == 1 and not candidate.endswith(".py") else (candidate, "", "")
    new, new_path = _load_module(file, "--impl")
    attr = attr or "ModelNew"
    if not hasattr(new, attr):
        raise ProblemError(f"--impl {candidate}: no {attr} (a candidate file defines ModelNew, or name the class: new.py:NAME)")
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
    return Problem(path, module.Model, module.get_inputs, module.get_init_inputs, getattr(new, attr), new_path, attr, shapes, given, original, notes)


@dataclass(frozen=True)
class ProblemCase:
    index: int
    dtype: torch.dtype
    value_range: str
    seed: int
    mu: float
    sigma: float


def cases(problem: Problem, count: int, dtypes, limits: str, seed: int) -> list[ProblemCase]:
    """``count`` cases spread over the dtypes, the standard's value mix for the level's limits."""
    rng = np.random.default_rng(seed)
    mix = [name for name, share in DISTRIBUTIONS[limits] for _ in range(max(1, round(share * 20)))]
    out = []
    for i in range(count):
        mu, sigma = draw_mu_sigma(rng)
        out.append(ProblemCase(i, dtypes[i % len(dtypes)], mix[i % len(mix)], seed * 1_000_003 + i, mu, sigma))
    return out


def inputs(problem: Problem, case: ProblemCase, seed: int | None = None) -> list:
    gen = torch.Generator().manual_seed(case.seed if seed is None else seed)
    out = []
    for shape, given in zip(problem.shapes, problem.given):
        if shape is None:
            out.append(given.to("cpu") if isinstance(given, torch.Tensor) and given.device.type == "meta" else given)
        else:
            out.append(standard_values(case.value_range, shape, case.dtype, case.mu, case.sigma, gen).to(case.dtype))
    if any(isinstance(v, torch.Tensor) and v.device.type == "meta" for v in out):
        torch.manual_seed(case.seed)  # tensors the problem draws itself that are not floating point (indices)
        real = problem.get_inputs()
        out = [r if isinstance(v, torch.Tensor) and v.device.type == "meta" else v for v, r in zip(out, real)]
    return out


def _model(cls: type, problem: Problem, dtype: torch.dtype, seed: int):
    torch.manual_seed(seed)  # Model and ModelNew built under the same seed
    with torch.no_grad():
        m = cls(*problem.get_init_inputs())
    return m.to(dtype) if isinstance(m, torch.nn.Module) else m


def _outputs(m, args) -> list[torch.Tensor]:
    with torch.no_grad():
        out = m(*args)
    out = out if isinstance(out, (tuple, list)) else (out,)
    return [o.detach().cpu() for o in out]


def run_problem(problem: Problem, level: str, limits: str, count: int, runs: int, retest_seeds: int, dtypes=None, seed: int = 0,
                progress: Callable | None = None, min_seeds: int = RETEST_MIN_SEEDS) -> dict:  # fmt: skip
    """Judge the candidate on ``count`` cases; {"results", "aggregates", "skipped", "cases", "elements"}."""
    dtypes = list(dtypes or DTYPES)
    todo = cases(problem, count, dtypes, limits, seed)
    models: dict = {}

    def side(kind: str, dtype: torch.dtype):
        key = (kind, dtype)
        if key not in models:
            cls = problem.candidate if kind == "impl" else problem.model
            models[key] = _model(cls, problem, torch.float64 if kind == "golden" else dtype, seed)
        return models[key]

    def verdicts(case: ProblemCase, args) -> tuple[list, list]:
        gold = _outputs(side("golden", case.dtype), [a.double() if isinstance(a, torch.Tensor) and a.is_floating_point() else a for a in args])
        bm = _outputs(side("benchmark", case.dtype), args)
        under = _outputs(side("impl", case.dtype), args)
        if len(under) != len(gold) or any(u.shape != g.shape for u, g in zip(under, gold)):
            raise ValueError(f"ModelNew returned {[tuple(u.shape) for u in under]}, Model {[tuple(g.shape) for g in gold]}")
        return [compare(u, g, b, limits, case.dtype if u.is_floating_point() else torch.float32) for u, g, b in zip(under, gold, bm)], under

    results, skipped, elements = [], {}, 0
    provider = f"impl:{problem.candidate_file.name}:{problem.candidate_name}"
    first = next((s for s in problem.shapes if s is not None), ())  # the first floating input's shape, for the tables
    for case in todo:
        if progress:
            progress(f"case {case.index + 1} of {len(todo)}: {dtype_name(case.dtype)} {case.value_range}")
        args = inputs(problem, case)
        try:
            vs, under = verdicts(case, args)
            repeats = [_outputs(side("impl", case.dtype), args) for _ in range(runs - 1)]
        except Exception as exc:  # noqa: BLE001 - the case's failure, reported
            none = Metrics(0.0, 0.0, 0.0, 0, 0, 0)
            v = Verdict(limits, none, none, {"mare": 0.0, "mere": 0.0, "rmse": 0.0, "small": 0.0}, [f"did not run: raised {type(exc).__name__}: {exc}"])
            results.append(CaseResult(problem.name, provider, case.index, dtype_name(case.dtype), first, case.value_range, {}, "run", v))
            continue
        for k, v in enumerate(vs):
            redo = None
            if not v.passed:
                redo = retest_verdicts([verdicts(case, inputs(problem, case, case.seed + s))[0][k] for s in range(1, retest_seeds + 1)],
                                       min_seeds=min_seeds)  # fmt: skip
            same = all(same_bits(r[k], under[k]) for r in repeats)
            name = f"out{k}" if len(vs) > 1 else "y"
            results.append(CaseResult(problem.name, provider, case.index, dtype_name(case.dtype), first, case.value_range, {}, name, v, redo,
                                      deterministic=same, runs=runs))  # fmt: skip
            elements += under[k].numel()
    for note in problem.notes:
        skipped[f"shapes generalized ({note.split(':')[0]})"] = [len(todo), note.split(": ", 1)[1]]
    return {"results": results, "aggregates": aggregate(results), "skipped": skipped, "cases": len(todo), "elements": elements}


def describe(problem: Problem) -> dict[str, Any]:
    return {
        "problem": str(problem.ref),
        "candidate": f"{problem.candidate_file}:{problem.candidate_name}",
        "shapes run": "; ".join("x".join(map(str, s)) if s else "given" for s in problem.shapes),
        "shapes of the problem": "; ".join("x".join(map(str, s)) if s else "given" for s in problem.original),
    }


def level(name: str) -> tuple[str, int, int, int, bool]:
    """(limits, cases, runs per case, retest seeds, conforming) of a level: quick is a short, non-conforming
    run for development; L0-L2 are the standard's counts."""
    if name == "quick":
        return "L0", 24, 2, 30, False
    if name not in COUNTS:
        raise ProblemError(f"unknown level {name!r}; choose from quick, {', '.join(COUNTS)}")
    c = COUNTS[name]
    return name, c.cases, c.runs_per_case, 1000, True
