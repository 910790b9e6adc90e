"""The upstream originals as competitors: found or not and why, an original that runs joins verify's
cross-backend comparison, and one without a parameter for a case's attribute is left out of that case."""

import dataclasses

import pytest
import torch

from tileport.cases import generate, load_suite
from tileport.ops import catalog
from tileport.ops import spec as opspec
from tileport.providers import convention, originals
from tileport.report.tables import originals as originals_table
from tileport.verify import accuracy
from tileport.verify.accuracy import Reduced, Task, merge
from tileport.verify.pool import run_task


def _torch_rms_norm(fn):  # torch's own fused op standing in for an upstream kernel
    return lambda x, weight=None, eps=1e-6: fn(x, x.shape[-1:], weight, eps)


TORCH_ORIGINAL = opspec.Original("stand-in", "torch.nn.functional", "rms_norm", _torch_rms_norm)
MISSING = opspec.Original("missing", "no_such_package_for_tileport.kernels", "norm")
BROKEN = opspec.Original("broken", "torch.nn.functional", "no_such_function")


@pytest.fixture
def rms_norm_with(monkeypatch):
    def use(*found):
        spec = dataclasses.replace(catalog.get("rms_norm"), originals=found)
        monkeypatch.setitem(catalog.specs(), "rms_norm", spec)
        return spec

    return use


def test_probe_says_which_originals_were_found_and_why_not(rms_norm_with):
    spec = rms_norm_with(TORCH_ORIGINAL, MISSING, BROKEN)
    status = {s.name: s for s in originals.probe(spec)}
    assert status["stand-in"].found and status["stand-in"].runs and status["stand-in"].why == ""
    assert (
        not status["missing"].found
        and "not installed (no package 'no_such_package_for_tileport'" in status["missing"].why
    )
    assert (
        status["broken"].found
        and not status["broken"].runs
        and "does not import: AttributeError" in status["broken"].why
    )
    table = originals_table(type("Rep", (), {"originals": [dataclasses.asdict(s) for s in status.values()]})())
    assert [r[3] for r in table.rows] == ["yes", "no", "no"]


def test_an_original_that_runs_joins_the_cross_backend_comparison(rms_norm_with, monkeypatch):
    spec = rms_norm_with(TORCH_ORIGINAL)
    monkeypatch.setattr(accuracy, "spec_of", lambda suite: spec)
    suite = load_suite("rms_norm")
    every = [c for c in generate(suite, "quick", [torch.float32]) if c.counted]
    cases = [c for c in every if 1 < c.elements <= 4096][:3] + [next(c for c in every if c.elements > 1 << 16)]
    task = Task(
        suite, ("tilelang",), "L0", 1, 5, min_seeds=0, originals=("stand-in",), originals_cut=Reduced(1000, 1, 5)
    )
    results, pairs, skipped = merge(run_task(task, cases))
    compared = {(p.a, p.b, p.output): p for p in pairs if "stand-in (original)" in (p.a, p.b)}
    outputs = {o for _, _, o in compared}
    assert {"y", "dx"} <= outputs and "rstd" not in outputs  # torch's fused op gives y alone; dx through autograd
    assert {"dweight"} <= outputs  # the weight's gradient too
    assert all(p.max_abs < 1e-3 for p in compared.values())  # the same math in fp32 (dx: cancellation-sized gaps)
    assert skipped["stand-in (original)"][0] == 1  # the large case: beyond the interpreter's workload
    assert all(r.backend == "tilelang" for r in results)  # an original is compared, never judged


def test_an_attribute_the_original_lacks_leaves_the_case_out(rms_norm_with):
    spec = rms_norm_with(TORCH_ORIGINAL)
    fn = originals.load(spec)["stand-in"][0]
    x = torch.randn(3, 8)
    with pytest.raises(convention.Unsupported, match=r"no parameter offset \(the case sets offset=1.0\)"):
        convention.run(spec, fn, {"x": x, "offset": 1.0}, False)
    assert set(convention.run(spec, fn, {"x": x, "offset": 0.0}, False)) == {"y"}  # the default: no difference
