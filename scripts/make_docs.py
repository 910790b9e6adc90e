"""Regenerate docs/ops/<op>.md for every operator (or those named) from a verify run, its L1 report, its notes
(docs/ops/notes/<op>.md) and a benchmark run; docs/results.md from the reports; and
the speed-bar section of docs/performance.md from benchmarks/results/<op>.md (the tables are never typed by hand).
Operators
and their usage blocks come from their specs (``tileport.ops.spec``).

    python scripts/make_docs.py [OP ...] [--level quick|L0] [--bench-args "..."] [--performance-only] [--reuse]
    [--no-bench]

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

import performance_page  # scripts/, beside this file
from typer.testing import CliRunner

from tileport.cli import app
from tileport.ops.catalog import specs

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


def update_performance() -> None:
    """docs/performance.md from the benchmark CSVs (``performance_page``)."""
    page = ROOT / "docs" / "performance.md"
    page.write_text(performance_page.render())
    print(f"updated {page}")


def _kept_label(page: Path, title: str, default: str) -> str:
    """The command an existing page's ``## title (`command`)`` heading names (a reused run is labelled as it
    was made), else ``default``."""
    m = re.search(rf"^## {re.escape(title)} \(`(.+?)`\)$", page.read_text() if page.exists() else "", flags=re.M)
    return m.group(1) if m else default


def machine(report: str) -> str:
    """The machine line of a report's Environment table."""
    m = re.search(r"^\| machine \| (.+?) \|$", report, flags=re.M)
    return m.group(1) if m else "(machine not recorded)"


def summary_item(report: str, item: str) -> str:
    m = re.search(rf"^\| {re.escape(item)} \| (.+?) \|$", report, flags=re.M)
    return m.group(1) if m else ""


def l1_part(op: str) -> list[str]:
    """The L1 run's verdict, per-backend table and failures, when docs/ops/<op>-verify-L1 holds one."""
    path = OPS / f"{op}-verify-L1" / "report.md"
    if not path.exists():
        return [f"## Precision at L1\n\nNo L1 run yet (`tileport verify {op} --level L1 --no-perf`).\n"]
    report = path.read_text()
    return [
        f"## Precision at L1 (`tileport verify {op} --level L1 --no-perf`)\n\nMachine: {machine(report)}.\n",
        *(section(report, t).replace("## ", "### ", 1) for t in ("Summary", "Dual benchmark", "Failed checks")),
        f"Full report: [{op}-verify-L1/report.md]({op}-verify-L1/report.md).\n",
    ]


def notes_part(op: str) -> list[str]:
    """The operator's precision story (docs/ops/notes/<op>.md, written by hand): what each run found and fixed."""
    path = OPS / "notes" / f"{op}.md"
    return [f"## How its precision came about\n\n{path.read_text().strip()}\n"] if path.exists() else []


def _run_totals(report: str) -> tuple[int, int, int]:
    """(checks, failed, retested) summed over the report's dual-benchmark table."""
    table = section(report, "Dual benchmark")
    head = next((ln for ln in table.splitlines() if ln.startswith("| backend |")), "")
    cols = [c.strip() for c in head.strip("|").split("|")]
    totals = [0, 0, 0]
    for ln in table.splitlines():
        cells = [c.strip() for c in ln.strip("|").split("|")]
        if ln.startswith("| ") and len(cells) == len(cols) and cells[0] not in ("backend",) and cells[2].isdigit():
            for i, name in enumerate(("checks", "failed", "retested")):
                totals[i] += int(cells[cols.index(name)])
    return tuple(totals)


def _report(folder: str) -> str | None:
    path = OPS / folder / "report.md"
    return path.read_text() if path.exists() else None


def _run_cell(op: str, folder: str) -> str:
    report = _report(folder)
    if report is None:
        return "not run"
    checks, failed, retested = _run_totals(report)
    verdict = ("**pass**" if failed == 0 else f"**{failed} of {checks} fail**") + _level_note(report, folder)
    return (
        f"[{verdict}]({'ops/' + folder}/report.md): {checks} checks, {retested} retested, "
        f"{summary_item(report, 'wall time')}; {machine(report).split(' (')[0]}"
    )


