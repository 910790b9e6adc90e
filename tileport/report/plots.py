"""PNG plots of a verify report (matplotlib, no screen needed): error-ratio distributions per dtype,
latency against size beside torch eager and torch.compile (peak memory is the performance table's column).
Every plot of a report gives a provider the same colour (``provider_colours``)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402

from ..precision import LEVELS  # noqa: E402
from .benchrows import pivot  # noqa: E402
from .html import LEGEND_TIPS  # noqa: E402

# tab10 without its red: red is the limit line and the failed slot's edge
PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf")
LOW, HIGH = -2, 4  # the drawn ratios' decades: 1e-2 .. 1e4 (values beyond sit in the end bins)
FAILED_SLOT = (10**4.35, 10**4.95)  # past the axis' last decade: failed checks that have no ratio over the limit
MIN_LABEL = 24  # a legend name is never shortened below this (characters)


def provider_colours(*names) -> dict[str, str]:
    """A colour per provider, in first-seen order over every name given, shared by all of a report's plots."""
    order = list(dict.fromkeys(n for group in names for n in group))
    return {n: PALETTE[i % len(PALETTE)] for i, n in enumerate(order)}


def _drawn_ratio(r, limit: float) -> float | None:
    """A check's MARE ratio where it is one to draw: it compared output elements, and either passed or failed by
    that ratio (right of the limit line); None for the others (no ratio, or failed by another rule)."""
    v = r.verdict.ratios["mare"]
    if r.verdict.actual.elements == 0 or not math.isfinite(v):
        return None
    return v if r.passed or v > limit else None


