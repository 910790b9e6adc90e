"""A case of a suite (its dtype, shapes, distribution, attributes, scenario and seed: a description, tensors made
only when it runs), the spec a suite's cases run through, and the choices every generator shares: the standard's
value mix over a level's cases and the attributes' equivalence classes."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from .. import reference
from ..ops.catalog import get as op_spec
from ..precision.results import shape_text
from ..precision.standard import DISTRIBUTIONS
from . import problems
from .schema import Suite

OMIT_SHARE = 0.25  # of the generalized cases leave out each optional input (the API's None path)
UPPER = 2**31  # the upper border's one long dimension
SPECIAL_RANK, EXTRA_RANK = 1_000_000, 2_000_000  # rank offsets: seeds apart from the scale's cases


@dataclass(frozen=True)
class Case:
    index: int
    dtype: torch.dtype
    shape: tuple[int, ...]
    value_range: str  # the standard's distribution (uniform, normal, tiny, outliers) or a suite range's name
    attrs: dict[str, Any] = field(default_factory=dict)
    scenario: str | None = None  # a special scenario or a row scenario; None for the scale's cases
    seed: int = 0
    rank: int = 0  # position among the cases of its dtype: a smaller level's cases are a prefix of a larger's
    omitted: tuple[str, ...] = ()  # optional inputs this case leaves out (passed as None)
    mu: float | None = None  # N(mu, sigma)'s parameters, drawn per case
    sigma: float | None = None
    filled: str | None = None  # the input an all-nan/inf or invalid scenario fills
    fill_value: float | None = None  # an invalid scenario's value
    source: tuple | None = None  # a model case's (config, capture index, first row, rows)
    # A case by named dimensions: its dimensions' sizes, each tensor it draws with its shape (the inputs present,
    # then the output gradients whose outputs are present), and the integer tensors' dtypes. ``shape`` is then
    # the first floating input's.
    sizes: tuple[tuple[str, Any], ...] = ()
    shapes: tuple[tuple[str, tuple[int, ...]], ...] = ()
    int_dtypes: tuple[tuple[str, torch.dtype], ...] = ()

    @property
    def expects_rejection(self) -> bool:
        """An input out of the operator's valid range: it must raise a clear TypeError or ValueError."""
        return self.scenario == "invalid"

    @property
    def elements(self) -> int:
        return math.prod(self.shape)

    @property
    def all_elements(self) -> int:
        """The elements of every tensor it draws (by named dimensions), else of its one shape."""
        return sum(math.prod(s) for _, s in self.shapes) if self.shapes else self.elements

    def shape_text(self) -> str:
        return shape_text(self.shape, self.shapes)

    @property
    def counted(self) -> bool:
        """Whether the case is part of the level's scale (special scenarios and extras are not)."""
        return self.rank < SPECIAL_RANK

    def describe(self) -> str:
        b = f" {self.scenario}" if self.scenario else ""
        b += f"({self.filled})" if self.filled else ""
        b += "".join(f" no-{name}" for name in self.omitted)
        return f"#{self.index} {str(self.dtype).removeprefix('torch.')} {self.shape_text()} {self.value_range}{b}"


def spec_of(suite: Suite):
    """The spec a suite's cases run through: its operator's, or the one made from its reference callable."""
    if suite.reference is None:
        return op_spec(suite.name)
    attrs = tuple((a.name, a.values[0]) for a in suite.attrs)
    declared = reference.Declared(
        suite.reference, tuple(t.name for t in suite.tensors), attrs, suite.derived, suite.backward
    )
    rule = suite.primary.shapes
    first = rule.fixed[0] if rule.fixed else (2,) * max(rule.dim_numbers)
    problem = suite.reference.startswith(reference.PROBLEM)
    src = problems.source(suite.reference[len(reference.PROBLEM) :]) if problem else None
    return reference.spec_for(declared, suite.name, tuple(t.shape or first for t in suite.tensors), src)


def mix(limits: str, n: int) -> list[str]:
    """n distribution names in the level's shares, spread evenly (a smooth weighted round robin)."""
    shares = DISTRIBUTIONS[limits]
    credit = {name: 0.0 for name, _ in shares}
    out = []
    for _ in range(n):
        for name, share in shares:
            credit[name] += share
        pick = max(credit, key=credit.get)
        credit[pick] -= 1.0
        out.append(pick)
    return out


def draw_attrs(suite: Suite, rng) -> dict:
    """One value of each attribute among its equivalence classes: uniformly, or by the file's weights."""
    out = {}
    for a in suite.attrs:
        if a.weights:
            w = np.asarray(a.weights, dtype=np.float64)
            out[a.name] = a.values[int(rng.choice(len(a.values), p=w / w.sum()))]
        else:
            out[a.name] = a.values[int(rng.integers(len(a.values)))]
    return out
