"""PNG plots of a verify report (matplotlib, no screen needed): error-ratio distributions per dtype,
latency against size beside torch eager and torch.compile (peak memory is the performance table's column)."""

from __future__ import annotations

import math
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from .benchrows import pivot  # noqa: E402
from ..precision import LEVELS  # noqa: E402


def ratio_distributions(rep, path: Path) -> Path | None:
    dtypes = list(dict.fromkeys(r.dtype for r in rep.results))
    if not dtypes:
        return None
    # one panel per dtype, stacked: the plot sits beside the verdict grid at about its own width (readable there)
    fig, axes = plt.subplots(len(dtypes), 1, figsize=(6.2, 2.2 * len(dtypes) + 0.4), squeeze=False)
    backends = list(dict.fromkeys(r.backend for r in rep.results))
    for ax, dtype in zip(axes[:, 0], dtypes):
        for b in backends:
            vals = [r.verdict.ratios["mare"] for r in rep.results if r.dtype == dtype and r.backend == b]
            vals = [min(max(v, 1e-2), 1e4) for v in vals if math.isfinite(v)]
            if vals:
                ax.hist(vals, bins=[10 ** (k / 10) for k in range(-20, 41)], alpha=0.6, label=b)
        ax.set_xscale("log")
        ax.axvline(LEVELS[rep.limits][0], color="red", linestyle="--", label=f"{rep.limits} limit")
        ax.set_title(f"{rep.op} {dtype}", fontsize=11)
        ax.set_xlabel("MARE(under test) / MARE(benchmark)", fontsize=10)
        ax.set_ylabel("checks", fontsize=10)
        ax.legend(fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _series(rows, statistic, mode):
    """{dtype: {provider: [(elements, value)]}} for one mode."""
    out: dict = {}
    for (m, dtype, shape, _threads), provs in pivot(rows, statistic).items():
        if m != mode:
            continue
        n = math.prod(int(s) for s in shape.split("x"))
        for p, v in provs.items():
            out.setdefault(dtype, {}).setdefault(p, []).append((n, v))
    return out


def latency(rows, path: Path, title: str, mode: str = "fwd", statistic: str = "min_us", ylabel: str = "min us") -> Path | None:
    series = _series(rows, statistic, mode)
    if not series:
        return None
    fig, axes = plt.subplots(1, len(series), figsize=(4.2 * len(series), 3.4), squeeze=False)
    for ax, (dtype, provs) in zip(axes[0], series.items()):
        for p, pts in provs.items():
            pts.sort()
            ax.plot([n for n, _ in pts], [v for _, v in pts], marker="o", label=p)
        ax.set_xscale("log")
        ax.set_yscale("log" if statistic.endswith("_us") else "linear")
        ax.set_title(f"{title} {mode} {dtype}", fontsize=11)
        ax.set_xlabel("elements", fontsize=10)
        ax.set_ylabel(ylabel, fontsize=10)
        ax.legend(fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def verify_plots(rep, out: Path) -> list[Path]:
    made = [
        ratio_distributions(rep, out / "ratios.png"),
        latency(rep.perf, out / "latency_fwd.png", rep.op, "fwd"),
        latency(rep.perf, out / "latency_fwdbwd.png", rep.op, "fwdbwd"),
    ]  # peak memory is a column of the performance table, which says it better than bars of a few pixels
    return [p for p in made if p is not None]
