"""Regenerate docs/ops/<op>.md for every operator (or those named) from a verify run and a benchmark run, and
the speed-bar section of docs/performance.md from benchmarks/results/<op>.md (the tables are never typed by hand). Operators
and their usage blocks come from their specs (``tileport.ops.spec``).

    python scripts/make_docs.py [OP ...] [--level quick|L0] [--bench-args "..."] [--performance-only] [--reuse]

``--reuse`` keeps an existing docs/ops/<op>-verify/report.md and docs/ops/<op>-bench/<op>.md (a long L0 run or
a full benchmark placed there) instead of running them again; ``--level`` and ``--bench-args`` then say how
they were made.
"""

from __future__ import annotations

import argparse
import re
import shlex
import shutil
from pathlib import Path

from typer.testing import CliRunner

from tileport.cli import app
from tileport.ops.spec import specs

ROOT = Path(__file__).resolve().parent.parent
OPS = ROOT / "docs" / "ops"
SECTIONS = ("Summary", "The standard's minimum counts", "Dual benchmark", "Failed checks", "Cross-backend")


def section(md: str, title: str) -> str:
    """One '## title' section of a generated report (title matched at the start)."""
    m = re.search(rf"^## {re.escape(title)}.*?(?=^## |\Z)", md, flags=re.S | re.M)
    return m.group(0).strip() + "\n" if m else ""


def run(args: list[str]) -> None:
    result = CliRunner().invoke(app, args)
    if result.exit_code != 0:
        raise SystemExit(f"tileport {' '.join(args)} failed:\n{result.output}")


BENCH_START, BENCH_END = "<!-- bench:start -->", "<!-- bench:end -->"


def update_performance() -> None:
    """Put the speed bar of each operator's latest full benchmark (benchmarks/results/<op>.md) into
    docs/performance.md."""
    parts = []
    for op in specs():
        path = ROOT / "benchmarks" / "results" / f"{op}.md"
        if not path.exists():
            continue
        table = path.read_text()
        header = table.split("\n\n", 2)[1]  # machine, versions, run
        bar = section(table, "The speed bar")
        bar = bar.split("\n", 1)[1].strip() if bar else "(no speed bar in this run)"
        parts.append(f"### {op}\n\n{header}\n\n{bar}\n")
    page = ROOT / "docs" / "performance.md"
    text = page.read_text()
    start, end = text.index(BENCH_START) + len(BENCH_START), text.index(BENCH_END)
    page.write_text(text[:start] + "\n" + "\n".join(parts) + text[end:])
    print(f"updated {page}")


def op_page(op: str, level: str, bench_args: str, reuse: bool = False) -> Path:
    spec = specs()[op]
    evidence, bench = OPS / f"{op}-verify", OPS / f"{op}-bench"
    if not (reuse and (evidence / "report.md").exists()):
        shutil.rmtree(evidence, ignore_errors=True)
        run(["verify", op, "--level", level, "--out", str(evidence)])
    if not (reuse and (bench / f"{op}.md").exists()):
        shutil.rmtree(bench, ignore_errors=True)
        run(["bench", op, *shlex.split(bench_args), "--csv", str(bench / "bench.csv"), "--out", str(bench)])
    report = (evidence / "report.md").read_text()
    titles = SECTIONS + tuple(re.findall(r"^## (Study: .+)$", report, flags=re.M))  # the op's own studies
    parts = [
        f"# {op}\n\n{spec.summary}: `{spec.math}` (the contract is the docstring of `tileport/ops/{op}/__init__.py`).\n",
        spec.usage + "\n",
        "Backends: `tilelang` (CPU C target here; CUDA and Ascend 950 kernels lowered with `tileport lower`), "
        "`triton` (GPU; CPU interpreter for small shapes), `torch` (the reference and the precision benchmark).\n",
        f"## Precision (`tileport verify {op} --level {level}`)\n",
        *(section(report, t).replace("## ", "### ", 1) for t in titles),
        f"Full report: [{op}-verify/report.md]({op}-verify/report.md) (`tileport verify` also writes a "
        "self-contained report.html, results.json and results.csv).\n",
        f"## Performance (`tileport bench {op} {bench_args}`)\n",
        (bench / f"{op}.md").read_text().split("\n", 2)[2].replace("## ", "### "),
        f"![latency fwd]({op}-bench/{op}_fwd_latency_t1.png)\n",
        f"![bandwidth share fwd]({op}-bench/{op}_fwd_bandwidth_share_t1.png)\n",
        f"![ratios]({op}-verify/ratios.png)\n",
        "Regenerate: `python scripts/make_docs.py`.\n",
    ]
    page = OPS / f"{op}.md"
    page.write_text("\n".join(parts))
    for heavy in ("report.html", "results.json", "results.csv"):  # the docs keep report.md and the PNGs
        (evidence / heavy).unlink(missing_ok=True)
    (bench / "bench.csv").unlink(missing_ok=True)
    return page


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("ops", nargs="*", help="operators (default: every one)")
    ap.add_argument("--level", default="quick")
    ap.add_argument("--bench-args", default="--quick --threads 1 --threads 2 --mode fwd --mode fwdbwd")
    ap.add_argument("--performance-only", action="store_true", help="only refresh docs/performance.md's speed-bar section")
    ap.add_argument("--reuse", action="store_true", help="keep verify and bench outputs already in docs/ops")
    a = ap.parse_args()
    update_performance()
    if a.performance_only:
        return
    for op in a.ops or list(specs()):
        print(f"wrote {op_page(op, a.level, a.bench_args, a.reuse)}")


if __name__ == "__main__":
    main()
