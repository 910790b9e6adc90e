"""A self-contained HTML report: the verdict grid on the first screen, whatever the outcome (the ratio plot beside
it where both fit, else below it, never over it), the failures and retests next, the long tables folded (``<details>``) at the end, and the PNG plots embedded with captions."""

from __future__ import annotations

import base64
import html
import json
import struct
from pathlib import Path

from .table import Table

_STYLE = """body{font-family:system-ui,sans-serif;margin:1.2em 2em;max-width:2000px}
h1{font-size:22px;margin:.2em 0 .6em}h2{font-size:17px;margin:1em 0 .3em}
table{border-collapse:collapse;margin:.3em 0 1em}td,th{border:1px solid #ccc;padding:.2em .5em;font-size:13px}
th{background:#f3f3f3}td.FAIL,td.NO,td.fail{color:#b00;font-weight:bold}td.pass,td.PASS,td.yes{color:#070}
#verdict td.pass{background:#e6f4e6}#verdict td.FAIL{background:#fbe3e3}#verdict td.awaiting{background:#fff3cd}
#verdict td.none{background:#eee;color:#666}#verdict td:first-child{overflow-wrap:anywhere}td a{color:inherit}
.first{display:flex;flex-wrap:wrap;gap:1.5em;align-items:flex-start}
.first>.grid{flex:0 1 auto;max-width:100%;overflow-x:auto}.grid>p.note{width:0;min-width:100%}
.first>.plot{flex:1 1 460px;min-width:460px;max-width:760px}
figure{margin:.3em 0 1em}figure img{display:block;max-width:100%;border:1px solid #eee}figcaption{color:#444;font-size:13px}
figure .img{position:relative;display:inline-block;max-width:100%}span.tip{position:absolute;cursor:help}
p.note{color:#555;font-size:13px;max-width:1100px}details{margin:.5em 0}summary{cursor:pointer;font-weight:bold;font-size:15px}
span.badge{padding:.1em .5em;border-radius:4px;color:#fff}span.PASS{background:#2a7}span.FAIL{background:#c33}"""

# a link into a folded table opens it (not every browser opens <details> for a fragment)
_OPEN_TARGET = """<script>function openTarget(){const t=location.hash&&document.getElementById(decodeURIComponent(location.hash.slice(1)));
for(let e=t;e;e=e.parentElement){if(e.tagName==='DETAILS')e.open=true;}if(t)t.scrollIntoView();}
window.addEventListener('hashchange',openTarget);window.addEventListener('load',openTarget);</script>"""

CAPTIONS = {
    "ratios.png": "MARE ratio of every check (under test over benchmark) per dtype and provider, with the level's "
    "limit (red, "
    "dashed): checks right of the line failed their first seed (the grid says whether their retest passed). The "
    "hatched slot past the axis, 'failed', counts the failed checks that have no ratio over the limit (did not run, "
    "nothing to compare, or failed by another rule); passing checks with nothing to compare are counted above a "
    "panel, not drawn.",
    "latency_fwd.png": "Forward latency against elements per provider (log-log): lower is faster; tileport's backends "
    "below torch eager and torch.compile are speed-ups.",
    "latency_fwdbwd.png": "Forward and backward latency against elements per provider: lower is faster. A provider has "
    "the same colour in every plot of the report.",
}


LEGEND_TIPS = "tileport-legend"  # a plot's PNG text chunk: its shortened legend names, in full, and their boxes

_VERDICTS = {"pass", "PASS", "FAIL", "fail", "yes", "NO", "awaiting"}


def _cell(c: str, href: str, plain: bool = False) -> str:
    """A cell whose first word is a verdict carries it as its class (its colour), unless the table is plain."""
    text = html.escape(c)
    word = c.split(" ")[0]
    kind = "none" if c == "no checks" else word if word in _VERDICTS else ""
    kind = "" if plain else kind
    open_ = f'<td class="{kind}">' if kind else "<td>"
    return open_ + (f'<a href="{html.escape(href)}">{text}</a>' if href else text) + "</td>"


