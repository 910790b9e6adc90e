"""PNGs from the benchmark CSV: latency, GB/s and share of the copy bandwidth against size, per mode and
dtype, one line per provider, for the latest run in the file (or every run when asked)."""

from __future__ import annotations

from pathlib import Path

from ..report.plots import latency

FIGURES = (
    ("min_us", "min us", "latency"),
    ("gbps", "GB/s (minimum traffic)", "gbps"),
    ("bandwidth_share", "share of copy bandwidth", "bandwidth_share"),
)


def latest(rows: list[dict]) -> list[dict]:
    """The rows of the latest run of each (operator, mode, dtype, shape, threads): several runs compose."""
    key = lambda r: (r["operator"], r["mode"], r["dtype"], r["shape"], r["threads"])  # noqa: E731
    last: dict = {}
    for r in rows:
        last[key(r)] = max(last.get(key(r), ""), r["run"])
    return [r for r in rows if r["run"] == last[key(r)]]


def bench_plots(rows: list[dict], out: Path, op: str) -> list[Path]:
    """One PNG per (statistic, mode, threads) present in ``rows``."""
    out.mkdir(parents=True, exist_ok=True)
    rows = [r for r in rows if r["operator"] == op]
    made = []
    for threads in sorted({r["threads"] for r in rows}):
        mine = [r for r in rows if r["threads"] == threads]
        for mode in dict.fromkeys(r["mode"] for r in mine):
            for stat, label, stem in FIGURES:
                p = latency(mine, out / f"{op}_{mode}_{stem}_t{threads}.png", f"{op} t{threads}", mode, stat, label)
                if p is not None:
                    made.append(p)
    return made
