"""Progress of long commands: a rich bar on a terminal; elsewhere (CI logs, pipes) a plain line every few
seconds saying what is being done and how far, where a bar would print nothing until the end."""

from __future__ import annotations

import time

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

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
        of = f"{t['completed']:.0f} of {t['total']:.0f}" if t["total"] else f"{t['completed']:.0f}"
        state = "done" if final else "at"
        self.console.print(f"[{self.last - self.t0:6.0f} s] {state} {of}: {t['description']}", markup=False, highlight=False)


def progress(console: Console):
    """A progress display for ``console``: rich's bar on a terminal, periodic lines elsewhere."""
    if console.is_terminal:
        return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), console=console)
    return Lines(console)
