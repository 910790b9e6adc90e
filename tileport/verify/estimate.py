"""A rough wall time of a verify run, printed before it starts; the progress display's ETA then follows the
run's own rate. The costs are rates of this project's CI machine (measured as docs/commands.md says): other
machines, operators and backends differ, which is why the estimate is called rough."""

from __future__ import annotations

CASE_S = 0.01  # a case's fixed cost per provider: inputs, golden, benchmark, metrics
ELEMENT_RUN_S = 2.6e-9  # per output element of a case and run, per provider, for a case of up to 2^20 elements
LARGE_ELEMENTS = 1 << 20
LARGE_ELEMENT_RUN_S = 24e-9  # the same past it: the fp64 golden and the metrics no longer run in cache
GOLDEN_RUNS = 10  # the float64 golden, the benchmark and the metrics, in runs' worth of per-element work
INTERPRETED_CASE_S = 0.5  # a case under an interpreter (Triton on the CPU: the quick level's small cases only)
GROUP_S = 2.5  # a timing group: its interleaved rounds and torch.compile's compile


def estimate_s(plan, groups: int, jobs: int) -> float:
    """A rough wall time of a verify run (see the constants above), in seconds."""
    runs = plan.suite.level(plan.level).runs
    quick = plan.suite.levels.get("quick")
    native = [n for n in plan.names if n not in plan.interpreted]
    interpreted = len(plan.names) - len(native)
    per_provider = sum(
        CASE_S + (_element_s(c.elements) * c.elements * (runs + GOLDEN_RUNS) if c.counted else 0) for c in plan.cases
    )
    reduced = min(len(plan.cases), quick.cases if quick is not None else len(plan.cases))
    accuracy = len(native) * per_provider + interpreted * reduced * INTERPRETED_CASE_S
    return accuracy / max(1, min(jobs, len(plan.cases))) + groups * GROUP_S


def _element_s(elements: int) -> float:
    return ELEMENT_RUN_S if elements <= LARGE_ELEMENTS else LARGE_ELEMENT_RUN_S


def duration(seconds: float) -> str:
    """``40 s``, ``12 min``, ``3.5 h``."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    return f"{seconds / 60:.0f} min" if seconds < 90 * 60 else f"{seconds / 3600:.1f} h"
