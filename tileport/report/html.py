"""A self-contained HTML report: the same tables, and the PNG plots embedded as data URIs."""

from __future__ import annotations

import base64
import html
from pathlib import Path

from .tables import Table

_STYLE = """body{font-family:system-ui,sans-serif;margin:2em;max-width:1400px}
table{border-collapse:collapse;margin:.5em 0 1.5em}td,th{border:1px solid #ccc;padding:.25em .6em;font-size:13px}
th{background:#f3f3f3}td.FAIL,td.NO,td.fail{color:#b00;font-weight:bold}td.pass,td.PASS,td.yes{color:#070}
img{max-width:100%;border:1px solid #eee;margin:.5em 0}p.note{color:#555;font-size:13px}"""


def table_html(t: Table) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in t.headers)
    body = "".join(
        "<tr>" + "".join(f'<td class="{html.escape(c.split(" ")[0])}">{html.escape(c)}</td>' for c in row) + "</tr>"
        for row in t.rows
    )
    note = f'<p class="note">{html.escape(t.note)}</p>' if t.note else ""
    table = f"<table><tr>{head}</tr>{body}</table>" if t.rows else "<p>(none)</p>"
    return f"<h2>{html.escape(t.title)}</h2>{table}{note}"


def document(title: str, tables: list[Table], images: list[Path]) -> str:
    imgs = "".join(
        f'<h3>{html.escape(p.name)}</h3><img alt="{html.escape(p.name)}" '
        f'src="data:image/png;base64,{base64.b64encode(p.read_bytes()).decode()}">'
        for p in images
    )
    return (
        f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
        f"<style>{_STYLE}</style></head><body><h1>{html.escape(title)}</h1>"
        + "".join(table_html(t) for t in tables)
        + (f"<h2>Plots</h2>{imgs}" if imgs else "")
        + "</body></html>"
    )
