"""The verify report reads at a glance: the verdict grid (backend x dtype x output) comes first in html and
markdown, its failed cells link to their rows, long tables are folded, plots carry captions, the case counts
say which is which, and in a 1400x900 and a 2200x900 browser window (headless Chromium) the grid, its FAIL
cells included, is on the first screen with nothing over it, for a failing --impl too; a long --impl name the plot's
legend shortens shows in full on hover over its entry."""

import dataclasses
import json
import re
import shutil
import subprocess

import pytest
from typer.testing import CliRunner

import tileport.verify.accuracy as accuracy
from tileport.cli import app
from tileport.ops.catalog import get as op_spec

runner = CliRunner()
BROWSERS = ("chromium", "chromium-browser", "google-chrome")
# the failing runs' options: both dtypes on the TileLang backend, a short retest, in this process
QUICK_TILELANG = (
    "--level quick --dtype fp16 --dtype fp32 --backend tilelang --retest-seeds 3 --jobs 1 --no-perf".split()
)


@pytest.fixture(scope="module")
def failing_report(tmp_path_factory):
    """A quick run of l2norm whose TileLang y is 1% off at fp16: failed cells beside passing ones."""
    out = tmp_path_factory.mktemp("report")
    real = op_spec("l2norm")

    def wrong_run(inputs, backend, backward):
        result = real.run(inputs, backend, backward)
        return (
            result | {"y": result["y"] * 1.01} if backend == "tilelang" and inputs["x"].dtype.itemsize == 2 else result
        )

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(accuracy, "spec_of", lambda suite: dataclasses.replace(real, run=wrong_run))
        result = runner.invoke(app, ["verify", "l2norm", *QUICK_TILELANG, "--out", str(out)])
    assert result.exit_code == 1, result.output[-2000:]
    return out


def test_the_verdict_grid_opens_the_markdown_and_names_each_cell(failing_report):
    md = (failing_report / "report.md").read_text()
    sections = re.findall(r"^## (.+)$", md, flags=re.M)
    assert sections[0].startswith("Verdict per backend, dtype and output") and sections[1] == "Failed checks"
    grid = md.split("## Failed checks")[0]
    assert re.search(r"\| tilelang \| float16 \| FAIL \(\d+ of \d+\) \| pass", grid)  # y failed at fp16, rstd passed
    assert re.search(r"\| tilelang \| float32 \| pass \(\d+ checks\) \| pass", grid)
    assert md.index("## Plots") < md.index("## Every check")  # the long tables last
    rows = re.search(r"## Every check \(ratios against the benchmark\)\n\n(\d+) rows, in checks.md beside", md)
    checks = (failing_report / "checks.md").read_text()  # the thousands of rows in a file of their own
    assert rows and checks.count("\n| tilelang |") == int(rows.group(1))
    assert "\n| " not in md.split("## Every check")[1].split("\n## ")[0]  # named in the report, not held


def test_html_cells_link_to_their_rows_and_long_tables_fold(failing_report):
    page = (failing_report / "report.html").read_text()
    href = re.search(r'<td class="FAIL"><a href="#([^"]+)">FAIL', page).group(1)
    assert f'id="{href}"' in page  # the grid's failed cell points at a row that exists
    assert "<details><summary>Every check" in page and "<figcaption>" in page
    assert page.index('id="verdict"') < page.index("<h2>Summary</h2>") < page.index("<details>")


WRONG_SHAPE = "def rms_norm(x, weight=None, eps=1e-6):\n    return x[..., :-1].clone()\n"

# after load: each FAIL cell of the grid, its box and whether it is the topmost element at its left, centre and right
PROBE = """<script>window.addEventListener('load',()=>{const W=innerWidth,H=innerHeight;
const cells=[...document.querySelectorAll('#verdict td.FAIL')].map(td=>{const r=td.getBoundingClientRect();
const y=(r.top+r.bottom)/2,hits=[r.left+2,(r.left+r.right)/2,r.right-2].map(x=>document.elementFromPoint(x,y));
return {text:td.textContent,box:[r.left,r.top,r.right,r.bottom],onscreen:r.left>=0&&r.top>=0&&r.right<=W&&r.bottom<=H,
topmost:hits.every(h=>!!h&&td.contains(h))};});
const g=document.getElementById('verdict').getBoundingClientRect();
document.body.setAttribute('data-probe',JSON.stringify({W,H,grid:[g.left,g.top,g.right,g.bottom],cells}));});</script>"""


@pytest.fixture(scope="module")
def impl_failing_report(tmp_path_factory):
    """A quick rms_norm run with an --impl (a long name) that returns the wrong shape: each of its cases fails, in a
    run column right of y, rstd, dx and dweight: a grid wider than half a 1400 px window."""
    where = tmp_path_factory.mktemp("impl")
    (where / "wrong_shape_rms_norm.py").write_text(WRONG_SHAPE)
    out = where / "report"
    args = [
        "verify",
        "rms_norm",
        *QUICK_TILELANG,
        "--impl",
        f"{where / 'wrong_shape_rms_norm.py'}:rms_norm",
        "--out",
        str(out),
    ]
    result = runner.invoke(app, args)
    assert result.exit_code == 1, result.output[-2000:]
    return out


