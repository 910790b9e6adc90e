"""What one case gave, as the journal keeps it and the report merges it: its results, its share of the
cross-backend comparison (``PairStat``), what it did not run, and what another machine needs of it (sides,
retests). Data only: the journal reads and writes it without the harness that makes it."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..precision import CaseResult


@dataclass
class PairStat:
    """How far two backends' outputs are apart, over every case of one dtype."""

    a: str
    b: str
    dtype: str
    output: str
    max_abs: float = 0.0
    max_rel: float = 0.0  # |a - b| / (|b| + 1e-7), finite positions only
    identical: int = 0  # cases with bit-identical outputs
    cases: int = 0


@dataclass
class CaseOutcome:
    """What one case gave: its results, its share of the cross-backend comparison, and what it did not run
    (key -> [count, why]). Outcomes of different cases fold together in any grouping (``merge``)."""

    index: int
    results: list[CaseResult] = field(default_factory=list)
    pairs: dict = field(default_factory=dict)
    skipped: dict = field(default_factory=dict)
    digest: str = ""  # of the case's inputs (competitor.digest): another machine must draw the same
    sides: dict = field(default_factory=dict)  # (provider, output) -> competitor.Side: what a benchmark needs
    retests: dict = field(default_factory=dict)  # (provider, output, seed) -> competitor.Side (--retest-for)
