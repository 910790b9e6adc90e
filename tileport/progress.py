"""Progress of long commands: a rich bar on a terminal; elsewhere (CI logs, pipes) a plain line every few
seconds saying what is being done and how far, where a bar would print nothing until the end."""

from __future__ import annotations

import time

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

EVERY_S = 5.0


class Lines:
    """The subset of rich's Progress the commands use, printing a line at most every ``every`` seconds."""

    def __init__(self, console: Console, every: float = EVERY_S):
        self.console, self.every = console, every
        self.tasks: dict[int, dict] = {}
        self.t0 = self.last = time.monotonic()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        for task in self.tasks.values():
            self._line(task, final=True)
        return False

    def add_task(self, description: str, total: float | None = None) -> int:
        key = len(self.tasks)
        self.tasks[key] = {"description": description, "total": total, "completed": 0}
        return key

    def update(self, task: int, description: str | None = None, total: float | None = None, advance: float = 0) -> None:
        t = self.tasks[task]
        if description is not None:
            t["description"] = description
        if total is not None:
            t["total"] = total
        t["completed"] += advance
        if time.monotonic() - self.last >= self.every:
            self._line(t)

    def advance(self, task: int, advance: float = 1) -> None:
        self.update(task, advance=advance)

    def _line(self, t: dict, final: bool = False) -> None:
        self.last = time.monotonic()
        elapsed = self.last - self.t0
        of = f"{t['completed']:.0f} of {t['total']:.0f}" if t["total"] else f"{t['completed']:.0f}"
        state = "done" if final else "at"
        eta = "" if final else eta_text(elapsed, t["completed"], t["total"])
        line = f"[{elapsed:6.0f} s] {state} {of}{eta}: {t['description']}"
        self.console.print(line, markup=False, highlight=False, soft_wrap=True)  # one line of a log, however long


def eta_text(elapsed: float, completed: float, total: float | None) -> str:
    """``, eta ~40 s`` from the rate so far (steps differ in cost, hence the ~); empty before the first step."""
    if not total or completed <= 0 or completed >= total:
        return ""
    left = elapsed / completed * (total - completed)
    return f", eta ~{left:.0f} s" if left < 90 else f", eta ~{left / 60:.0f} min"


def progress(console: Console):
    """A progress display for ``console``: rich's bar on a terminal (with the time left at the rate so far),
    periodic lines elsewhere. Descriptions are plain text: a bracket in one is printed, not read as markup."""
    if console.is_terminal:
        columns = (
            TextColumn("{task.description}", markup=False),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TimeRemainingColumn(),
        )
        return Progress(*columns, console=console)
    return Lines(console)