def _probe(browser: str, page: str, tmp_path, width: int, height: int = 900, probe: str = PROBE) -> dict:
    """Open the page with the probe in a headless browser window of width x height; the probe's findings."""
    target = tmp_path / f"r{width}.html"
    target.write_text(page.replace("</body>", probe + "</body>"))
    done = subprocess.run(
        [
            browser,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--hide-scrollbars",
            f"--window-size={width},{height}",
            "--virtual-time-budget=3000",
            f"--user-data-dir={tmp_path / 'profile'}",
            "--dump-dom",
            target.as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    found = re.search(r"data-probe=\"([^\"]+)\"", done.stdout)
    assert found, done.stderr[-2000:]
    return json.loads(found.group(1).replace("&quot;", '"').replace("&amp;", "&"))


def test_the_case_counts_say_which_is_which(impl_failing_report):
    md = (impl_failing_report / "report.md").read_text()
    summary = re.search(r"^\| cases \| (\d+) \(", md, flags=re.M).group(1)
    standard = re.search(r"^\| cases in total \| \d+ \| (\d+) \|", md, flags=re.M).group(1)
    counts = md.split("## Case counts: which is which")[1].split("\n## ")[0]
    assert re.search(rf"^\| cases generated \| {summary} \| every case of the level", counts, flags=re.M)
    assert re.search(rf"^\| within the standard's scale \| {standard} \|", counts, flags=re.M)
    per = re.search(r"^\| cases run by tilelang \| float16 (\d+), float32 (\d+) \|", counts, flags=re.M)
    dual = re.findall(r"^\| tilelang \| (float16|float32) \| (\d+) \|", md.split("## Dual benchmark")[1], flags=re.M)
    assert per.groups() == tuple(n for _, n in dual)


def test_the_failing_impl_fails_in_its_run_column_and_every_cell_link_lands(impl_failing_report):
    page = (impl_failing_report / "report.html").read_text()
    grid = page[page.index('id="verdict"') : page.index("</table>")]
    assert re.search(r'<td class="FAIL"><a href="#fail-check-impl[^"]+-run">FAIL \((\d+) of \1\)', grid)
    hrefs = re.findall(r'href="#([^"]+)"', grid)
    assert hrefs and all(f'id="{h}"' in page for h in hrefs)


@pytest.mark.skipif(
    not any(shutil.which(b) for b in BROWSERS), reason="no Chromium here (Debian: apt-get install chromium)"
)
@pytest.mark.parametrize("width", [1400, 2200, 800])
def test_a_failing_impls_fail_cells_are_on_the_first_screen_and_uncovered(impl_failing_report, tmp_path, width):
    browser = next(shutil.which(b) for b in BROWSERS if shutil.which(b))
    seen = _probe(browser, (impl_failing_report / "report.html").read_text(), tmp_path, width)
    assert seen["W"] == width and len(seen["cells"]) == 2, seen  # the impl's run column, at fp16 and fp32
    hidden = [c for c in seen["cells"] if not (c["onscreen"] and c["topmost"])]
    assert not hidden, (seen["grid"], hidden)


@pytest.mark.skipif(
    not any(shutil.which(b) for b in BROWSERS), reason="no Chromium here (Debian: apt-get install chromium)"
)
def test_the_verdict_grid_is_on_the_first_screen_in_a_browser(failing_report, tmp_path):
    browser = next(shutil.which(b) for b in BROWSERS if shutil.which(b))
    page = (failing_report / "report.html").read_text()
    probe = (
        "<script>window.addEventListener('load',()=>{const r=document.getElementById('verdict').getBoundingClientRect();"
        "document.body.setAttribute('data-grid',[r.top,r.bottom,r.right].join(','));});</script>"
    )
    (tmp_path / "r.html").write_text(page.replace("</body>", probe + "</body>"))
    done = subprocess.run(
        [
            browser,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--window-size=1400,900",
            "--virtual-time-budget=3000",
            "--dump-dom",
            (tmp_path / "r.html").as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    found = re.search(r'data-grid="([\d.,-]+)"', done.stdout)
    assert found, done.stderr[-2000:]
    top, bottom, right = map(float, found.group(1).split(","))
    assert 0 <= top and bottom <= 900 and right <= 1400, (top, bottom, right)


TIP_PROBE = """<script>window.addEventListener('load',()=>{const img=document.querySelector('.plot img').getBoundingClientRect();
const tips=[...document.querySelectorAll('span.tip')].map(s=>{const r=s.getBoundingClientRect();
const hit=document.elementFromPoint((r.left+r.right)/2,(r.top+r.bottom)/2);
return {title:s.title,inside:r.left>=img.left&&r.right<=img.right&&r.top>=img.top&&r.bottom<=img.bottom,
hovered:hit===s,box:[r.left,r.top,r.right,r.bottom]};});
document.body.setAttribute('data-probe',JSON.stringify({W:innerWidth,img:[img.left,img.top,img.right,img.bottom],cells:tips}));});</script>"""


@pytest.mark.skipif(
    not any(shutil.which(b) for b in BROWSERS), reason="no Chromium here (Debian: apt-get install chromium)"
)
def test_a_shortened_legend_name_shows_in_full_on_hover(tmp_path):
    """At 1400 px the ratio plot beside the grid: its long --impl entry (shortened in the PNG) is covered by a box
    titled with the full name, inside the image and the topmost element there (the browser's tooltip)."""
    from test_report_parts import LONG, _long_report

    from tileport.report import html, plots, tables

    rep = _long_report()
    png = plots.ratio_distributions(rep, tmp_path / "ratios.png")
    page = html.document("tileport verify rms_norm (quick): FAIL", [tables.verdict_grid(rep)], [png])
    browser = next(shutil.which(b) for b in BROWSERS if shutil.which(b))
    seen = _probe(browser, page, tmp_path, 1400, probe=TIP_PROBE)
    (tip,) = seen["cells"]
    assert tip["title"] == LONG and tip["inside"] and tip["hovered"], seen