def update_results() -> None:
    """docs/results.md: each operator's L0 and L1 verdicts, read from the reports in docs/ops/."""
    rows = [
        f"| [{op}](ops/{op}.md) | {_run_cell(op, f'{op}-verify')} | {_run_cell(op, f'{op}-verify-L1')} |"
        for op in specs()
    ]
    page = ROOT / "docs" / "results.md"
    page.write_text(
        "# Verification results\n\n"
        "Each operator's latest L0 and L1 runs on the CPU (`tileport verify OP --level L0|L1 --no-perf`, 2 workers),\n"
        "read from the reports under `docs/ops/` (generated by `python scripts/make_docs.py`; the machine is each\n"
        "report's). What each run found and how it was fixed is on the operator's page.\n\n"
        "| operator | L0 | L1 |\n|---|---|---|\n" + "\n".join(rows) + "\n\n"
        "L2 (30000 cases, a third of them model activations, 1000 runs each) has not been run; its projected wall\n"
        "time on N machines is in [verify-throughput/throughput.md](verify-throughput/throughput.md).\n"
    )
    print(f"updated {page}")


STATUS_START, STATUS_END = "<!-- status:start -->", "<!-- status:end -->"


def _level_note(report: str, folder: str) -> str:
    """ " at quick" where a report in an L0 column (or an L1 one) was run at another level (its title says)."""
    m = re.match(r"# tileport verify \S+ \((\w+)\)", report)
    want = "L1" if folder.endswith("-L1") else "L0"
    return f" at {m.group(1)}" if m and m.group(1) != want else ""


def _verdict(folder: str) -> str:
    report = _report(folder)
    if report is None:
        return "not run"
    checks, failed, _ = _run_totals(report)
    verdict = f"pass ({checks} checks)" if failed == 0 else f"{failed} of {checks} fail"
    return verdict + _level_note(report, folder)


def update_readme() -> None:
    """The README's status table: each operator's L0 and L1 verdicts and two speed figures of its latest
    benchmark run (machine named), between the status markers."""
    rows, machines = [], set()
    for op in specs():
        fig = performance_page.headline(op)
        if fig:
            machines.add(fig["machine"].split(" (")[0])
        speed = (
            f"{fig['share']} / {fig['vs_compile']}"
            if fig
            else (
                "no fwd fp32 1-thread row: see its page" if performance_page.latest_run(op) else "no benchmark CSV yet"
            )
        )
        if fig and fig["shape"] != performance_page.HEADLINE_SHAPE:
            speed += f" (at {fig['shape']})"
        rows.append(
            f"| [{op}](docs/ops/{op}.md) | {_verdict(f'{op}-verify')} | {_verdict(f'{op}-verify-L1')} | {speed} |"
        )
    table = (
        (
            "\n| operator | L0 | L1 | fwd fp32 1024x512, 1 thread: kernel-only of copy / x torch.compile "
            "|\n|---|---|---|---|\n"
        )
        + "\n".join(rows)
        + f"\n\nMachine: {', '.join(sorted(machines)) or 'none yet'} (2 vCPUs); generated from the reports and "
        "benchmark CSVs "
        "by `scripts/make_docs.py` ([results](docs/results.md), [performance](docs/performance.md)).\n"
    )
    page = ROOT / "README.md"
    text = page.read_text()
    start, end = text.index(STATUS_START) + len(STATUS_START), text.index(STATUS_END)
    page.write_text(text[:start] + table + text[end:])
    print(f"updated {page}")


def _bench_figures(bench: Path, op: str) -> list[tuple[str, str]]:
    """(caption, file) of the run's latency and bandwidth-share plots: the forward's at the fewest threads
    measured, else the first mode's (a loss benchmarked fwd+bwd only, at 2 threads)."""
    pngs = sorted(p.name for p in bench.glob(f"{op}_*_t*.png"))
    runs = sorted(
        {(p.rsplit("_t", 1)[1], p[len(op) + 1 :].split("_", 1)[0]) for p in pngs},
        key=lambda r: (int(r[0].split(".")[0]), r[1] != "fwd"),
    )
    if not runs:
        return []
    threads, mode = runs[0][0].split(".")[0], runs[0][1]
    return [
        (f"{stem} {mode} t{threads}", f"{op}_{mode}_{stem}_t{threads}.png")
        for stem in ("latency", "bandwidth_share")
        if f"{op}_{mode}_{stem}_t{threads}.png" in pngs
    ]


