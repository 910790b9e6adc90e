"""The ``tileport`` command line."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import torch
import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

app = typer.Typer(add_completion=False, no_args_is_help=True, help="Port tile-level operators and prove each port.")
console = Console(width=None if Console().is_terminal else 160)

OPS = ("l2norm",)
DTYPE_NAMES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
DTYPE_LABELS = {v: k for k, v in DTYPE_NAMES.items()}


@app.command()
def backends() -> None:
    """List the backends, whether each can run here, and why not."""
    from . import available_backends

    table = Table(title="tileport backends")
    for col in ("backend", "available", "devices", "ops", "reason"):
        table.add_column(col)
    for b in available_backends():
        table.add_row(
            b.name, "[green]yes[/]" if b.available else "[red]no[/]", ", ".join(b.device_kinds), ", ".join(b.ops), b.reason
        )
    console.print(table)


def _dtypes(names: Optional[list[str]]) -> list[torch.dtype] | None:
    if not names:
        return None
    unknown = [n for n in names if n not in DTYPE_NAMES]
    if unknown:
        raise typer.BadParameter(f"unknown dtype {unknown[0]!r}; choose from {', '.join(DTYPE_NAMES)}", param_hint="--dtype")
    return [DTYPE_NAMES[n] for n in names]


def _progress():
    return Progress(
        TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), console=console
    )


def print_table(t) -> None:
    """A report table (tileport.report.tables.Table) on the console."""
    table = Table(title=t.title, title_justify="left")
    for h in t.headers:
        table.add_column(h)
    styles = {"pass": "[green]pass[/]", "PASS": "[green]PASS[/]", "FAIL": "[red]FAIL[/]", "fail": "[red]fail[/]", "NO": "[red]NO[/]"}
    for row in t.rows:
        table.add_row(*(styles.get(c, escape(c)) for c in row))
    console.print(table)
    if t.note:
        console.print(t.note)


@app.command()
def verify(
    op: str = typer.Argument(..., help="operator to verify (l2norm)"),
    level: str = typer.Option("L0", help="quick (CI), or L0 / L1 / L2: the standard's case counts and ratio limits"),
    backend: Optional[list[str]] = typer.Option(None, help="backend to verify (repeatable; default: every available one)"),
    dtype: Optional[list[str]] = typer.Option(None, help="fp32, fp16, bf16 (repeatable; default: the suite's)"),
    out: Path = typer.Option(Path("tileport-report"), help="folder for report.md, report.html, results.json/csv, PNGs"),
    seed: int = typer.Option(0, help="seed of the generated cases"),
    retest_seeds: Optional[int] = typer.Option(None, help="new seeds for a failed check (default: 1000, quick: 30)"),
    perf: bool = typer.Option(True, help="also run the performance and memory tasks"),
) -> None:
    """Run OP's case suite on every available backend: accuracy (dual benchmark), performance, memory; write
    a report. Exit code 1 when a check fails."""
    from .cases import load_suite
    from .report import tables, write_report
    from .verify import verify as run_verify

    if op not in OPS:
        raise typer.BadParameter(f"unknown operator {op!r}; available: {', '.join(OPS)}", param_hint="OP")
    levels = load_suite(op).levels
    if level not in levels:
        raise typer.BadParameter(f"unknown level {level!r}; choose from {', '.join(levels)}", param_hint="--level")
    with _progress() as bar:
        task = bar.add_task("verify", total=None)

        def step(what: str, total: int) -> None:
            bar.update(task, description=what, total=total)
            bar.advance(task)

        try:
            rep = run_verify(op, level, backend, _dtypes(dtype), seed, retest_seeds, perf, progress=step)
        except ValueError as exc:
            raise typer.BadParameter(str(exc)) from exc
    for t in tables.all_tables(rep):
        if t.rows:
            print_table(t)
    paths = write_report(rep, out)
    console.print(f"report: {paths['md']} and {paths['html']} (results.json, results.csv, plots) in {out}")
    if not rep.passed:
        console.print(f"[red]{len(rep.failures)} of {len(rep.results)} checks failed at {level}[/]")
        raise typer.Exit(1)
    console.print(f"[green]all {len(rep.results)} checks passed at {level}[/] ({rep.limits} ratio limits)")


if __name__ == "__main__":
    app()
