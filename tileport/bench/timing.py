"""Interleaved timing: every provider once per round, so machine noise hits them alike.

The machines here are shared and noisy: the figures that count are min, median and p80 over many rounds,
and ratios between providers measured in the same rounds. The order rotates every round: whoever runs
right after the copy provider finds the caches cold, and a fixed order hands that penalty to one provider
(it made the kernel-only forward look 20-40% slower than the allocating call in one measurement).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Timing:
    min_us: float
    median_us: float
    p80_us: float
    rounds: int

    @classmethod
    def of(cls, seconds: list[float]) -> Timing:
        us = np.asarray(seconds) * 1e6
        return cls(float(us.min()), float(np.median(us)), float(np.percentile(us, 80)), len(seconds))


def interleave(
    providers: dict[str, Callable[[], object]], budget_s: float = 0.5, min_rounds: int = 5, max_rounds: int = 2000
) -> dict[str, Timing]:
    """Time each provider in rounds until ``budget_s`` is spent (at least ``min_rounds``)."""
    for fn in providers.values():  # warm-up: compiles, caches, first-touch page faults
        fn()
    times: dict[str, list[float]] = {name: [] for name in providers}
    order = list(providers.items())
    start = time.perf_counter()
    rounds = 0
    while rounds < min_rounds or (time.perf_counter() - start < budget_s and rounds < max_rounds):
        k = rounds % len(order)
        for name, fn in order[k:] + order[:k]:
            t0 = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t0)
        rounds += 1
    return {name: Timing.of(ts) for name, ts in times.items()}
