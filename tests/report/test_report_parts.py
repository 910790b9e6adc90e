"""The report's parts on made-up results, no verify run: every verdict-grid link lands on a row in the
document however many checks there are, the ratio plot draws no failed check as a good ratio, a provider
keeps its colour from plot to plot, and a long provider name is shortened to fit the legend, in full on hover."""

import re
from types import SimpleNamespace

import matplotlib.pyplot as plt
import pytest

from tileport.precision import CaseResult
from tileport.precision.metrics import Metrics, Verdict
from tileport.report import html, plots, tables


def _check(
    case: int, dtype: str, output: str, mare: float = 1.0, failures=(), elements: int = 64, backend: str = "tilelang"
):
    m = Metrics(1e-3 * mare, 1e-3, 1e-3, 0, 0, elements)
    verdict = Verdict(
        "L0",
        m,
        Metrics(1e-3, 1e-3, 1e-3, 0, 0, elements),
        {"mare": mare, "mere": 1.0, "rmse": 1.0, "small": 0.0},
        list(failures),
    )
    return CaseResult("op", backend, case, dtype, (8, 8), "normal", {}, output, verdict)


def _report(results) -> SimpleNamespace:
    failed = [r for r in results if not r.passed]
    return SimpleNamespace(results=results, failures=failed, limits="L0", passed=not failed)


@pytest.fixture(scope="module")
def big_report():
    """12000 checks in case order, float16 first: float32's y fails late, past any 3000-row cut of that order."""
    results = []
    for d, dtype in enumerate(("float16", "bfloat16", "float32")):
        for case in range(d * 2000, (d + 1) * 2000):
            results.append(
                _check(
                    case,
                    dtype,
                    "y",
                    50.0 if dtype == "float32" and case % 7 == 0 else 1.0,
                    ["MARE ratio 50 > 10"] if dtype == "float32" and case % 7 == 0 else (),
                )
            )
            results.append(_check(case, dtype, "dx"))
    return _report(results)


def test_every_verdict_link_lands_on_a_row_of_the_document(big_report):
    tbls = [tables.verdict_grid(big_report), tables.failures(big_report), tables.every_check(big_report)]
    page = html.document("t: FAIL", tbls, [])
    grid = page[page.index('id="verdict"') : page.index("</table>")]
    hrefs = re.findall(r'href="#([^"]+)"', grid)
    assert len(hrefs) == 6  # 3 dtypes x 2 outputs, each cell with its link
    missing = [h for h in hrefs if f'id="{h}"' not in page]
    assert not missing, missing
    fail_href = re.search(r'<td class="FAIL"><a href="#([^"]+)">FAIL \((\d+) of 2000\)', grid)
    assert fail_href.group(1).startswith("fail-") and int(fail_href.group(2)) == 286


def test_the_folded_table_keeps_every_group_and_its_failures_first_within_the_cap(big_report):
    t = tables.every_check(big_report, limit=3000)
    assert len(t.rows) == 3000 and "every check is in results.csv" in t.note
    groups = {(r[2], r[6]) for r in t.rows}
    assert groups == {(d, o) for d in ("float16", "bfloat16", "float32") for o in ("y", "dx")}
    f32y = [r for r in t.rows if r[2] == "float32" and r[6] == "y"]
    assert len(f32y) == 500 and all(r[-1] == "FAIL" for r in f32y[:286]) and f32y[286][-1] == "pass"


def test_a_small_run_shows_every_check():
    rep = _report([_check(c, "float32", o) for c in range(10) for o in ("y", "dx")])
    t = tables.every_check(rep)
    assert len(t.rows) == 20 and "share" not in t.note


def test_the_ratio_plot_draws_only_checks_with_a_ratio_that_says_how_they_went():
    limit = 10.0
    not_run = _check(0, "float32", "run", mare=0.0, failures=["did not run: raised ValueError"], elements=0)
    by_ratio = _check(1, "float32", "y", mare=40.0, failures=["MARE ratio 40 > 10"])
    by_other_rule = _check(2, "float32", "y", mare=0.5, failures=["small-value errors 9 > 2 x benchmark's 0"])
    good = _check(3, "float32", "y", mare=0.5)
    empty = _check(4, "float32", "y", mare=1.0, elements=0)
    drawn = [plots._drawn_ratio(r, limit) for r in (not_run, by_ratio, by_other_rule, good, empty)]
    assert drawn == [None, 40.0, None, 0.5, None]  # a failure never reads as a ratio under the limit


def _figures(monkeypatch) -> list:
    kept = []
    monkeypatch.setattr(plots.plt, "close", kept.append)
    return kept