def table_html(t: Table) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in t.headers)
    body = "".join(
        (f'<tr id="{html.escape(t.row_ids[i])}">' if i < len(t.row_ids) and t.row_ids[i] else "<tr>")
        + "".join(_cell(c, t.links[i][j] if i < len(t.links) else "", t.plain) for j, c in enumerate(row))
        + "</tr>"
        for i, row in enumerate(t.rows)
    )
    note = f'<p class="note">{html.escape(t.note)}</p>' if t.note else ""
    ident = f' id="{html.escape(t.anchor)}"' if t.anchor else ""
    table = f"<table{ident}><tr>{head}</tr>{body}</table>" if t.rows else "<p>(none)</p>"
    if t.fold:
        return f"<details><summary>{html.escape(t.title)} ({len(t.rows)} rows)</summary>{table}{note}</details>"
    return f"<h2>{html.escape(t.title)}</h2>{table}{note}"


def _png_text(data: bytes, key: str) -> str | None:
    """The text of a PNG's tEXt chunk named ``key`` (how matplotlib writes a figure's metadata), or None."""
    pos = 8  # past the signature; then chunks of length, type, data, CRC
    while pos + 8 <= len(data):
        size, kind = struct.unpack(">I4s", data[pos : pos + 8])
        if kind == b"tEXt":
            name, _, text = data[pos + 8 : pos + 8 + size].partition(b"\0")
            if name == key.encode("latin-1"):
                return text.decode("latin-1")
        if kind == b"IEND":
            return None
        pos += 12 + size
    return None


def _tips(data: bytes) -> str:
    """A hover box over each legend entry the plot shortened, its title the provider's full name."""
    out = []
    for tip in json.loads(_png_text(data, LEGEND_TIPS) or "[]"):
        x0, y0, x1, y1 = (100 * v for v in tip["box"])
        place = f"left:{x0:.2f}%;top:{y0:.2f}%;width:{x1 - x0:.2f}%;height:{y1 - y0:.2f}%"
        out.append(f'<span class="tip" title="{html.escape(tip["name"])}" style="{place}"></span>')
    return "".join(out)


def figure(p: Path, width: str = "") -> str:
    """The PNG embedded with its caption; a legend name the plot shortened shows its full name on hover."""
    style = f' style="max-width:{width}"' if width else ""
    data = p.read_bytes()
    tips = _tips(data)
    caption = CAPTIONS.get(p.name, "") + (" A shortened name (…) shows the full one on hover." if tips else "")
    return (
        (
            f'<figure><div class="img"{style}><img alt="{html.escape(p.name)}" '
            f'src="data:image/png;base64,{base64.b64encode(data).decode()}">{tips}</div>'
        )
        + (f"<figcaption>{html.escape(caption)}</figcaption>" if caption else "")
        + "</figure>"
    )


def document(title: str, tables: list[Table], images: list[Path]) -> str:
    verdict = title.rsplit(": ", 1)[-1] if title.endswith(("PASS", "FAIL")) else ""
    heading = html.escape(title.rsplit(": ", 1)[0] if verdict else title) + (
        f' <span class="badge {verdict}">{verdict}</span>' if verdict else ""
    )
    first, rest = (tables[0], tables[1:]) if tables and tables[0].anchor == "verdict" else (None, tables)
    ratios = next((p for p in images if p.name == "ratios.png"), None)
    top = ""
    if (
        first is not None
    ):  # the first screen: the verdict grid, never shrunk below its width; the plot beside it only where it fits
        top = (
            f'<div class="first"><div class="grid">{table_html(first)}</div>'
            + (f'<div class="plot">{figure(ratios)}</div>' if ratios else "")
            + "</div>"
        )
    shown = [t for t in rest if not t.fold]
    folded = [t for t in rest if t.fold]
    others = "".join(figure(p, "900px") for p in images if p is not ratios or first is None)
    return (
        f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
        f"<style>{_STYLE}</style></head><body><h1>{heading}</h1>"
        + top
        + "".join(table_html(t) for t in shown)
        + (f"<h2>Plots</h2>{others}" if others else "")
        + "".join(table_html(t) for t in folded)
        + _OPEN_TARGET
        + "</body></html>"
    )
