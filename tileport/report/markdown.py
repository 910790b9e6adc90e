"""Markdown rendering of report tables."""

from __future__ import annotations

from .tables import Table


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
    parts = [f"# {title}\n"] + [table_md(t) for t in tables]
    if images:
        parts.append("## Plots\n\n" + "\n".join(f"![{name}]({name})" for name in images) + "\n")
    return "\n".join(parts)
