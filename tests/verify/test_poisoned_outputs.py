"""Section 3, note 2: outputs start as NaN under verify, so an element a kernel never writes is caught."""

import dataclasses
import math

import torch

import tileport
from tileport.backends import outputs
from tileport.cases import generate, load_suite
from tileport.ops.catalog import get as op_spec
from tileport.verify import accuracy
from tileport.verify.accuracy import merge
from tileport.verify.pool import run_task


def test_outputs_are_nan_only_inside_poisoned(monkeypatch):
    # memory known to be 0, so what is nan was written: freed memory may hold a poisoned block's nans (a .ci/run
    # once got the context's fp16 block back, all nan, for the last allocation)
    monkeypatch.setattr(outputs.torch, "empty", torch.zeros)
    assert not torch.isnan(outputs.empty((64,), torch.float32)).any()
    with outputs.poisoned():
        assert torch.isnan(outputs.empty((64,), torch.float16)).all()
        assert outputs.empty((3,), torch.int32).dtype == torch.int32  # integers are left alone
    assert not torch.isnan(outputs.empty((64,), torch.float32)).any()


def test_kernels_write_every_element_of_their_outputs():
    x, w, dy = torch.randn(37, 100), torch.randn(100), torch.randn(37, 100)
    with outputs.poisoned():
        y, rstd = tileport.rms_norm_fwd(x, w, backend="tilelang")
        dx, dw = tileport.rms_norm_bwd(x, rstd, dy, w, backend="tilelang")
    for t in (y, rstd, dx, dw):
        assert torch.isfinite(t).all()


def test_an_unwritten_element_fails_verify(monkeypatch):
    """A backend that leaves the last column of its outputs unwritten is caught: its allocation is poisoned."""
    suite = load_suite("l2norm")
    case = next(
        c
        for c in generate(suite, "quick", dtypes=[torch.float32])
        if c.counted and c.shape[-1] > 4 and len(c.shape) == 2
    )
    spec = op_spec("l2norm")

    def lazy_run(inputs, backend, backward):
        result = spec.run(inputs, backend, backward)
        if backend != "tilelang":
            return result
        out = {}
        for name, t in result.items():
            fresh = outputs.empty(t.shape, t.dtype)  # what a kernel allocates, then fails to fill
            if t.dim() >= 2:  # the retest stacks seeds: (seeds, M, D)
                fresh[..., :-1] = t[..., :-1]
            else:
                fresh.copy_(t)
            out[name] = fresh
        return out

    monkeypatch.setattr(accuracy, "spec_of", lambda suite: dataclasses.replace(spec, run=lazy_run))
    results, _, _ = merge(run_task(accuracy.Task(suite, ("tilelang",), "L0", 1, 30, min_seeds=0), [case]))
    failed = {r.output for r in results if not r.passed}
    assert failed == {"y", "dx"}
    y = next(r for r in results if r.output == "y")
    assert math.isinf(y.verdict.actual.mare)
