"""Markdown rendering of report tables."""

from __future__ import annotations

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


def document(title: str, tables: list[Table], images: list[str]) -> str:
    """The same order as the html (verdict grid first, for a pull request's description); the folded tables
    last, the plots before them, each with its caption."""
    from .html import CAPTIONS

    shown = [table_md(t) for t in tables if not t.fold]
    folded = [table_md(t) for t in tables if t.fold]
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
