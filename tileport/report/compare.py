"""The comparison of two verify runs (``verify/compare.py`` matches them) rendered: its tables as markdown and
HTML, and the per-case MERE of one run against the other as a plot."""

from __future__ import annotations

import math
from pathlib import Path

from . import html, markdown
from .table import Table


def plot(points: list[dict], path: Path) -> Path | None:
    """Per-case MERE of A against B, one panel per output, log-log, with the diagonal (equal errors)."""
    # matplotlib: imported where a plot is drawn, kept out of start-up
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # after the backend is chosen

    outputs = sorted({p["output"] for p in points})
    pts = [
        p
        for p in points
        if p["mere_a"] > 0 and p["mere_b"] > 0 and math.isfinite(p["mere_a"]) and math.isfinite(p["mere_b"])
    ]
    if not pts:
        return None
    fig, axes = plt.subplots(1, len(outputs), figsize=(5 * len(outputs), 4.5), squeeze=False)
    for ax, name in zip(axes[0], outputs):
        mine = [p for p in pts if p["output"] == name]
        for dtype in sorted({p["dtype"] for p in mine}):
            sel = [p for p in mine if p["dtype"] == dtype]
            ax.scatter([p["mere_b"] for p in sel], [p["mere_a"] for p in sel], s=12, alpha=0.7, label=dtype)
        if mine:
            lo = min(min(p["mere_a"], p["mere_b"]) for p in mine)
            hi = max(max(p["mere_a"], p["mere_b"]) for p in mine)
            ax.plot([lo, hi], [lo, hi], "k--", linewidth=1, label="equal errors")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_title(f"{name}: MERE per case", fontsize=12)
        ax.set_xlabel("B (MERE against the golden)", fontsize=11)
        ax.set_ylabel("A (MERE against the golden)", fontsize=11)
        ax.legend(fontsize=9)
    fig.suptitle("Points above the diagonal: A's errors are larger than B's on that case", fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def write(tables: list[Table], points: list[dict], out: Path, title: str) -> dict[str, Path]:
    out.mkdir(parents=True, exist_ok=True)
    image = plot(points, out / "compare.png")
    images = [image] if image else []
    paths = {"md": out / "compare.md", "html": out / "compare.html"}
    paths["md"].write_text(markdown.document(title, tables, [p.name for p in images]))
    paths["html"].write_text(html.document(title, tables, images))
    return paths
