"""Expand a suite into concrete seeded cases, and materialize a case's inputs.

Cases are cheap descriptions (dtype, shape, distribution, attributes, scenario, seed); tensors are made only
when a case runs, from its own seed, so case i of a level is the same on every machine and every run.

Per dtype, in this order:
- the level's scale: the suite's fixed shapes, then generalized shapes (every dimension count in turn, the
  standard's steps at L0, random at L1/L2), with the standard's value mix for the level's limits;
- the standard's special scenarios (2.1), not counted in the scale: empty tensors, lower and upper borders,
  a [1] tensor, every input all nan / inf / -inf / mixed inf;
- tileport's own stress cases (a suite's ``extra_share``, not counted either): the tensors' own ranges
  (values where eps decides a row, values near the dtype's top) and row scenarios (zero rows, inf/nan rows).
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

import numpy as np
import torch

from ..ops.spec import VECTOR
from ..precision.standard import DISTRIBUTIONS, MODEL_SHARE
from . import general, modelcases
from .case import EXTRA_RANK, OMIT_SHARE, SPECIAL_RANK, UPPER, Case, spec_of  # noqa: F401
from .case import draw_attrs as _draw_attrs
from .case import mix as _mix
from .schema import DTYPES, Suite
from .shapes import draw_shape
from .values import FILLS, draw_mu_sigma, fill, plant, standard_values, suite_values

FILL_SHAPES = ((1,), (7,), (4, 33), (2, 3, 128))  # the 4 shapes of each all-nan/inf scenario
EMPTY_BASE = (2, 3, 16)  # each dimension 0 in turn


def _pick_range(rng: np.random.Generator, ranges) -> str:
    w = np.array([r.weight for r in ranges])
    return ranges[int(rng.choice(len(ranges), p=w / w.sum()))].name


def _model_cases(suite: Suite, n: int, rng) -> list[Case]:
    """L2's model third: rows of the activations a small transformer gives the operator (``modelcases``).
    An optional input with no captured site (a bias: the captured decoders have none) is left out."""
    if n == 0:
        return []
    sites = spec_of(suite).model_sites
    missing = [t.name for t in suite.tensors if t.name not in sites and t.required]
    if missing:
        raise ValueError(f"{suite.name}: no captured model site for {', '.join(missing)} (its spec's model_sites)")
    absent = tuple(t.name for t in suite.tensors if t.name not in sites)
    out = []
    for _ in range(n):
        config, index, start, rows, shape = modelcases.draw(rng, sites, suite.primary.name)
        attrs = _draw_attrs(suite, rng)
        out.append(Case(0, None, shape, "model", attrs, source=(config, index, start, rows), omitted=absent))
    return out


def _scale(suite: Suite, limits: str, n: int, rng, attrs_default: dict) -> list[Case]:
    """The level's counted cases of one dtype (dtype, index and seed are set by the caller): at L2 a third
    are model cases where the operator's spec maps its inputs to captured model sites."""
    x, rule = suite.primary, suite.primary.shapes
    optional = [t.name for t in suite.tensors if not t.required and t.like is not None]
    generalized = limits == "L0"
    n_model = round(n * MODEL_SHARE) if limits == "L2" and spec_of(suite).model_sites else 0
    out: list[Case] = []
    for i, dist in enumerate(_mix(limits, n - n_model)):
        mu, sigma = draw_mu_sigma(rng) if dist == "normal" else (None, None)
        if i < len(rule.fixed) or not rule.free:
            out.append(
                Case(0, x.dtypes[0], rule.fixed[i % len(rule.fixed)], dist, dict(attrs_default), mu=mu, sigma=sigma)
            )
            continue
        attrs = _draw_attrs(suite, rng)
        rank = rule.dim_numbers[(i - len(rule.fixed)) % len(rule.dim_numbers)]
        shape = draw_shape(rng, rank, rule.max_dim, rule.max_length, generalized)
        omitted = tuple(name for name in optional if rng.random() < OMIT_SHARE)
        out.append(Case(0, x.dtypes[0], shape, dist, attrs, omitted=omitted, mu=mu, sigma=sigma))
    return out + _model_cases(suite, n_model, rng)