def _columns(fig, handles) -> int:
    """Legend columns: as many as the widest name allows across the figure (about 14 characters of 9 pt an inch)."""
    widest = max(len(h.get_label()) for h in handles)
    return max(1, min(len(handles), int(fig.get_size_inches()[0] * 14) // (widest + 5)))


def _short(name: str, limit: int) -> str:
    """``name`` in at most about ``limit`` characters: its kind ("impl:") and its tail from a folder
    ("impl:…/ports/kernel.py:fn"), the part that tells one provider from another."""
    if len(name) <= limit:
        return name
    kind = name[: name.index(":") + 1] if ":" in name[:16] else ""
    tail = name[-max(limit - len(kind) - 1, MIN_LABEL // 2) :]
    folder = tail.find("/")
    return f"{kind}…{tail[folder:] if 0 <= folder < len(tail) - MIN_LABEL // 2 else tail}"


def _labels(names: list[str], limit: int) -> list[str]:
    """Each name shortened to ``limit`` (``_short``), a name that would read as another's kept longer."""
    out = [_short(n, limit) for n in names]
    for i, n in enumerate(names):
        grow = limit
        while out[i] != n and out.count(out[i]) > 1:
            grow += 4
            out[i] = _short(n, grow)
    return out


def _fits(fig, legend) -> bool:
    width = legend.get_window_extent(fig.canvas.get_renderer()).width
    return width <= fig.bbox.width - 4  # centred: a legend wider than the figure is cut at both edges


def _fig_legend(fig, handles) -> list[dict]:
    """One legend above the panels (never over a panel's limit line or lines), the panels laid out below it. It
    fits the figure's width: fewer columns first, then the longest names shortened (an --impl's path); each
    shortened entry's full name and box (fractions of the image from its top left) are returned for a tooltip."""
    names = [h.get_label() for h in handles]
    limit = max(len(n) for n in names)
    while True:
        labels = _labels(names, limit)
        for h, label in zip(handles, labels):
            h.set_label(label)
        for cols in range(_columns(fig, handles), 0, -1):
            legend = fig.legend(
                handles=handles, loc="upper center", bbox_to_anchor=(0.5, 1.0), ncol=cols, fontsize=9, frameon=False
            )
            if _fits(fig, legend) or (cols == 1 and limit <= MIN_LABEL):
                rows = math.ceil(len(handles) / cols)
                fig.tight_layout(rect=(0, 0, 1, 1 - (0.12 + 0.2 * rows) / fig.get_size_inches()[1]))
                return _tips(fig, legend, names, labels)
            legend.remove()
        limit = max(MIN_LABEL, int(limit * 0.85))


def _tips(fig, legend, names: list[str], labels: list[str]) -> list[dict]:
    """The shortened entries: full name, and the box of its text as fractions of the figure from its top left."""
    fig.draw_without_rendering()  # the entries' texts are placed when the legend draws
    renderer = fig.canvas.get_renderer()
    w, h = fig.bbox.width, fig.bbox.height
    out = []
    for name, label, text in zip(names, labels, legend.get_texts()):
        if name != label:
            b = text.get_window_extent(renderer)
            out.append({"name": name, "box": [b.x0 / w, 1 - b.y1 / h, b.x1 / w, 1 - b.y0 / h]})
    return out


def _save(fig, path: Path, tips: list[dict]) -> None:
    """The PNG, with the shortened legend entries' full names in a text chunk (``LEGEND_TIPS``) that the HTML
    report reads for their tooltips."""
    fig.savefig(path, dpi=110, metadata={LEGEND_TIPS: json.dumps(tips)} if tips else None)
    plt.close(fig)


def _ratio_panel(ax, rep, dtype: str, colours: dict, limit: float) -> None:
    """One dtype's histogram of drawn ratios per provider, its failed slot and its count of undrawn passes."""
    bins = [10 ** (k / 10) for k in range(10 * LOW, 10 * HIGH + 1)]
    mine = [r for r in rep.results if r.dtype == dtype]
    failed, undrawn = {}, 0
    for b, colour in colours.items():
        rs = [r for r in mine if r.backend == b]
        vals = [min(max(v, bins[0]), bins[-1]) for v in (_drawn_ratio(r, limit) for r in rs) if v is not None]
        if vals:
            ax.hist(vals, bins=bins, color=colour, alpha=0.45, histtype="stepfilled")
            ax.hist(vals, bins=bins, color=colour, histtype="step", linewidth=1.2)
        failed[b] = sum(1 for r in rs if not r.passed and _drawn_ratio(r, limit) is None)
        undrawn += sum(1 for r in rs if r.passed and _drawn_ratio(r, limit) is None)
    slot = [b for b, n in failed.items() if n]
    lo, hi = math.log10(FAILED_SLOT[0]), math.log10(FAILED_SLOT[1])
    for i, b in enumerate(slot):  # side by side in the slot, each hatched in its provider's colour, its count on top
        left, right = 10 ** (lo + (hi - lo) * i / len(slot)), 10 ** (lo + (hi - lo) * (i + 1) / len(slot))
        ax.bar(
            left,
            failed[b],
            width=right - left,
            align="edge",
            color=colours[b],
            edgecolor="#b00",
            hatch="//",
            linewidth=1,
        )
        ax.annotate(
            str(failed[b]), (math.sqrt(left * right), failed[b]), ha="center", va="bottom", fontsize=8, color="#b00"
        )
    ax.axvline(10 ** (HIGH + 0.2), color="#999", linewidth=0.8)
    ax.axvline(limit, color="red", linestyle="--")
    ax.set_xscale("log")
    ax.set_xlim(10 ** (LOW - 0.2), FAILED_SLOT[1] * 10**0.05)
    ticks = [f"$10^{{{k}}}$" for k in range(LOW, HIGH + 1)]
    ticks[0], ticks[-1] = "≤" + ticks[0], "≥" + ticks[-1]  # the end bins hold the values beyond
    ax.set_xticks([10**k for k in range(LOW, HIGH + 1)] + [10 ** ((lo + hi) / 2)], ticks + ["failed"])
    ax.get_xticklabels()[-1].set_color("#b00")
    ax.minorticks_off()
    ax.margins(y=0.15)
    ax.set_title(f"{rep.op} {dtype}", fontsize=11, loc="left")
    ax.set_xlabel("MARE(under test) / MARE(benchmark)", fontsize=10)
    ax.set_ylabel("checks", fontsize=10)
    if undrawn:
        ax.set_title(
            f"not drawn: {undrawn} passing checks with nothing to compare", fontsize=7.5, color="#555", loc="right"
        )


def ratio_distributions(rep, path: Path, colours: dict | None = None) -> Path | None:
    """One panel per dtype, stacked (it sits beside the verdict grid at about its own width): a histogram of the
    MARE ratios per provider, the level's limit, and a separate failed slot past the axis for failed checks that
    have no ratio over the limit (did not run, nothing to compare, or failed by another rule) so they never read
    as good ratios."""
    dtypes = list(dict.fromkeys(r.dtype for r in rep.results))
    if not dtypes:
        return None
    colours = colours or provider_colours([r.backend for r in rep.results])
    colours = {b: c for b, c in colours.items() if any(r.backend == b for r in rep.results)}
    limit = LEVELS[rep.limits][0]
    handles = [Patch(facecolor=c, edgecolor=c, alpha=0.6, label=b) for b, c in colours.items()]
    handles += [
        Line2D([], [], color="red", linestyle="--", label=f"{rep.limits} limit ({limit:g})"),
        Patch(facecolor="white", edgecolor="#b00", hatch="//", label="failed, no ratio over the limit"),
    ]
    fig, axes = plt.subplots(len(dtypes), 1, figsize=(6.2, 2.3 * len(dtypes) + 0.8), squeeze=False)
    for ax, dtype in zip(axes[:, 0], dtypes):
        _ratio_panel(ax, rep, dtype, colours, limit)
    _save(fig, path, _fig_legend(fig, handles))
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


def latency(
    rows,
    path: Path,
    title: str,
    mode: str = "fwd",
    statistic: str = "min_us",
    ylabel: str = "min us",
    colours: dict | None = None,
) -> Path | None:
    """One panel per dtype of ``statistic`` against elements, a line per provider; ``colours`` (default: from
    every row's provider, whatever the mode) keeps a provider's colour from plot to plot."""
    series = _series(rows, statistic, mode)
    if not series:
        return None
    colours = colours or provider_colours([r["provider"] for r in rows])
    shown = list(dict.fromkeys(p for provs in series.values() for p in provs))
    handles = [Line2D([], [], color=colours.get(p, "#000"), marker="o", label=p) for p in shown]
    fig, axes = plt.subplots(1, len(series), figsize=(max(6.2, 4.2 * len(series)), 3.9), squeeze=False)
    for ax, (dtype, provs) in zip(axes[0], series.items()):
        for p, pts in provs.items():
            pts.sort()
            ax.plot([n for n, _ in pts], [v for _, v in pts], marker="o", color=colours.get(p, "#000"), label=p)
        ax.set_xscale("log")
        ax.set_yscale("log" if statistic.endswith("_us") else "linear")
        ax.set_title(f"{title} {mode} {dtype}", fontsize=11)
        ax.set_xlabel("elements", fontsize=10)
        ax.set_ylabel(ylabel, fontsize=10)
    _save(fig, path, _fig_legend(fig, handles))
    return path


def verify_plots(rep, out: Path) -> list[Path]:
    """The report's PNGs, one provider colour mapping for all of them."""
    colours = provider_colours([r.backend for r in rep.results], [r["provider"] for r in rep.perf])
    made = [
        ratio_distributions(rep, out / "ratios.png", colours),
        latency(rep.perf, out / "latency_fwd.png", rep.op, "fwd", colours=colours),
        latency(rep.perf, out / "latency_fwdbwd.png", rep.op, "fwdbwd", colours=colours),
    ]  # peak memory is a column of the performance table, which says it better than bars of a few pixels
    return [p for p in made if p is not None]
