"""verify on a stub: a kernel (or the reference) that raises NotImplementedError is "not implemented", its own
outcome naming the TODO, not a crash; its checks fail and the others are judged on their merits."""

import dataclasses

import torch

from tileport.cases import generate, load_suite
from tileport.ops.catalog import get as op_spec
from tileport.providers import Backend
from tileport.verify import accuracy
from tileport.verify.accuracy import merge, raised
from tileport.verify.pool import run_task

TODO = "TODO(l2norm): the triton forward, in tileport/backends/triton/l2norm.py"


def _results(monkeypatch, stubbed: str):
    """l2norm's first two counted fp32 cases on tilelang and triton, with backend ``stubbed`` raising the TODO."""
    suite, real = load_suite("l2norm"), op_spec("l2norm")

    def run(inputs, backend, backward):
        if backend == stubbed:
            raise NotImplementedError(TODO)
        return real.run(inputs, backend, backward)

    monkeypatch.setattr(accuracy, "spec_of", lambda suite: dataclasses.replace(real, run=run))
    cases = [c for c in generate(suite, "quick", [torch.float32]) if c.counted][:2]
    results, _, _ = merge(run_task(accuracy.Task(suite, ("tilelang", "triton"), "L0", 1, 5, min_seeds=0), cases))
    return results


def test_a_stubbed_backend_is_not_implemented_and_the_others_are_judged(monkeypatch):
    results = _results(monkeypatch, "triton")
    triton = [r for r in results if r.backend == "triton"]
    assert len(triton) == 2 and all(not r.passed and r.output == "run" for r in triton)
    assert all(r.verdict.failures == [f"not implemented: {TODO}"] for r in triton)
    tilelang = [r for r in results if r.backend == "tilelang"]
    assert tilelang and all(r.passed for r in tilelang) and {r.output for r in tilelang} == {"y", "rstd", "dx"}


def test_a_stubbed_reference_fails_every_backend_naming_it(monkeypatch):
    """The torch reference is the benchmark and the golden: with it a stub nothing can be judged, and every
    backend's check says why, naming the stub (the case does not crash the run)."""
    results = _results(monkeypatch, "torch")
    assert {r.backend for r in results} == {"tilelang", "triton"} and len(results) == 4
    assert all(not r.passed and r.verdict.failures == [f"not implemented: {TODO}"] for r in results)


def test_only_not_implemented_is_told_apart():
    assert raised(NotImplementedError("TODO(x): the cpu forward")) == "not implemented: TODO(x): the cpu forward"
    assert (
        raised(TypeError("forward() takes 2 arguments")) == "did not run: raised TypeError: forward() takes 2 arguments"
    )


def test_performance_leaves_out_a_stubbed_backend_and_survives_a_stubbed_baseline(monkeypatch):
    """verify's timings: a backend whose kernel module is a stub is not timed (it would raise), and a stub the
    marker does not name (the spec's composite, the baseline every timing is against) gives no timings instead
    of a traceback and no report."""
    import importlib

    from tileport.backends.registry import REGISTRY

    performance = importlib.import_module(
        "tileport.verify.performance"
    )  # the module (the package exports its function)
    timed = []
    monkeypatch.setattr(
        REGISTRY, "stub", lambda name, op: "TODO(l2norm): the cpu kernels" if name == "tilelang" else None
    )
    monkeypatch.setattr(
        performance,
        "run",
        lambda op, groups, tested, **kw: timed.append([p.name for p in tested]) or [{"provider": "triton"}],
    )
    failed = {}
    assert performance.performance("l2norm", [], [*map(Backend, ["tilelang", "triton", "torch"])], failed=failed) == [
        {"provider": "triton"}
    ]
    assert timed == [["triton"]] and failed == {"tilelang": "not implemented: TODO(l2norm): the cpu kernels"}

    def composite_stub(*args, **kw):
        raise NotImplementedError("TODO(l2norm): the torch composite users write")

    monkeypatch.setattr(performance, "run", composite_stub)
    failed = {}
    assert performance.performance("l2norm", [], [Backend("triton")], failed=failed) == []
    assert failed == {"l2norm": "not implemented: TODO(l2norm): the torch composite users write"}
