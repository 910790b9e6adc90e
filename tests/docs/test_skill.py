"""The migration skill: an agent can load it (front matter), and it holds what the issue asks of it."""

from pathlib import Path

import pytest
import yaml

SKILL = Path(__file__).resolve().parents[2] / "skills" / "tilelang-ascend-op-migration"


def _front_matter() -> dict:
    text = (SKILL / "SKILL.md").read_text()
    assert text.startswith("---\n"), "SKILL.md must open with YAML front matter"
    return yaml.safe_load(text.split("---\n", 2)[1])


def test_front_matter_names_the_skill_and_says_when_to_use_it():
    meta = _front_matter()
    assert meta["name"] == SKILL.name
    assert len(meta["description"]) > 100 and "Ascend" in meta["description"]


def test_the_skill_ships_its_quickstart_and_readme():
    assert (SKILL / "QUICKSTART.md").is_file() and (SKILL / "README.md").is_file()


@pytest.mark.parametrize(
    "must",
    [
        *(f"## Phase {n}" for n in range(9)),  # the phase 0-8 workflow
        "tileport doctor",
        "tileport scaffold",
        "tileport verify",
        "tileport bench",
        "tileport lower",
        "scripts/make_docs.py",
        "--inputs x:rows,gate:rows,weight:vector?",
        "is_npu=True",
        "1-D grid",
        "threads 1 or 2",
        "T.alloc_ub",
        "T.tile.",
        "warp",
        "mask",  # the API map
        "Newton-Raphson",
        "glibc >= 2.38",
        "Python.h",
        "bisheng",
        "CANN",  # the pitfalls
    ],
)
def test_skill_covers(must):
    assert must in (SKILL / "SKILL.md").read_text()


# What each phase is about, one word both texts use in its heading.
PHASES = [
    "environment",
    "semantics",
    "scaffold",
    "torch reference",
    "per target",
    "approximate",
    "precision",
    "against eager",
    "evidence",
]


def test_the_skill_and_the_migration_guide_number_the_same_phases():
    import re

    guide = Path(__file__).resolve().parents[2] / "docs" / "migration.md"
    heads = [dict(re.findall(r"^## Phase (\d): (.*)$", p.read_text(), flags=re.M)) for p in (SKILL / "SKILL.md", guide)]
    assert list(heads[0]) == list(heads[1]) == [str(n) for n in range(9)]
    for n, word in enumerate(PHASES):
        assert all(word in h[str(n)] for h in heads), (n, word, heads[0][str(n)], heads[1][str(n)])