def _specials(suite: Suite, attrs: dict) -> list[Case]:
    """The standard's special scenarios (2.1) for one dtype, as the primary input's boundary flags ask."""
    flags, rule = suite.primary.boundary, suite.primary.shapes
    out: list[Case] = []
    if flags.get("has_empty"):
        out += [
            Case(0, None, EMPTY_BASE[:i] + (0,) + EMPTY_BASE[i + 1 :], "uniform", attrs, "empty")
            for i in range(len(EMPTY_BASE))
        ]
    if flags.get("has_lower_border"):
        out += [Case(0, None, (1,) * r, "uniform", attrs, "lower_border") for r in rule.dim_numbers]
    if flags.get("has_upper_border"):
        out += [Case(0, None, (1,) * i + (UPPER,) + (1,) * (1 - i), "uniform", attrs, "upper_border") for i in range(2)]
    if flags.get("has_scalar"):
        out.append(Case(0, None, (1,), "uniform", attrs, "scalar"))
    if flags.get("has_infnan"):
        computed = [t.name for t in suite.tensors]
        for what in FILLS:
            for name in computed:
                out += [Case(0, None, s, "uniform", attrs, f"all_{what}", filled=name) for s in FILL_SHAPES]
    for t in suite.tensors:  # values out of the valid range: the operator must reject them
        for lo, hi in t.invalid:
            value = lo if math.isfinite(lo) else hi
            out.append(Case(0, None, (4, 16), "uniform", attrs, "invalid", filled=t.name, fill_value=value))
    for a in suite.attrs:
        out += [Case(0, None, (4, 16), "uniform", attrs | {a.name: v}, "invalid") for v in a.invalid]
    return out


def _extras(suite: Suite, n: int, rng, attrs_default: dict) -> list[Case]:
    """tileport's stress cases for one dtype: the primary tensor's own ranges and its row scenarios."""
    x, rule = suite.primary, suite.primary.shapes
    flags = x.boundary
    rows = [s for s, flag in (("zero_rows", "has_lower_border"), ("infnan_rows", "has_infnan")) if flags.get(flag)]
    out: list[Case] = []
    D = min(rule.max_dim, 100)
    for scenario in rows if n else ():
        out.append(Case(0, None, (8, D), "uniform", dict(attrs_default), scenario))
    for _ in range(max(0, n - len(out)) if x.ranges else 0):
        attrs = _draw_attrs(suite, rng)
        rank = int(rng.choice([r for r in rule.dim_numbers if r >= 2] or rule.dim_numbers))
        shape = draw_shape(rng, rank, rule.max_dim, rule.max_length, False)
        out.append(Case(0, None, shape, _pick_range(rng, x.ranges), attrs))
    return out


def generate(suite: Suite, level: str, dtypes: list[torch.dtype] | None = None, seed: int = 0) -> list[Case]:
    """The cases of ``level``: its count split evenly among the dtypes, then the special scenarios and extras."""
    lv = suite.level(level)
    x = suite.primary
    dtypes = [d for d in x.dtypes if dtypes is None or d in dtypes]
    if not dtypes:
        raise ValueError(f"suite {suite.name!r} has none of the requested dtypes; it has {list(x.dtypes)}")
    per_dtype = max(1, math.ceil(lv.cases / len(dtypes)))
    attrs_default = {a.name: a.values[0] for a in suite.attrs}
    cases: list[Case] = []
    for d_index, dtype in enumerate(dtypes):
        scale, specials = (general.scale, general.specials) if suite.general else (_scale, _specials)
        groups = (
            (0, scale(suite, lv.limits, per_dtype, np.random.default_rng([seed, d_index]), attrs_default)),
            (SPECIAL_RANK, specials(suite, attrs_default)),
            (
                EXTRA_RANK,
                []
                if suite.general
                else _extras(
                    suite,
                    math.ceil(suite.extra_share * per_dtype),
                    np.random.default_rng([seed, d_index, 1]),
                    attrs_default,
                ),
            ),
        )
        for offset, group in groups:
            # a case's seed depends on (seed, dtype, rank) only, so quick's cases are L0's first ones, input for input
            cases += [
                replace(c, dtype=dtype, rank=offset + r, seed=(seed * 7919 + d_index) * 1_000_003 + offset + r)
                for r, c in enumerate(group)
            ]
    return [replace(c, index=i) for i, c in enumerate(cases)]


