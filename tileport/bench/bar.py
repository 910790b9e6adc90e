"""An operator's speed bar (its spec's criteria) judged on a benchmark run's rows: each criterion, measured,
target, met. Rendered by ``report.benchrows.bar_table``."""

from __future__ import annotations

from ..report.benchrows import pivot


def judge_bar(rows: list[dict], criteria, backend: str = "tilelang") -> list[dict]:
    """One record per (criterion, measured group) present in ``rows``."""
    out = []
    for c in criteria:
        provider = f"{backend}:kernel" if c.kernel_only else backend
        for key, provs in pivot(rows, c.statistic).items():
            mode, dtype, shape, threads = key
            if mode in c.modes and shape in c.shapes and provider in provs:
                value, target = provs[provider], c.target_for(dtype)
                out.append(dict(criterion=c.label, provider=provider, mode=mode, dtype=dtype, shape=shape,
                                threads=threads, measured=value, target=target, met=value >= target))  # fmt: skip
    return out
