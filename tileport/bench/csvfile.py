"""One CSV schema for every operator's benchmark rows (long format, appended per run), as Liger-Kernel keeps
one shared benchmark CSV: a row is one statistic of one provider on one (mode, dtype, shape, threads)."""

from __future__ import annotations

import csv
from pathlib import Path

from ..dtypes import normalize

FIELDS = (
    "operator",
    "provider",
    "mode",
    "dtype",
    "shape",
    "threads",
    "statistic",
    "value",
    "machine",
    "versions",
    "run",
    "workload",
)
STATISTICS = (
    "min_us",
    "median_us",
    "p80_us",
    "gbps",
    "bandwidth_share",
    "gflops",
    "matmul_share",
    "speedup_vs_eager",
    "speedup_vs_compile",
    "peak_bytes",
    "peak_resident_bytes",
    "rounds",
)


def append(path: str | Path, rows: list[dict]) -> Path:
    """Append ``rows`` to ``path``, writing the header when the file is new; refuses a foreign header."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    new = not path.exists() or path.stat().st_size == 0
    if not new:
        with path.open(newline="") as f:
            header = next(csv.reader(f), [])
        if tuple(header) != FIELDS:
            raise ValueError(f"{path}: not a tileport benchmark CSV (header {header[:4]}...); choose another --csv")
    with path.open("a", newline="") as f:
        w = csv.DictWriter(f, fieldnames=FIELDS)
        if new:
            w.writeheader()
        w.writerows({k: r.get(k, "") for k in FIELDS} for r in rows)
    return path


def read(path: str | Path) -> list[dict]:
    with Path(path).open(newline="") as f:
        rows = list(csv.DictReader(f))
    for r in rows:
        r["value"] = float(r["value"])
        r["threads"] = int(r["threads"])
        r["dtype"] = normalize(r["dtype"])
    return rows
