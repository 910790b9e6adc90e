"""One report table: what the markdown, html and console writers render (built by ``tables.py`` for a verify
report, ``benchrows.py`` for benchmark rows)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Table:
    title: str
    headers: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]
    note: str = ""
    fold: bool = False  # a long table: folded (<details>) in html, after the rest
    anchor: str = ""  # the table's html id
    row_ids: tuple[str, ...] = ()  # an html id per row (where other tables link to it)
    links: tuple[tuple[str, ...], ...] = ()  # per row and cell: an href, or "" for none
    plain: bool = False  # its pass/fail words are not this run's verdicts: rendered without verdict colours
    apart: str = ""  # markdown: a file of its own beside the report, named in its place (thousands of rows)


def number(v: float) -> str:
    """A figure in a table cell: three significant digits."""
    return f"{v:.3g}"
