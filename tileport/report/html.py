"""A self-contained HTML report: the verdict grid and the ratio plot on the first screen, the failures and
retests next, the long tables folded (``<details>``) at the end, and the PNG plots embedded with captions."""

from __future__ import annotations

import base64
import html
from pathlib import Path

from .tables import Table

_STYLE = """body{font-family:system-ui,sans-serif;margin:1.2em 2em;max-width:1400px}
h1{font-size:22px;margin:.2em 0 .6em}h2{font-size:17px;margin:1em 0 .3em}
table{border-collapse:collapse;margin:.3em 0 1em}td,th{border:1px solid #ccc;padding:.2em .5em;font-size:13px}
th{background:#f3f3f3}td.FAIL,td.NO,td.fail{color:#b00;font-weight:bold}td.pass,td.PASS,td.yes{color:#070}
#verdict td.pass{background:#e6f4e6}#verdict td.FAIL{background:#fbe3e3}#verdict td.awaiting{background:#fff3cd}
#verdict td.not{background:#eee;color:#666}td a{color:inherit}
.first{display:flex;gap:1.5em;align-items:flex-start;flex-wrap:wrap}.first>div{flex:1 1 560px;min-width:0}
figure{margin:.3em 0 1em}figure img{max-width:100%;border:1px solid #eee}figcaption{color:#444;font-size:13px}
p.note{color:#555;font-size:13px}details{margin:.5em 0}summary{cursor:pointer;font-weight:bold;font-size:15px}
span.badge{padding:.1em .5em;border-radius:4px;color:#fff}span.PASS{background:#2a7}span.FAIL{background:#c33}"""

CAPTIONS = {
    "ratios.png": "MARE ratio of every check (under test over benchmark) per dtype, with the level's limit (red): checks "
                  "right of the line failed their first seed and were retested.",
    "latency_fwd.png": "Forward latency against elements per provider (log-log): lower is faster; tileport's backends "
                       "below torch eager and torch.compile are speed-ups.",
    "latency_fwdbwd.png": "Forward and backward latency against elements per provider: lower is faster.",
}


def _cell(c: str, href: str) -> str:
    text = html.escape(c)
    return f'<td class="{html.escape(c.split(" ")[0])}">' + (f'<a href="{html.escape(href)}">{text}</a>' if href else text) + "</td>"


def table_html(t: Table) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in t.headers)
    body = "".join(
        (f'<tr id="{html.escape(t.row_ids[i])}">' if i < len(t.row_ids) and t.row_ids[i] else "<tr>")
        + "".join(_cell(c, t.links[i][j] if i < len(t.links) else "") for j, c in enumerate(row))
        + "</tr>"
        for i, row in enumerate(t.rows)
    )
    note = f'<p class="note">{html.escape(t.note)}</p>' if t.note else ""
    ident = f' id="{html.escape(t.anchor)}"' if t.anchor else ""
    table = f"<table{ident}><tr>{head}</tr>{body}</table>" if t.rows else "<p>(none)</p>"
    if t.fold:
        return f"<details><summary>{html.escape(t.title)} ({len(t.rows)} rows)</summary>{table}{note}</details>"
    return f"<h2>{html.escape(t.title)}</h2>{table}{note}"


def figure(p: Path, width: str = "") -> str:
    style = f' style="max-width:{width}"' if width else ""
    caption = CAPTIONS.get(p.name, "")
    return (f'<figure><img alt="{html.escape(p.name)}"{style} src="data:image/png;base64,{base64.b64encode(p.read_bytes()).decode()}">'
            + (f"<figcaption>{html.escape(caption)}</figcaption>" if caption else "") + "</figure>")  # fmt: skip


def document(title: str, tables: list[Table], images: list[Path]) -> str:
    verdict = title.rsplit(": ", 1)[-1] if title.endswith(("PASS", "FAIL")) else ""
    heading = html.escape(title.rsplit(": ", 1)[0] if verdict else title) + (f' <span class="badge {verdict}">{verdict}</span>' if verdict else "")
    first, rest = (tables[0], tables[1:]) if tables and tables[0].anchor == "verdict" else (None, tables)
    ratios = next((p for p in images if p.name == "ratios.png"), None)
    top = ""
    if first is not None:  # the first screen: the verdict grid beside the ratio distributions
        top = f'<div class="first"><div>{table_html(first)}</div>' + (f"<div>{figure(ratios)}</div>" if ratios else "") + "</div>"
    shown = [t for t in rest if not t.fold]
    folded = [t for t in rest if t.fold]
    others = "".join(figure(p, "900px") for p in images if p is not ratios or first is None)
    return (
        f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
        f"<style>{_STYLE}</style></head><body><h1>{heading}</h1>" + top
        + "".join(table_html(t) for t in shown)
        + (f"<h2>Plots</h2>{others}" if others else "")
        + "".join(table_html(t) for t in folded)
        + "</body></html>"
    )
