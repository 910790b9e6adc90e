"""Peak-memory accounting and the benchmark CSV schema."""

import pytest
import torch

from tileport.bench import csvfile
from tileport.bench.memory import peak_bytes


def test_peak_bytes_counts_allocations_not_views_or_inputs():
    x = torch.ones(1000)
    assert peak_bytes(lambda: x.view(10, 100).t()) == 0
    assert peak_bytes(lambda: x.add_(1)) == 0
    assert peak_bytes(lambda: x * 2) == 4000

    def temporaries():
        a = x * 2
        b = a + 1  # a and b alive together: 8000
        del a
        return b * 3  # b and the result: 8000 again, never 12000

    assert peak_bytes(temporaries) == 8000


def test_csv_appends_with_one_header_and_refuses_foreign_files(tmp_path):
    path = tmp_path / "b.csv"
    row = dict(
        operator="l2norm", provider="p", mode="fwd", dtype="fp32", shape="2x3", threads=1, statistic="min_us", value=1.5
    )
    csvfile.append(path, [row])
    csvfile.append(path, [dict(row, value=2.5)])
    rows = csvfile.read(path)
    assert [r["value"] for r in rows] == [1.5, 2.5] and path.read_text().count("operator,") == 1
    other = tmp_path / "other.csv"
    other.write_text("a,b\n1,2\n")
    with pytest.raises(ValueError, match="not a tileport benchmark CSV"):
        csvfile.append(other, [row])
