"""A case file read by its format: tileport's row-wise suites (``schema.py``), suites by named dimensions
(``named.py``) and the test kit's design files (``atk.py``); an operator's name finds its shipped suite, or the
one its plugin names."""

from __future__ import annotations

from pathlib import Path

import yaml

from ..ops.catalog import specs
from .atk import load_atk
from .named import load_named
from .schema import SUITES, CaseFileError, Suite, load_rows


def _plugin_suite(op: str) -> Path | None:
    """The suite an operator outside tileport names in its spec (``OpSpec.suite``, made absolute when the
    plugin was loaded)."""
    spec = specs().get(op)
    return Path(spec.suite) if spec is not None and spec.suite else None


def load_suite(source: str | Path) -> Suite:
    """Load a suite by operator name (``tileport/cases/suites/<op>.yaml``) or by path."""
    path = Path(source)
    if path.suffix not in (".yaml", ".yml"):
        path = SUITES / f"{source}.yaml"
        if not path.exists():
            path = _plugin_suite(str(source)) or path
        if not path.exists():
            known = ", ".join(sorted(p.stem for p in SUITES.glob("*.yaml")))
            raise ValueError(f"no case suite for operator {source!r}; suites: {known}")
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        raise CaseFileError(path, "<file>", f"valid YAML ({exc})") from exc
    if isinstance(data, dict) and "levels" not in data:  # the test kit's own design format
        return load_atk(path, data)
    if isinstance(data, dict) and "dims" in data:  # a suite by named dimensions
        return load_named(path, data)
    return load_rows(path, data)