def op_page(op: str, level: str, bench_args: str, reuse: bool = False, no_bench: bool = False) -> Path:
    spec = specs()[op]
    evidence, bench = OPS / f"{op}-verify", performance_page.RESULTS / op
    if reuse and not (bench / f"{op}.md").exists() and (OPS / f"{op}-bench" / f"{op}.md").exists():
        bench = OPS / f"{op}-bench"  # a run made before the runs moved to benchmarks/results/<op>
    page = OPS / f"{op}.md"
    if reuse:
        level = _kept_label(page, "Precision", f"tileport verify {op} --level {level}").rsplit(" ", 1)[-1]
        bench_args = _kept_label(page, "Performance", f"tileport bench {op} {bench_args}").split(" ", 3)[3]
    if not (reuse and (evidence / "report.md").exists()):
        shutil.rmtree(evidence, ignore_errors=True)
        run(["verify", op, "--level", level, "--out", str(evidence)])
    benched = not (no_bench and not (bench / f"{op}.md").exists())
    if benched and not (reuse and (bench / f"{op}.md").exists()):
        shutil.rmtree(bench, ignore_errors=True)
        run(["bench", op, *shlex.split(bench_args), "--out", str(bench)])
    report = (evidence / "report.md").read_text()
    titles = SECTIONS + tuple(re.findall(r"^## (Study: .+)$", report, flags=re.M))  # the op's own studies
    rel = Path("..", "..", *bench.relative_to(ROOT).parts).as_posix() if bench.parent != OPS else bench.name
    parts = [
        (
            f"# {op}\n\n{spec.summary}: `{spec.math}` (the contract is the docstring of "
            f"`tileport/ops/{op}/__init__.py`).\n"
        ),
        spec.usage + "\n",
        "Backends: `tilelang` (CPU C target here; CUDA and Ascend 950 kernels lowered with `tileport lower`), "
        "`triton` (GPU; CPU interpreter for small shapes), `torch` (the reference and the precision benchmark).\n",
        f"## Precision (`tileport verify {op} --level {level}`)\n",
        *(section(report, t).replace("## ", "### ", 1) for t in titles),
        f"Full report: [{op}-verify/report.md]({op}-verify/report.md) (`tileport verify` also writes a "
        "self-contained report.html, results.json and results.csv).\n",
        *l1_part(op),
        *notes_part(op),
        *(
            [
                f"## Performance (`tileport bench {op} {bench_args}`)\n",
                performance_page.section(op, "../..").split("\n", 2)[2],  # the speed bar by criterion, key figures
                *(f"![{name.replace('_', ' ')}]({rel}/{png})\n" for name, png in _bench_figures(bench, op)),
            ]
            if benched
            else [f"## Performance\n\nNot benchmarked yet (`tileport bench {op}`; its speed bar is in the spec).\n"]
        ),
        *([f"![ratios]({op}-verify/ratios.png)\n"] if (evidence / "ratios.png").exists() else []),
        "Regenerate: `python scripts/make_docs.py`.\n",
    ]
    page.write_text("\n".join(parts))
    for heavy in ("report.html", "results.json", "results.csv"):  # the docs keep report.md and the PNGs
        (evidence / heavy).unlink(missing_ok=True)
    return page  # the bench folder keeps its CSV: docs/performance.md is generated from it


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("ops", nargs="*", help="operators (default: every one)")
    ap.add_argument("--level", default="quick")
    ap.add_argument("--bench-args", default="--quick --threads 1 --threads 2 --mode fwd --mode fwdbwd")
    ap.add_argument(
        "--performance-only", action="store_true", help="only refresh docs/performance.md's speed-bar section"
    )
    ap.add_argument("--reuse", action="store_true", help="keep verify and bench outputs already in docs/ops")
    ap.add_argument(
        "--no-bench",
        action="store_true",
        help="where an operator has no benchmark run yet, say so instead of running one",
    )
    a = ap.parse_args()
    update_performance()
    if a.performance_only:
        update_readme()
        return
    for op in a.ops or list(specs()):
        print(f"wrote {op_page(op, a.level, a.bench_args, a.reuse, a.no_bench)}")
    update_results()
    update_readme()


if __name__ == "__main__":
    main()
