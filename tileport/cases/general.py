"""Cases of a suite by named dimensions (``named``): every tensor in its declared shape from the case's sizes.

Per dtype, as for the row-wise suites (``generate``):
- the scale: the suite's fixed sizes, then sizes drawn by its dimension rules (``sizes``), with the standard's value
  mix drawn independently for every floating tensor (each its own outliers), the integer tensors by their value
  rules, each optional input left out in a share of the cases (an output whose dimensions only a left-out input
  binds is then absent, and so is its gradient), the attributes among their classes;
- the special scenarios: each dimension 0 in turn (empty), every dimension at its least (lower border, per rank of
  a variadic run; and scalar), each dimension 2^31 in turn (upper border), and every floating tensor in turn all
  nan / inf / -inf / mixed inf at four sizes.
Output gradients ``d<output>`` (backward suites) are drawn in their outputs' shapes, floating like the inputs.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
import torch

from ..ops import dims as d
from . import sizes as sz
from .case import OMIT_SHARE, UPPER, Case, draw_attrs, mix, spec_of
from .named import case_dtype, floating
from .schema import Suite
from .values import FILLS, admits, draw_mu_sigma, fill, in_domain, integer_values, offsets, standard_values

FILL_DRAWS = 2  # sizes drawn for the inf/nan fills besides the lower border and the base


class Layout:
    """What a suite's cases draw, from its operator's declaration: which tensors are present for the inputs a case
    leaves out, and their shapes for its sizes."""

    def __init__(self, suite: Suite):
        self.suite, self.spec = suite, spec_of(suite)
        self.declaration = self.spec.declaration
        self.optional = [t for t in suite.tensors if not t.required]
        self.floating = {t.name for t in self.declaration.tensors if floating(self.declaration, t.name)}

    def outputs(self, omitted=()) -> list[str]:
        """The outputs present where these inputs are left out: those whose dimensions the other inputs bind."""
        bound = {k for t in self.declaration.inputs if t.name not in omitted for k in t.shape.names()}
        return [o.name for o in self.spec.outputs if all(k in bound for k in self.declaration[o.name].shape.names())]

    def drawn(self, omitted=()) -> list[str]:
        """The tensors a case draws: the inputs present, then (backward suites) the present outputs' gradients the
        backward takes (none for a statistic it only reads, such as a logsumexp)."""
        grads = [f"d{o}" for o in self.outputs(omitted)] if self.suite.backward else []
        if self.spec.backward is not None:
            grads = [g for g in grads if g in self.spec.backward.tensors]
        return [t.name for t in self.declaration.inputs if t.name not in omitted] + grads

    def present(self, omitted=()) -> list[str]:
        """``drawn`` and the outputs present: every tensor whose size counts against max_length."""
        return self.drawn(omitted) + self.outputs(omitted)

    def fills(self, sizes: dict, key: str) -> bool:
        """Whether some tensor with the dimension ``key`` has elements at these sizes."""
        b = sz.binding(self.declaration, sizes, {}, self.suite.where)
        return b is not None and any(key in t.shape.names() and b.numel(t) for t in self.declaration.tensors)

    def case(self, sizes: dict, dist: str, attrs: dict, omitted=(), rng=None, **fields) -> Case | None:
        """A case of these sizes (None where the declaration refuses them); its integer tensors' dtypes drawn
        from ``rng`` (each tensor's first dtype without one)."""
        b = sz.binding(self.declaration, sizes, attrs, self.suite.where)
        if b is None:
            return None
        shapes = {n: b.shape_of(n) for n in self.drawn(omitted)}
        ints = []
        for t in self.suite.tensors:
            if t.name in shapes and t.name not in self.floating:
                ints.append((t.name, t.dtypes[int(rng.integers(len(t.dtypes)))] if rng is not None else t.dtypes[0]))
        primary = shapes.get(self.suite.primary.name, next(iter(shapes.values()), ()))
        return Case(
            0,
            None,
            primary,
            dist,
            attrs,
            omitted=tuple(omitted),
            sizes=tuple(sizes.items()),
            shapes=tuple(shapes.items()),
            int_dtypes=tuple(ints),
            **fields,
        )


def case_at(suite: Suite, sizes: dict, dtype: torch.dtype, seed: int = 0) -> Case:
    """One case at ``sizes`` with every optional input given and the attributes at their suite defaults: the
    suite's value rules (ranges, domains, packed offsets) drawn as a level draws them, for a test at chosen sizes.
    ValueError where the declaration refuses the sizes."""
    lay = Layout(suite)
    attrs = {a.name: a.values[0] for a in suite.attrs}
    found = lay.case(dict(sizes), "uniform", attrs)
    if found is None:
        raise ValueError(f"{suite.name}: the declaration refuses the sizes {sizes}")
    return replace(found, dtype=dtype, seed=seed)


def scale(suite: Suite, limits: str, n: int, rng: np.random.Generator, attrs_default: dict) -> list[Case]:
    """The level's counted cases of one dtype (dtype, index and seed set by the caller)."""
    lay = Layout(suite)
    out: list[Case] = []
    for i, dist in enumerate(mix(limits, n)):
        mu, sigma = draw_mu_sigma(rng) if dist == "normal" else (None, None)
        if i < len(suite.fixed):  # every optional input present, but one the suite always leaves out (omit: 1)
            never = tuple(t.name for t in lay.optional if t.omit == 1)
            out.append(lay.case(dict(suite.fixed[i]), dist, dict(attrs_default), never, rng, mu=mu, sigma=sigma))
            continue
        attrs = draw_attrs(suite, rng)
        omitted = tuple(t.name for t in lay.optional if rng.random() < (OMIT_SHARE if t.omit is None else t.omit))
        turn = i - len(suite.fixed)
        sizes = sz.scale_sizes(
            suite, lay.declaration, rng, limits == "L0", turn, attrs, lambda s, o=omitted: lay.present(o), omitted
        )
        out.append(lay.case(sizes, dist, attrs, omitted, rng, mu=mu, sigma=sigma))
    return out


def _least_ranks(suite: Suite) -> list[int | None]:
    """The variadic run's ranks for the lower border (one case per rank), or [None] without a run."""
    ranks = sorted({r for rule in suite.dims for r in rule.ranks})
    return ranks or [None]


def specials(suite: Suite, attrs: dict) -> list[Case]:
    """The standard's special scenarios (2.1) for one dtype, as the first floating input's boundary flags ask."""
    lay, flags = Layout(suite), suite.primary.boundary
    where, decl = suite.where, lay.declaration
    made: list[tuple[dict, str, str | None]] = []  # (sizes, scenario, the tensor it fills)
    if flags.get("has_empty"):
        for rule in suite.dims:
            items = range(len(suite.base[rule.name])) if rule.ranks else [None]
            made += [(s, "empty", None) for i in items if (s := sz.with_dim(decl, where, suite.base, rule.name, 0, i))]
    if flags.get("has_lower_border"):
        made += [(sz.least(suite, r), "lower_border", None) for r in _least_ranks(suite)]
    if flags.get("has_upper_border"):  # a long dimension only empty tensors have (a table of no columns) tests nothing
        runs = [r for rule in suite.dims for r in rule.ranks if r > 0]
        low = sz.least(suite, min(runs) if runs else None)
        for rule in suite.dims:
            items = range(len(low[rule.name])) if rule.ranks else [None]
            longs = [sz.with_dim(decl, where, low, rule.name, UPPER, i) for i in items]
            made += [(s, "upper_border", None) for s in longs if s and lay.fills(s, rule.name)]
    if flags.get("has_scalar"):
        made.append((sz.least(suite, 0 if any(0 in rule.ranks for rule in suite.dims) else None), "scalar", None))
    if flags.get("has_infnan"):
        rng = np.random.default_rng(0x1F)  # the fills' drawn sizes: the same for every dtype and seed
        drawn = [sz.scale_sizes(suite, decl, rng, False, i, attrs, lambda s: lay.present()) for i in range(FILL_DRAWS)]
        sets = [sz.least(suite), dict(suite.base), *drawn]
        domains = {t.name: t.domain for t in suite.tensors}
        for what in FILLS:
            for name in [n for n in lay.drawn() if n in lay.floating and admits(domains.get(n), what)]:
                made += [(s, f"all_{what}", name) for s in sets]
    out = [lay.case(s, "uniform", dict(attrs), scenario=scenario, filled=name) for s, scenario, name in made]
    return [c for c in out if c is not None]


def input_shapes(suite: Suite, case: Case) -> dict[str, tuple[int, ...] | None]:
    """Each tensor the case draws with its shape, the inputs it leaves out as None."""
    shapes = dict(case.shapes)
    return {t.name: shapes.get(t.name) for t in Layout(suite).declaration.inputs} | shapes


def _bound(value: int | str, values: dict) -> int | None:
    """A declared range bound or allowed value: an int, a dimension's size or an attribute's value."""
    v = values.get(value) if isinstance(value, str) else value
    return None if v is None else int(v)


def _integers(
    suite: Suite, t: d.TensorDecl, shape, values: dict, dtype: torch.dtype, gen: torch.Generator
) -> torch.Tensor:
    """An integer tensor by its suite value rule; a bool one at even odds."""
    if dtype == torch.bool:
        return torch.rand(shape, generator=gen) < 0.5
    rule = next(x for x in suite.tensors if x.name == t.name).values
    if rule.kind == "offsets":
        count = shape[0] if len(shape) == 1 else 0
        return offsets(count, sz.evaluate(rule.high, values), sz.evaluate(rule.low, values), gen).to(dtype)
    if rule.kind == "index":
        low, high = _bound(t.low, values), _bound(t.high, values)
        allowed = tuple(a for a in (_bound(x, values) for x in t.allow) if a is not None)
    else:
        low, high, allowed = sz.evaluate(rule.low, values), sz.evaluate(rule.high, values), ()
    return integer_values(rule.kind, shape, low, high, rule.outside, allowed, rule.ignore, gen).to(dtype)


def make_inputs(suite: Suite, case: Case) -> dict[str, Any]:
    """The tensors and attributes of ``case`` from its seed: every input in its declared shape (None where left
    out), and the output gradients ``d<output>`` in their outputs' shapes (None where the output is absent)."""
    lay = Layout(suite)
    gen = torch.Generator().manual_seed(case.seed)
    shapes, ints = dict(case.shapes), dict(case.int_dtypes)
    values = dict(case.attrs) | {k: v for k, v in case.sizes if not isinstance(v, tuple)}
    out: dict[str, Any] = dict(case.attrs)
    domains = {t.name: t.domain for t in suite.tensors}
    names = [t.name for t in lay.declaration.inputs] + [f"d{o.name}" for o in lay.spec.outputs]
    for name in names:
        shape = shapes.get(name)
        if shape is None:
            out[name] = None
        elif name not in lay.floating:
            out[name] = _integers(suite, lay.declaration[name], shape, values, ints[name], gen)
        elif case.filled == name:
            dtype = case_dtype(lay.declaration, name, case.dtype)
            out[name] = fill(shape, dtype, case.scenario.removeprefix("all_"), gen).to(dtype)
        else:
            v = standard_values(case.value_range, shape, case.dtype, case.mu or 0.0, case.sigma or 1.0, gen)
            if domains.get(name) is not None:
                v = in_domain(v, domains[name], case.attrs, gen)
            out[name] = v.to(case_dtype(lay.declaration, name, case.dtype))
    return out