def test_the_failed_slot_counts_failed_checks_past_the_axis(tmp_path, monkeypatch):
    kept = _figures(monkeypatch)
    failing = [
        _check(c, "float32", "run", mare=0.0, failures=["did not run"], elements=0, backend="impl:x") for c in range(7)
    ]
    rep = SimpleNamespace(**vars(_report([_check(c, "float32", "y") for c in range(5)] + failing)), op="op")
    plots.ratio_distributions(rep, tmp_path / "ratios.png")
    (ax,) = kept[0].axes
    bars = [p for p in ax.patches if p.get_hatch() == "//"]
    assert [b.get_height() for b in bars] == [7] and bars[0].get_x() > 1e4  # beyond the axis' last decade, not at 1e-2
    assert "impl:x" in [t.get_text() for t in kept[0].legends[0].get_texts()]
    plt.close("all")


def test_a_provider_keeps_its_colour_between_the_fwd_and_fwdbwd_plots(tmp_path, monkeypatch):
    kept = _figures(monkeypatch)

    def row(mode, provider, us):
        return {
            "statistic": "min_us",
            "mode": mode,
            "dtype": "float32",
            "shape": "4x8",
            "threads": 1,
            "provider": provider,
            "value": us,
        }

    rows = [
        row("fwd", "torch eager", 3.0),
        row("fwd", "tilelang", 1.0),
        row("fwdbwd", "tilelang", 2.0),
        row("fwdbwd", "triton", 5.0),
    ]
    plots.latency(rows, tmp_path / "f.png", "op", "fwd")
    plots.latency(rows, tmp_path / "b.png", "op", "fwdbwd")
    colour = [{ln.get_label(): ln.get_color() for ln in fig.axes[0].lines} for fig in kept]
    assert colour[0]["tilelang"] == colour[1]["tilelang"] and len({*colour[0].values(), *colour[1].values()}) == 3
    plt.close("all")


LONG = "impl:/tmp/pytest-of-engineer/pytest-1234/test_a_failing_impls_fail_cel0/impl0/wrong_shape_rms_norm.py:rms_norm"


def _long_report():
    """tilelang and triton passing, an --impl of a long path failing every case (not run)."""
    rs = [
        _check(c, d, "y", backend=b) for c in range(5) for d in ("float16", "float32") for b in ("tilelang", "triton")
    ]
    rs += [
        _check(c, d, "run", mare=0.0, failures=["did not run"], elements=0, backend=LONG)
        for c in range(7)
        for d in ("float16", "float32")
    ]
    return SimpleNamespace(**vars(_report(rs)), op="rms_norm")


def _inside(fig, artist) -> bool:
    box = artist.get_window_extent(fig.canvas.get_renderer())
    return 0 <= box.x0 and box.x1 <= fig.bbox.width


def test_a_long_provider_name_is_shortened_so_the_legend_fits_and_kept_for_its_tooltip(tmp_path, monkeypatch):
    """The legend is centred above the panels: one wider than the figure was cut at both edges ("elang", "on")."""
    kept = _figures(monkeypatch)
    path = plots.ratio_distributions(_long_report(), tmp_path / "ratios.png")
    (legend,) = kept[0].legends
    assert _inside(kept[0], legend)
    labels = [t.get_text() for t in legend.get_texts()]
    assert labels[:2] == ["tilelang", "triton"] and labels[2].startswith("impl:…/") and len(labels[2]) < len(LONG)
    assert LONG.endswith(labels[2].removeprefix("impl:…"))  # its tail from a folder: the file and the function
    page = html.figure(path)  # the full name over its entry, where a browser shows it on hover
    (box,) = re.findall(rf'<span class="tip" title="{re.escape(LONG)}" style="([^"]+)"></span>', page)
    left, top, width, height = (float(v) for v in re.findall(r"([\d.]+)%", box))
    assert 0 < left and left + width <= 100 and 0 < top < 25 and 0 < height < 5  # the entry's row, in the legend
    assert "shows the full one on hover" in page
    rows = [{"statistic": "min_us", "mode": "fwd", "dtype": "float32", "shape": "4x8", "threads": 1, "value": 1.0}]
    plots.latency([r | {"provider": p} for r in rows for p in ("torch eager", LONG)], tmp_path / "f.png", "op")
    assert _inside(kept[1], kept[1].legends[0])
    plt.close("all")


def test_shortened_names_stay_apart_and_short_ones_stay_whole():
    a, b = "impl:/home/a/ports/v1/kernels.py:rms_norm", "impl:/home/a/ports/v2/kernels.py:rms_norm"
    short = plots._labels([a, b, "tilelang"], 30)
    assert short[0] != short[1] and short[2] == "tilelang" and all(s.startswith("impl:…") for s in short[:2])
    assert plots._labels(["torch.compile"], 30) == ["torch.compile"]


def test_a_study_is_plain_and_says_it_is_no_verdict():
    st = SimpleNamespace(
        title="k steps", headers=("k", "L0"), rows=(("0", "fail"), ("2", "pass")), note="measured on 1024x1024"
    )
    (t,) = tables.studies(SimpleNamespace(studies=[st]))
    page = html.table_html(t)
    assert "not part of the verdict" in t.title and 'class="fail"' not in page and "<td>fail</td>" in page
