"""Case results say what failed and by how much; aggregates count cases and elements against the standard."""

import torch

from tileport.precision import CaseResult, aggregate, compare


def result(case, output, actual, golden, bench, dtype="float32", backend="b"):
    v = compare(actual, golden, bench, level="L0", dtype=torch.float32)
    return CaseResult("op", backend, case, dtype, tuple(actual.shape), "normal", {"eps": 1e-6}, output, v)


def test_case_result_reports_metric_and_excess():
    g = torch.linspace(1, 2, 100, dtype=torch.float64)
    bad = result(0, "y", g * (1 + 1e-4), g, g * (1 + 1e-6))
    assert not bad.passed
    assert any(f.startswith("MARE ratio 100 > 10") for f in bad.failures)
    assert abs(bad.excess()["mare"] - 10.0) < 1e-6  # 100 / limit 10
    row = bad.row()
    assert row["passed"] is False and row["mare_ratio"] > 99 and row["shape"] == "100"
    bad.deterministic = False
    assert "outputs differ between 1 repeated runs" in bad.failures[-1]


def test_aggregate_counts_cases_elements_and_minimums():
    g = torch.ones(10, dtype=torch.float64)
    rs = [result(i, out, g, g, g) for i in range(3) for out in ("y", "rstd")]
    rs.append(result(3, "y", g * 2, g, g * (1 + 1e-7)))
    (agg,) = aggregate(rs)
    assert (agg.cases, agg.checks, agg.failed, agg.elements) == (4, 7, 1, 70)
    assert not agg.passed
    met = agg.counts_met(total_cases=4, total_elements=70)
    assert met == {"cases": False, "cases_per_dtype": False, "elements": False}
    agg.cases = 200
    assert agg.counts_met(5000, 1_000_000) == {"cases": True, "cases_per_dtype": True, "elements": True}
