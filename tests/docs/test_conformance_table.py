"""docs/precision-standard.md names, per clause, the test that shows it: every named test and file exists."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOC = (ROOT / "docs" / "precision-standard.md").read_text()
TESTS = "\n".join(p.read_text() for p in (ROOT / "tests").rglob("test_*.py"))


def test_every_test_the_table_names_exists():
    names = set(re.findall(r"\b(test_[a-z0-9_]+)\b", DOC)) - {n for n in re.findall(r"(test_[a-z0-9_]+)\.py", DOC)}
    assert len(names) >= 15
    missing = sorted(n for n in names if f"def {n}(" not in TESTS)
    assert missing == []


def test_every_file_the_table_names_exists():
    paths = set(re.findall(r"`((?:tests|tileport|examples)/[\w/.]+\.(?:py|yaml))", DOC))
    paths |= {f"tileport/{p}" for p in re.findall(r"`((?:precision|cases|backends)/[\w/.]+\.py)", DOC)}
    assert paths
    assert sorted(p for p in paths if not (ROOT / p).exists()) == []
