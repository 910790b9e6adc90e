"""An operator's speed bar (its spec's criteria) judged on a benchmark run's rows: each criterion, measured,
target, met. Rendered by ``report.benchrows.bar_table``."""

from __future__ import annotations

from ..report.benchrows import pivot
from .noise import noisy_groups


def derived(rows: list[dict], statistic: str) -> dict[tuple, dict[str, float]]:
    """A statistic of the run's own rows: ``vs_fp32`` (the fp32 group's min time over this one's: >= 1 is no
    slower than fp32), ``thread_scaling`` (the one-thread min time over this one's, for more threads),
    ``memory_vs_eager`` (torch eager's peak bytes over this provider's: 4 is a quarter of eager's memory);
    otherwise the rows' own statistic."""
    if statistic == "memory_vs_eager":
        peaks = pivot(rows, "peak_bytes")
        return {
            k: {p: provs["torch-eager"] / b for p, b in provs.items() if b > 0}
            for k, provs in peaks.items()
            if "torch-eager" in provs
        }
    if statistic not in ("vs_fp32", "thread_scaling"):
        return pivot(rows, statistic)
    mins, out = pivot(rows, "min_us"), {}
    for (mode, dtype, shape, threads), provs in mins.items():
        base_key = (mode, "float32", shape, threads) if statistic == "vs_fp32" else (mode, dtype, shape, 1)
        if base_key == (mode, dtype, shape, threads) or base_key not in mins:
            continue
        base = mins[base_key]
        out[(mode, dtype, shape, threads)] = {p: base[p] / us for p, us in provs.items() if p in base and us > 0}
    return out


def judge_bar(rows: list[dict], criteria, backend: str = "tilelang") -> list[dict]:
    """One record per (criterion, measured group) present in ``rows``, with the criterion's stated cause and,
    where the group was noisy (``noise``), why its figure is not a finding."""
    out, noisy = [], noisy_groups(rows)
    for c in criteria:
        provider = f"{backend}:kernel" if c.kernel_only else backend
        for key, provs in derived(rows, c.statistic).items():
            mode, dtype, shape, threads = key
            if c.dtypes and dtype not in c.dtypes:
                continue
            if mode in c.modes and shape in c.shapes and provider in provs:
                value, target = provs[provider], c.target_for(dtype)
                out.append(
                    dict(
                        criterion=c.label,
                        provider=provider,
                        mode=mode,
                        dtype=dtype,
                        shape=shape,
                        threads=threads,
                        measured=value,
                        target=target,
                        met=value >= target,
                        cause=c.cause,
                        noisy="; ".join(noisy.get((mode, dtype, shape, int(threads)), ())),
                    )
                )
    return out
