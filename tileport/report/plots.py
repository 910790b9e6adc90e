"""PNG plots of a verify report (matplotlib, no screen needed): error-ratio distributions per dtype,
latency against size beside torch eager and torch.compile, and peak memory."""

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
    fig, axes = plt.subplots(1, len(dtypes), figsize=(4.2 * len(dtypes), 3.4), squeeze=False)
    backends = list(dict.fromkeys(r.backend for r in rep.results))
    for ax, dtype in zip(axes[0], dtypes):
        for b in backends:
            vals = [r.verdict.ratios["mare"] for r in rep.results if r.dtype == dtype and r.backend == b]
            vals = [min(max(v, 1e-2), 1e4) for v in vals if math.isfinite(v)]
            if vals:
                ax.hist(vals, bins=[10 ** (k / 10) for k in range(-20, 41)], alpha=0.6, label=b)
        ax.set_xscale("log")
        ax.axvline(LEVELS[rep.limits][0], color="red", linestyle="--", label=f"{rep.limits} limit")
        ax.set_title(f"{rep.op} {dtype}: MARE ratio")
        ax.set_xlabel("MARE(under test) / MARE(benchmark)")
        ax.set_ylabel("checks")
        ax.legend(fontsize=7)
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
        ax.set_title(f"{title} {mode} {dtype}")
        ax.set_xlabel("elements")
        ax.set_ylabel(ylabel)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def memory(rows, path: Path, title: str) -> Path | None:
    peaks = pivot(rows, "peak_bytes")
    if not peaks:
        return None
    labels = [f"{m} {d} {s}" for (m, d, s, _t) in peaks]
    provs = list(dict.fromkeys(p for v in peaks.values() for p in v))
    fig, ax = plt.subplots(figsize=(max(6, 0.5 * len(labels) * len(provs)), 3.8))
    width = 0.8 / max(len(provs), 1)
    for i, p in enumerate(provs):
        ax.bar([j + i * width for j in range(len(labels))], [v.get(p, 0) / 2**20 for v in peaks.values()], width, label=p)
    ax.set_xticks([j + 0.4 - width / 2 for j in range(len(labels))], labels, rotation=60, ha="right", fontsize=7)
    ax.set_ylabel("peak MiB allocated by the call")
    ax.set_title(f"{title}: peak memory")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def verify_plots(rep, out: Path) -> list[Path]:
    made = [
        ratio_distributions(rep, out / "ratios.png"),
        latency(rep.perf, out / "latency_fwd.png", rep.op, "fwd"),
        latency(rep.perf, out / "latency_fwdbwd.png", rep.op, "fwdbwd"),
        memory(rep.perf, out / "memory.png", rep.op),
    ]
    return [p for p in made if p is not None]
