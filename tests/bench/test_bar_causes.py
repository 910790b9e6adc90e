"""A missed criterion of the speed bar is printed with its stated cause (the bench's markdown), an operator's own
causes are added to the shared ones by label, and a label that names no criterion is an error."""

import pytest

from tileport.bench.bar import judge_bar
from tileport.ops.spec import Criterion, with_causes
from tileport.report.benchrows import bar_table
from tileport.report.markdown import table_md

BAR = (
    Criterion("fast", ("fwd",), ("1024x512",), "bandwidth_share", 0.7, kernel_only=True, cause="two passes"),
    Criterion("quick call", ("fwd",), ("1024x512",), "speedup_vs_eager", 1.1),
)


def _row(provider, statistic, value, dtype="float32"):
    return dict(
        provider=provider, mode="fwd", dtype=dtype, shape="1024x512", threads=1, statistic=statistic, value=value
    )


def test_each_miss_names_its_cause_and_a_met_criterion_none():
    rows = [
        _row("tilelang:kernel", "bandwidth_share", 0.5),
        _row("tilelang:kernel", "bandwidth_share", 0.8, "bfloat16"),
        _row("tilelang", "speedup_vs_eager", 0.9),
    ]
    md = table_md(bar_table(judge_bar(rows, BAR)))
    lines = {
        (line.split(" | ")[0][2:], line.split(" | ")[3]): line for line in md.splitlines() if line.startswith("| ")
    }
    assert lines["fast", "float32"].endswith("| NO | [1] |")
    assert lines["fast", "bfloat16"].endswith("| yes |  |")
    assert lines["quick call", "float32"].endswith("| NO | [2] |")
    assert "1. two passes" in md
    assert "2. no cause stated" in md  # a miss of a criterion without a cause says so


def test_an_operators_causes_join_the_shared_ones():
    bar = with_causes(BAR, {"fast": "x read three times", "quick call": "three outputs"})
    assert [c.cause for c in bar] == ["two passes; x read three times", "three outputs"]


def test_a_cause_for_no_criterion_is_an_error():
    with pytest.raises(ValueError, match="no criterion named 'slow'"):
        with_causes(BAR, {"slow": "?"})
