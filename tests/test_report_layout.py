"""The verify report reads at a glance: the verdict grid (backend x dtype x output) comes first in html and
markdown, its failed cells link to their rows, long tables are folded, plots carry captions, and in a 1400x900
browser window (headless Chromium) the grid is on the first screen."""

import dataclasses
import re
import shutil
import subprocess

import pytest
from typer.testing import CliRunner

import tileport.verify.accuracy as accuracy
from tileport.cli import app
from tileport.ops.spec import get as op_spec

runner = CliRunner()
BROWSERS = ("chromium", "chromium-browser", "google-chrome")


@pytest.fixture(scope="module")
def failing_report(tmp_path_factory):
    """A quick run of l2norm whose TileLang y is 1% off at fp16: failed cells beside passing ones."""
    out = tmp_path_factory.mktemp("report")
    real = op_spec("l2norm")

    def wrong_run(inputs, backend, backward):
        result = real.run(inputs, backend, backward)
        return result | {"y": result["y"] * 1.01} if backend == "tilelang" and inputs["x"].dtype.itemsize == 2 else result

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(accuracy, "spec_of", lambda suite: dataclasses.replace(real, run=wrong_run))
        args = ["verify", "l2norm", "--level", "quick", "--dtype", "fp16", "--dtype", "fp32", "--backend", "tilelang", "--retest-seeds", "3",
                "--jobs", "1", "--no-perf", "--out", str(out)]  # fmt: skip
        result = runner.invoke(app, args)
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


def test_html_cells_link_to_their_rows_and_long_tables_fold(failing_report):
    page = (failing_report / "report.html").read_text()
    href = re.search(r'<td class="FAIL"><a href="#([^"]+)">FAIL', page).group(1)
    assert f'id="{href}"' in page  # the grid's failed cell points at a row that exists
    assert "<details><summary>Every check" in page and "<figcaption>" in page
    assert page.index('id="verdict"') < page.index("<h2>Summary</h2>") < page.index("<details>")


@pytest.mark.skipif(not any(shutil.which(b) for b in BROWSERS), reason="no Chromium here (Debian: apt-get install chromium)")
def test_the_verdict_grid_is_on_the_first_screen_in_a_browser(failing_report, tmp_path):
    browser = next(shutil.which(b) for b in BROWSERS if shutil.which(b))
    page = (failing_report / "report.html").read_text()
    probe = ("<script>window.addEventListener('load',()=>{const r=document.getElementById('verdict').getBoundingClientRect();"
             "document.body.setAttribute('data-grid',[r.top,r.bottom,r.right].join(','));});</script>")  # fmt: skip
    (tmp_path / "r.html").write_text(page.replace("</body>", probe + "</body>"))
    done = subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu", "--window-size=1400,900", "--virtual-time-budget=3000",
                           "--dump-dom", (tmp_path / "r.html").as_uri()], capture_output=True, text=True, timeout=120)  # fmt: skip
    found = re.search(r'data-grid="([\d.,-]+)"', done.stdout)
    assert found, done.stderr[-2000:]
    top, bottom, right = map(float, found.group(1).split(","))
    assert 0 <= top and bottom <= 900 and right <= 1400, (top, bottom, right)
