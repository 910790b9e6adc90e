"""Markdown rendering of report tables."""

from __future__ import annotations

from .html import CAPTIONS
from .table import Table


def _cell(v: str) -> str:
    return v.replace("|", "\\|").replace("\n", " ")


def table_md(t: Table) -> str:
    lines = [f"## {t.title}", ""]
    if t.rows:
        lines.append("| " + " | ".join(t.headers) + " |")
        lines.append("|" + "|".join("---" for _ in t.headers) + "|")
        lines += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in t.rows]
    else:
        lines.append("(none)")
    if t.note:
        lines += ["", t.note]
    return "\n".join(lines) + "\n"


def _named(t: Table) -> str:
    """A table written apart, as its place in the report names it."""
    return f"## {t.title}\n\n{len(t.rows)} rows, in {t.apart} beside this report. {t.note}\n"


def apart(title: str, tables: list[Table]) -> dict[str, str]:
    """The tables a report names rather than holds (``Table.apart``): {file name: its markdown}, each headed by the
    report's title, so the report stays a page to read and the long table is one link away."""
    return {t.apart: f"# {title}\n\n{table_md(t)}" for t in tables if t.apart}


def document(title: str, tables: list[Table], images: list[str]) -> str:
    """The same order as the html (verdict grid first, for a pull request's description); the folded tables
    last, the plots before them, each with its caption; a table written apart is named where it would be."""
    shown = [table_md(t) for t in tables if not t.fold]
    folded = [_named(t) if t.apart else table_md(t) for t in tables if t.fold]
    plots = (
        [
            "## Plots\n\n"
            + "\n\n".join(
                f"![{name}]({name})" + (f"\n\n{CAPTIONS[name]}" if name in CAPTIONS else "") for name in images
            )
            + "\n"
        ]
        if images
        else []
    )
    return "\n".join([f"# {title}\n", *shown, *plots, *folded])