def input_shapes(suite: Suite, case: Case) -> dict[str, tuple[int, ...]]:
    """Each tensor input's shape: a vector-role input (a weight) is (D,), the others the case's shape; by named
    dimensions each tensor the case draws in its declared shape (``general``)."""
    if suite.general:
        return general.input_shapes(suite, case)
    spec = spec_of(suite)
    D = case.shape[-1] if case.shape else 1
    out = {}
    for t in suite.tensors:
        declared = spec.tensor(t.name)  # None for a suite tensor the spec does not declare (dy): like x
        own = t.shape if t.shape is not None and case.scenario is None else None  # a problem's second input
        out[t.name] = own or ((D,) if declared is not None and declared.role == VECTOR else case.shape)
    return out


def make_inputs(suite: Suite, case: Case) -> dict[str, Any]:
    """The tensors and attributes of ``case``, from its seed (values drawn in fp32/fp64, then cast)."""
    if suite.general:
        return general.make_inputs(suite, case)
    gen = torch.Generator().manual_seed(case.seed)
    spec = spec_of(suite)
    D = case.shape[-1] if case.shape else 1
    standard = case.value_range in {name for mix in DISTRIBUTIONS.values() for name, _ in mix}
    near_eps = spec.near_eps(case.attrs, D) if spec.near_eps and not standard else 1e-3  # a suite range's scale
    out: dict[str, Any] = dict(case.attrs)
    if spec.reference:  # what a reference supplies itself (a problem's non-floating inputs), as it gives them
        out |= {a.name: a.default for a in spec.attrs if a.name not in out}
    for t, (name, shape) in zip(suite.tensors, input_shapes(suite, case).items()):
        if case.source is not None and name in spec.model_sites:  # a model case: the captured site, the same rows
            config, index, start, rows = case.source
            v = modelcases.values(config, spec.model_sites[name], index, start, rows)
        elif case.filled == name and case.fill_value is not None:
            v = torch.full(shape, case.fill_value)
        elif case.filled == name:
            v = fill(shape, case.dtype, case.scenario.removeprefix("all_"), gen)
        elif case.value_range == "uniform" and t.valid:  # a case file's valid intervals, picked by weight
            w = torch.tensor([iv[2] for iv in t.valid])
            lo, hi, _ = t.valid[int(torch.multinomial(w, 1, generator=gen))]
            v = (
                torch.rand(shape, generator=gen, dtype=torch.float64 if case.dtype == torch.float64 else torch.float32)
                * (hi - lo)
                + lo
            )
        elif standard:  # every computed input drawn independently (its own outlier positions)
            v = standard_values(case.value_range, shape, case.dtype, case.mu or 0.0, case.sigma or 1.0, gen)
        elif t.like is None:
            v = suite_values(next(r for r in t.ranges if r.name == case.value_range), shape, case.dtype, near_eps, gen)
        else:
            v = (
                suite_values(t.ranges[0], shape, case.dtype, near_eps, gen)
                if t.ranges
                else torch.randn(shape, generator=gen)
            )
        if t.like is None:
            v = plant(v, case.scenario, gen)
        out[name] = None if name in case.omitted else v.to(case.dtype)
    if suite.backward and spec.grad_shapes is not None:  # a reference's output gradients, in its outputs' shapes
        try:
            shapes = spec.grad_shapes(out)
        except Exception:  # noqa: BLE001 - the reference refuses these inputs: the case checks the refusal
            shapes = {}
        for name, shape in shapes.items():
            out[name] = torch.randn(shape, generator=gen).to(case.dtype)
    return out


def golden_inputs(suite: Suite, inputs: dict[str, Any]) -> dict[str, Any]:
    """The inputs in the golden's dtype (float64 by the standard): floating tensors upcast, the rest as is."""
    gd = DTYPES[suite.standard.get("golden", "float64")]
    return {k: v.to(gd) if isinstance(v, torch.Tensor) and v.is_floating_point() else v for k, v in inputs.items()}
