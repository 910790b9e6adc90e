"""The accuracy task: every case of a suite on each backend, judged by the dual-benchmark standard.

Per case the golden (float64 torch reference) and the benchmark (same-dtype torch composite) run once, then
each backend under test; every output is judged, a failure is retested with new seeds (the standard's
rule), the backend is rerun ``runs - 1`` times and must reproduce its outputs bit for bit, and the
backends are compared with each other.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable

import torch

from ..cases import Case, Suite, adapter_for, golden_inputs, make_inputs
from ..precision import CaseResult, compare, retest

_BITS = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Bit-identical (nan payloads included), as ATK's repeated runs require."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    bits = _BITS[a.element_size()]
    return torch.equal(a.contiguous().view(bits), b.contiguous().view(bits))


@dataclass
class PairStat:
    """How far two backends' outputs are apart, over every case of one dtype."""

    a: str
    b: str
    dtype: str
    output: str
    max_abs: float = 0.0
    max_rel: float = 0.0  # |a - b| / (|b| + 1e-7), finite positions only
    identical: int = 0  # cases with bit-identical outputs
    cases: int = 0


def _pair_update(stat: PairStat, a: torch.Tensor, b: torch.Tensor) -> None:
    stat.cases += 1
    if same_bits(a, b):
        stat.identical += 1
        return
    a64, b64 = a.double(), b.double()
    finite = torch.isfinite(a64) & torch.isfinite(b64)
    if finite.any():
        d = (a64 - b64)[finite].abs()
        stat.max_abs = max(stat.max_abs, float(d.max()))
        stat.max_rel = max(stat.max_rel, float((d / (b64[finite].abs() + 1e-7)).max()))


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def run_accuracy(
    suite: Suite,
    cases: list[Case],
    backends: list[str],
    limits: str,
    runs: int,
    retest_seeds: int,
    progress: Callable[[str], None] | None = None,
) -> tuple[list[CaseResult], list[PairStat]]:
    """CaseResults for each (case, backend, output) and the pairwise backend comparison."""
    adapter = adapter_for(suite)
    bm_backend = suite.standard.get("benchmark", "torch")
    results: list[CaseResult] = []
    pairs: dict[tuple, PairStat] = {}

    def outputs(case: Case, backend: str):
        inputs = make_inputs(suite, case)
        return (
            adapter.run(inputs, backend, suite.backward),
            adapter.run(inputs, bm_backend, suite.backward),
            adapter.run(golden_inputs(suite, inputs), bm_backend, suite.backward),
        )

    def verdict(name: str, case: Case, under, bm, gold):
        return compare(under[name], gold[name], bm[name], level=limits, dtype=adapter.precision_dtype(name, case.dtype))

    for case in cases:
        if progress:
            progress(case.describe())
        inputs = make_inputs(suite, case)
        bm = adapter.run(inputs, bm_backend, suite.backward)
        gold = adapter.run(golden_inputs(suite, inputs), bm_backend, suite.backward)
        per_backend = {}
        for backend in backends:
            under = adapter.run(inputs, backend, suite.backward)
            per_backend[backend] = under
            repeats = [adapter.run(inputs, backend, suite.backward) for _ in range(runs - 1)]
            for name in under:
                v = verdict(name, case, under, bm, gold)
                redo = None
                if not v.passed:
                    seeds = range(case.seed + 1, case.seed + 1 + retest_seeds)
                    redo = retest(lambda s, n=name: verdict(n, case, *outputs(replace(case, seed=s), backend)), seeds)
                results.append(
                    CaseResult(
                        suite.name, backend, case.index, dtype_name(case.dtype), case.shape, case.value_range,
                        float(case.attrs.get("eps", 0.0)), name, v, redo,
                        deterministic=all(same_bits(r[name], under[name]) for r in repeats), runs=runs,
                    )
                )  # fmt: skip
        names = list(per_backend)
        for i, a in enumerate(names):
            for b in names[i + 1 :]:
                for name in per_backend[a]:
                    key = (a, b, dtype_name(case.dtype), name)
                    stat = pairs.setdefault(key, PairStat(*key))
                    _pair_update(stat, per_backend[a][name], per_backend[b][name])
    return results, list(pairs.values())
