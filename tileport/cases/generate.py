"""Expand a suite into concrete seeded cases, and materialize a case's inputs.

Cases are cheap descriptions (dtype, shape, value range, attributes, boundary kind, seed); tensors are made
only when a case runs, from its own seed, so case i of a level is the same on every machine and every run.
Per dtype: the suite's fixed shapes first, then one case per boundary flag, then random shapes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import torch

from ..ops.spec import VECTOR, get as op_spec
from .schema import DTYPES, Suite, TensorInput, ValueRange

# Magnitudes of the `large` range per dtype: near the top of what the dtype holds, below its overflow
# on a cast (fp16 max 65504). fp32 math squares them: for bf16/fp32 the sum of squares may overflow to inf,
# in the operator and the benchmark alike (both compute in fp32), and the standard compares the two.
LARGE = {torch.float16: (1e3, 6e4), torch.bfloat16: (1e15, 1e18), torch.float32: (1e15, 1e18), torch.float64: (1e15, 1e18)}
OMIT_SHARE = 0.25  # of the random cases leave out each optional input (the API's None path)
BOUNDARIES = {"has_empty": "empty", "has_infnan": "infnan", "has_lower_border": "zeros"}


@dataclass(frozen=True)
class Case:
    index: int
    dtype: torch.dtype
    shape: tuple[int, ...]
    value_range: str
    attrs: dict[str, Any] = field(default_factory=dict)
    boundary: str | None = None  # empty | infnan | zeros | None
    seed: int = 0
    rank: int = 0  # position among the cases of its dtype: a smaller level's cases are a prefix of a larger's
    omitted: tuple[str, ...] = ()  # optional inputs this case leaves out (passed as None)

    @property
    def elements(self) -> int:
        return math.prod(self.shape)

    def describe(self) -> str:
        b = f" {self.boundary}" if self.boundary else ""
        b += "".join(f" no-{name}" for name in self.omitted)
        return f"#{self.index} {str(self.dtype).removeprefix('torch.')} {'x'.join(map(str, self.shape))} {self.value_range}{b}"


def _random_shape(rng: np.random.Generator, suite: Suite) -> tuple[int, ...]:
    rule = suite.primary.shapes
    D = int(rng.choice(rule.last_dim_values))
    rank = int(rng.choice(rule.dim_numbers))
    if rank == 1:
        return (D,)
    rows_max = max(1, rule.max_length // D)
    rows = int(math.exp(rng.uniform(0.0, math.log(rows_max + 1))))  # log-uniform: many small, some large
    rows = min(max(rows, 1), rows_max)
    if rank == 2:
        return (rows, D)
    lead = int(rng.integers(1, rows + 1))
    dims = [lead] + [1] * (rank - 3) + [max(1, rows // lead), D]
    return tuple(dims)


def _pick_range(rng: np.random.Generator, ranges: tuple[ValueRange, ...], allowed) -> ValueRange:
    pool = [r for r in ranges if allowed(r)] or list(ranges)
    w = np.array([r.weight for r in pool])
    return pool[int(rng.choice(len(pool), p=w / w.sum()))]


def generate(suite: Suite, level: str, dtypes: list[torch.dtype] | None = None, seed: int = 0) -> list[Case]:
    """The cases of ``level``: its case count split evenly among the dtypes (fixed and boundary cases first)."""
    lv = suite.level(level)
    x = suite.primary
    dtypes = [d for d in x.dtypes if dtypes is None or d in dtypes]
    if not dtypes:
        raise ValueError(f"suite {suite.name!r} has none of the requested dtypes; it has {list(x.dtypes)}")
    per_dtype = max(1, math.ceil(lv.cases / len(dtypes)))
    optional = [t.name for t in suite.tensors if not t.required and t.like is not None]
    attr_defaults = {a.name: a.values[0] for a in suite.attrs}
    upper = x.boundary.get("has_upper_border", True)
    lower = x.boundary.get("has_lower_border", True)

    def allowed(r: ValueRange) -> bool:
        return (upper or r.kind != "large") and (lower or r.kind != "near_eps")

    cases: list[Case] = []
    for d_index, dtype in enumerate(dtypes):
        rng = np.random.default_rng([seed, d_index])
        mine: list[Case] = []
        first_range = x.ranges[0].name
        for shape in x.shapes.fixed:
            mine.append(Case(0, dtype, shape, first_range, dict(attr_defaults)))
        small_D = min(x.shapes.last_dim_values, key=lambda d: abs(d - 100))
        for flag, kind in BOUNDARIES.items():
            if x.boundary.get(flag):
                shape = (0, small_D) if kind == "empty" else (8, small_D)
                mine.append(Case(0, dtype, shape, first_range, dict(attr_defaults), kind))
        while len(mine) < per_dtype:
            attrs = {a.name: a.values[int(rng.integers(len(a.values)))] for a in suite.attrs}
            shape, vrange = _random_shape(rng, suite), _pick_range(rng, x.ranges, allowed).name
            omitted = tuple(name for name in optional if rng.random() < OMIT_SHARE)
            mine.append(Case(0, dtype, shape, vrange, attrs, omitted=omitted))
        # a case's seed depends on (seed, dtype, rank) only, so quick's cases are L0's first ones, input for input
        cases += [replace(c, rank=r, seed=(seed * 7919 + d_index) * 1_000_003 + r) for r, c in enumerate(mine[:per_dtype])]
    return [replace(c, index=i) for i, c in enumerate(cases)]


def _values(t: TensorInput, rng_range: ValueRange, shape, dtype, near_eps: float, gen: torch.Generator) -> torch.Tensor:
    math_dtype = torch.float64 if dtype == torch.float64 else torch.float32
    if rng_range.kind == "normal":
        v = torch.randn(shape, generator=gen, dtype=math_dtype) * rng_range.scale
    elif rng_range.kind == "uniform":
        v = torch.rand(shape, generator=gen, dtype=math_dtype) * (rng_range.high - rng_range.low) + rng_range.low
    elif rng_range.kind == "near_eps":
        # per row, magnitudes within a factor 10 of where the op's eps decides the row (its spec says where)
        rows = torch.rand(shape[:-1] + (1,), generator=gen, dtype=math_dtype) * 2 - 1
        v = torch.randn(shape, generator=gen, dtype=math_dtype) * near_eps * 10.0 ** rows
    else:  # large
        lo, hi = LARGE[dtype]
        mag = 10.0 ** (torch.rand(shape, generator=gen, dtype=math_dtype) * (math.log10(hi) - math.log10(lo)) + math.log10(lo))
        v = mag * torch.sign(torch.randn(shape, generator=gen, dtype=math_dtype))
    return v


def _plant(v: torch.Tensor, boundary: str | None, gen: torch.Generator) -> torch.Tensor:
    if boundary == "zeros" and v.numel():
        v.view(-1, v.shape[-1])[::2] = 0.0  # every other row all zeros: y = 0, dx finite
    elif boundary == "infnan" and v.numel():
        rows = v.view(-1, v.shape[-1])
        cols = torch.randint(0, rows.shape[1], (3,), generator=gen)
        rows[1, cols[0]], rows[3, cols[1]], rows[5, cols[2]] = math.inf, -math.inf, math.nan
    return v


def make_inputs(suite: Suite, case: Case) -> dict[str, Any]:
    """The tensors and attributes of ``case``, from its seed (values drawn in fp32/fp64, then cast)."""
    gen = torch.Generator().manual_seed(case.seed)
    spec = op_spec(suite.name)
    D = case.shape[-1] if case.shape else 1
    near_eps = spec.near_eps(case.attrs, D) if spec.near_eps else 1e-3
    out: dict[str, Any] = dict(case.attrs)
    for t in suite.tensors:
        if t.like is None:
            r = next(r for r in t.ranges if r.name == case.value_range)
            v = _plant(_values(t, r, case.shape, case.dtype, near_eps, gen), case.boundary, gen)
        else:
            declared = spec.tensor(t.name)  # None for a suite tensor the spec does not declare (dy): like x
            shape = (D,) if declared is not None and declared.role == VECTOR else case.shape
            v = _values(t, t.ranges[0], shape, case.dtype, near_eps, gen)
        out[t.name] = None if t.name in case.omitted else v.to(case.dtype)
    return out


def golden_inputs(suite: Suite, inputs: dict[str, Any]) -> dict[str, Any]:
    """The inputs in the golden's dtype (float64 by the standard): floating tensors upcast, the rest as is."""
    gd = DTYPES[suite.standard.get("golden", "float64")]
    return {k: v.to(gd) if isinstance(v, torch.Tensor) and v.is_floating_point() else v for k, v in inputs.items()}
