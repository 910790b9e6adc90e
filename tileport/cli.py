"""The ``tileport`` command line."""

from __future__ import annotations

from typing import Optional

import torch
import typer
from rich.console import Console
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


@app.command()
def verify(
    op: str = typer.Argument(..., help="operator to verify (l2norm)"),
    backend: Optional[str] = typer.Option(None, help="backend to verify (default: dispatch's choice)"),
    dtype: Optional[list[str]] = typer.Option(None, help="fp32, fp16, bf16 (repeatable; default: all)"),
    level: str = typer.Option("L0", help="precision level of the dual-benchmark standard: L0, L1, L2"),
    seed: int = typer.Option(0, help="seed of the generated inputs"),
) -> None:
    """Check OP against a float64 golden and the torch reference; print errors and timings."""
    from .precision import LEVELS
    from .verify import DTYPES, SHAPES, verify_l2norm

    if op not in OPS:
        raise typer.BadParameter(f"unknown operator {op!r}; available: {', '.join(OPS)}", param_hint="OP")
    if level not in LEVELS:
        raise typer.BadParameter(f"unknown level {level!r}; choose from {', '.join(LEVELS)}", param_hint="--level")
    dtypes = _dtypes(dtype)
    total = len(dtypes or DTYPES) * len(SHAPES)
    with Progress(
        TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), console=console
    ) as bar:
        task = bar.add_task("verify", total=total)

        def step(what: str) -> None:
            bar.update(task, description=what)
            bar.advance(task)

        rows = verify_l2norm(backend=backend, dtypes=dtypes, level=level, seed=seed, progress=step)
    table = Table(title=f"{op}: dual-benchmark {level}, float64 golden, torch composite as benchmark (us: median)")
    for col in ("shape", "dtype", "out", "backend", "MARE", "MARE ratio", "MERE ratio", "RMSE ratio", "us", "torch us", "result"):
        table.add_column(col, justify="right" if col not in ("out", "backend", "result") else "left")
    for r in rows:
        table.add_row(
            "x".join(map(str, r.shape)), DTYPE_LABELS[r.dtype], r.output, r.backend,
            f"{r.mare:.2e}", f"{r.mare_ratio:.2f}", f"{r.mere_ratio:.2f}", f"{r.rmse_ratio:.2f}",
            f"{r.us_backend:.1f}", f"{r.us_reference:.1f}",
            ("[green]pass[/]" if not r.note else "[yellow]pass (retest)[/]") if r.passed else "[red]FAIL[/]",
        )  # fmt: skip
    console.print(table)
    failed = [r for r in rows if not r.passed]
    for r in rows:
        if r.note:
            word = "retested" if r.passed else "[red]FAIL[/]"
            console.print(f"{word} {'x'.join(map(str, r.shape))} {DTYPE_LABELS[r.dtype]} {r.output}: {r.note}")
    if failed:
        console.print(f"[red]{len(failed)} of {len(rows)} checks failed[/]")
        raise typer.Exit(1)
    console.print(f"[green]all {len(rows)} checks passed at {level}[/]")


if __name__ == "__main__":
    app()
