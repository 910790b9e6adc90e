"""Generated cases as records a reviewer can audit (what the test kit's case command writes), and their
coverage: the distribution mix, dimension counts, outliers and special scenarios of a level."""

from __future__ import annotations

from collections import Counter
from typing import Any

from ..dtypes import name as dtype_name
from .generate import Case, input_shapes
from .schema import Suite
from .values import outlier_count


def record(suite: Suite, case: Case) -> dict[str, Any]:
    """One case: id, scenario tag, inputs (shape, dtype, outliers; None where left out), attributes and the
    value distribution with its drawn parameters; by named dimensions also its dimensions' sizes."""
    inputs = {}
    ints = dict(case.int_dtypes)  # by named dimensions: the integer tensors' own dtypes
    for name, shape in input_shapes(suite, case).items():
        if name in case.omitted or shape is None:
            inputs[name] = None
            continue
        n = 1
        for d in shape:
            n *= d
        entry: dict[str, Any] = {"shape": list(shape), "dtype": dtype_name(ints.get(name, case.dtype))}
        if case.filled == name:
            entry["fill"] = case.scenario.removeprefix("all_")
        elif case.value_range == "outliers" and name not in ints:
            entry["outliers"] = outlier_count(n)
        inputs[name] = entry
    sizes = {"sizes": {k: list(v) if isinstance(v, tuple) else v for k, v in case.sizes}} if case.sizes else {}
    return {
        "id": case.index,
        "counted": case.counted,  # part of the level's case scale (special scenarios and extras are not)
        "scenario": case.scenario,
        "dtype": dtype_name(case.dtype),
        "inputs": inputs,
        "attrs": dict(case.attrs),
        "distribution": case.value_range,
        "mu": case.mu,
        "sigma": case.sigma,
        "model": None if case.source is None else dict(zip(("config", "capture", "first_row", "rows"), case.source)),
        "seed": case.seed,
    } | sizes


def coverage(records: list[dict]) -> dict[str, Any]:
    """What a level covers: counts per dtype, distribution (scale only), dimension count and scenario."""
    scale = [r for r in records if r["counted"]]
    primary = lambda r: next(v for v in r["inputs"].values() if v is not None)  # noqa: E731
    return {
        "cases": len(records),
        "scale": len(scale),
        "per_dtype": dict(Counter(r["dtype"] for r in scale)),
        "distributions": dict(Counter(r["distribution"] for r in scale)),
        "dimension_counts": dict(sorted(Counter(len(primary(r)["shape"]) for r in scale).items())),
        "outlier_positions": sum(v.get("outliers", 0) for r in records for v in r["inputs"].values() if v),
        "scenarios": dict(Counter(r["scenario"] for r in records if r["scenario"])),
        "extras": dict(Counter(r["distribution"] for r in records if not r["counted"] and not r["scenario"])),
    }
