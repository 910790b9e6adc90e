"""How fast ``tileport verify`` runs cases, and what that makes of the standard's L2 on N machines.

Times one evenly spaced sample of a level's cases (default: 24 of L2, 1,000 runs each) three ways, each on
the same cases: in this process (one worker), on the local worker pool (``--jobs``: one process per CPU), and
as Ray tasks on a local Ray instance (``--ray``). From the Ray rate, the projected wall time of the level's
whole case list on N machines like this one, assuming Ray's own overhead is what it was here and the rate
scales with the machines (each batch is independent; the driver only journals).

    python scripts/verify_throughput.py [OP] [--level L2] [--sample 24] [--out docs/verify-throughput]

Writes throughput.md (the tables), throughput.csv and projection.png into --out.
"""

from __future__ import annotations

import argparse
import csv
import time
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

from tileport.bench.environment import machine  # noqa: E402
from tileport.precision.standard import RETEST_MIN_SEEDS, RETEST_SEEDS  # noqa: E402
from tileport.verify import (  # noqa: E402
    cluster,
    pool,
    prepare,  # noqa: E402
)
from tileport.verify.accuracy import Task  # noqa: E402

MACHINES = (1, 2, 4, 8, 16, 32, 64)


def sample(cases: list, n: int) -> list:
    """n cases evenly spaced over the list (every dtype, shape family and distribution the level draws)."""
    step = max(1, len(cases) // n)
    return cases[::step][:n]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("op", nargs="?", default="l2norm")
    ap.add_argument("--level", default="L2")
    ap.add_argument("--sample", type=int, default=24)
    ap.add_argument("--out", type=Path, default=Path("docs/verify-throughput"))
    args = ap.parse_args()
    console = Console()

    plan = prepare(args.op, args.level, ["tilelang"])
    lv = plan.suite.level(args.level)
    task = Task(
        plan.suite, tuple(plan.names), lv.limits, lv.runs, RETEST_SEEDS, device="cpu", min_seeds=RETEST_MIN_SEEDS
    )
    cases = sample(plan.cases, args.sample)
    cpus = pool.cpus()
    rows = []
    with console.status("") as status:
        for name, runner in (
            ("this process (1 worker)", lambda: pool.run_task(task, cases, 1)),
            (f"local pool ({cpus} workers)", lambda: pool.run_task(task, cases, cpus)),
            (f"Ray, local instance ({cpus} CPUs)", lambda: cluster.run_task(task, cases, cluster.LOCAL)),
        ):
            status.update(f"{len(cases)} {args.level} cases of {args.op}: {name}")
            if name.startswith("Ray"):
                cluster.connect(cluster.LOCAL)  # the instance's start-up is not the rate
            t0 = time.perf_counter()
            runner()
            seconds = time.perf_counter() - t0
            rows.append(
                {
                    "executor": name,
                    "cases": len(cases),
                    "seconds": round(seconds, 1),
                    "cases_per_s": len(cases) / seconds,
                }
            )
    total = len(plan.cases)
    rate = rows[-1]["cases_per_s"]
    projection = [{"machines": n, "hours": total / (rate * n) / 3600} for n in MACHINES]

    args.out.mkdir(parents=True, exist_ok=True)
    with (args.out / "throughput.csv").open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.loglog([p["machines"] for p in projection], [p["hours"] for p in projection], "o-")
    ax.set_xlabel(f"machines ({cpus} CPUs each, as this one)")
    ax.set_ylabel("hours")
    ax.set_title(f"{args.op} {args.level}: {total} cases, {lv.runs} runs each (projected)")
    ax.grid(True, which="both", alpha=0.3)
    fig.tight_layout()
    fig.savefig(args.out / "projection.png", dpi=110)

    md = [
        f"Machine: {machine()}. Sample: {len(cases)} of the {total} {args.level} cases of {args.op} "
        f"({lv.runs} runs per case, retests of {RETEST_SEEDS} seeds where a check fails), TileLang CPU backend.",
        "",
        "| executor | cases | seconds | cases/s |",
        "|---|---|---|---|",
    ]
    md += [f"| {r['executor']} | {r['cases']} | {r['seconds']} | {r['cases_per_s']:.3f} |" for r in rows]
    md += [
        "",
        f"Projected wall time of all {total} {args.level} cases at the Ray rate, N machines like this one:",
        "",
        "| machines | " + " | ".join(str(p["machines"]) for p in projection) + " |",
        "|---|" + "---|" * len(projection),
        "| hours | " + " | ".join(f"{p['hours']:.1f}" for p in projection) + " |",
        "",
        "![projection](projection.png)",
    ]
    (args.out / "throughput.md").write_text("\n".join(md) + "\n")

    table = Table(title=f"{args.op} {args.level} throughput ({machine()})")
    for h in ("executor", "cases", "seconds", "cases/s"):
        table.add_column(h)
    for r in rows:
        table.add_row(r["executor"], str(r["cases"]), str(r["seconds"]), f"{r['cases_per_s']:.3f}")
    console.print(table)
    console.print("projected hours: " + ", ".join(f"{p['machines']} machines {p['hours']:.1f}" for p in projection))
    console.print(f"written: {args.out}/throughput.md, throughput.csv, projection.png")


if __name__ == "__main__":
    main()
