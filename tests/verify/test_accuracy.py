"""verify's accuracy path: batched retest verdicts equal per-seed verdicts, and a wrong backend fails the
first seed and its retest alike."""

import dataclasses

import pytest
import torch

from tileport.cases import generate, load_suite, make_inputs
from tileport.ops.catalog import get as op_spec
from tileport.precision.retest import FAR_SEEDS
from tileport.verify import accuracy
from tileport.verify.accuracy import Judge, merge
from tileport.verify.pool import run_task

FIELDS = ("mare", "mere", "rmse", "small_errors")


def _metrics(v):
    return [getattr(v.actual, f) for f in FIELDS] + [getattr(v.benchmark, f) for f in FIELDS]


@pytest.mark.parametrize("output", ["y", "rstd", "dx"])
def test_batched_retest_verdicts_equal_per_seed_verdicts(output):
    suite = load_suite("l2norm")
    case = next(c for c in generate(suite, "quick", [torch.bfloat16]) if c.shape == (1024, 1024))
    case = dataclasses.replace(case, shape=(3, 700))  # several rows, a row length with a tail
    j = Judge(suite, "L0")
    batched = j.new_seed_verdicts(case, output, "tilelang", 12, batched=True)
    single = j.new_seed_verdicts(case, output, "tilelang", 12, batched=False)
    assert len(batched) == len(single) == 12
    for b, s in zip(batched, single):
        assert _metrics(b) == _metrics(s) and b.passed == s.passed


def test_cases_with_a_shared_weight_are_not_stacked():
    suite = load_suite("rms_norm")
    case = generate(suite, "quick", [torch.float32])[0]
    j = Judge(suite, "L0")
    assert not j.spec.stackable
    with pytest.raises(ValueError, match="cases do not stack"):
        j.new_seed_verdicts(case, "dweight", "tilelang", 2, batched=True)
    assert len(j.new_seed_verdicts(case, "dweight", "tilelang", 2)) == 2  # per seed by default


def test_a_wrong_backend_fails_its_first_seed_and_its_retest(monkeypatch):
    suite = load_suite("l2norm")
    real = op_spec("l2norm")

    def wrong_run(inputs, backend, backward):  # the backend under test is off by 1% on y; references exact
        out = real.run(inputs, backend, backward)
        return out | {"y": out["y"] * 1.01} if backend == "tilelang" else out

    monkeypatch.setattr(accuracy, "spec_of", lambda suite: dataclasses.replace(real, run=wrong_run))
    cases = generate(suite, "quick", [torch.float16])[:3]
    results, _, _ = merge(
        run_task(accuracy.Task(suite, ("tilelang",), "L0", 1, 5, min_seeds=0), cases)
    )  # fails on its merits
    y = [r for r in results if r.output == "y"]
    assert len(y) == 3 and all(not r.verdict.passed and r.retest is not None and not r.retest.passed for r in y)
    assert all(r.passed for r in results if r.output != "y")


def test_repeated_runs_must_give_the_same_bits(monkeypatch):
    """Section 3: each case runs several times; a backend whose outputs differ between runs fails, however
    accurate each run is."""
    suite = load_suite("l2norm")
    real = op_spec("l2norm")
    calls = []

    def flaky_run(inputs, backend, backward):  # the second run's y differs in the last bit of one element
        out = real.run(inputs, backend, backward)
        if backend == "tilelang":
            calls.append(1)
            if len(calls) % 2 == 0:
                y = out["y"].clone()
                y.view(-1)[0] = torch.nextafter(y.view(-1)[0], torch.tensor(float("inf"), dtype=y.dtype))
                out = out | {"y": y}
        return out

    monkeypatch.setattr(accuracy, "spec_of", lambda suite: dataclasses.replace(real, run=flaky_run))
    case = next(c for c in generate(suite, "quick", [torch.float32]) if c.counted and c.elements > 100)
    results, _, _ = merge(run_task(accuracy.Task(suite, ("tilelang",), "L0", 2, 5, min_seeds=0), [case]))
    y = next(r for r in results if r.output == "y")
    assert y.verdict.passed and not y.deterministic and not y.passed
    assert "outputs differ between 2 repeated runs" in y.failures


def test_the_golden_is_the_specs_own_where_it_states_one(monkeypatch):
    """Judge's golden comes from the spec's run_golden (upcast inputs), never from the backend under test."""
    suite = load_suite("l2norm")
    real = op_spec("l2norm")
    seen = []

    def own(inputs, backward):
        seen.append({k: v.dtype for k, v in inputs.items() if isinstance(v, torch.Tensor)})
        out = real.run(inputs, "torch", backward)
        return out | {"y": out["y"] * 2}  # a golden that disagrees with every backend

    monkeypatch.setattr(accuracy, "spec_of", lambda suite: dataclasses.replace(real, golden=own))
    case = next(c for c in generate(suite, "quick", [torch.float32]) if c.counted and c.elements > 100)
    j = Judge(suite, "L0")
    bm, gold = j.references(make_inputs(suite, case), False)
    assert seen and all(d == torch.float64 for d in seen[0].values())
    torch.testing.assert_close(gold["y"], bm["y"].double() * 2, rtol=1e-6, atol=1e-6)


def test_a_backend_that_raises_fails_alone(monkeypatch):
    """One backend's exception is that backend's failed check: the others are judged on their merits (a case
    ran every backend inside one try, so a Triton stub's TypeError was reported as 'did not run' for TileLang)."""
    suite = load_suite("l2norm")
    real = op_spec("l2norm")

    def stub_run(inputs, backend, backward):
        if backend == "triton":
            raise TypeError("forward() takes 2 positional arguments but 3 were given")
        return real.run(inputs, backend, backward)

    monkeypatch.setattr(accuracy, "spec_of", lambda suite: dataclasses.replace(real, run=stub_run))
    cases = [c for c in generate(suite, "quick", [torch.float32]) if c.counted][:2]
    results, _, _ = merge(run_task(accuracy.Task(suite, ("tilelang", "triton"), "L0", 1, 5, min_seeds=0), cases))
    triton = [r for r in results if r.backend == "triton"]
    tilelang = [r for r in results if r.backend == "tilelang"]
    assert len(triton) == 2 and all(
        not r.passed and "TypeError: forward() takes 2" in " ".join(r.verdict.failures) for r in triton
    )
    assert tilelang and all(r.passed for r in tilelang) and {r.output for r in tilelang} == {"y", "rstd", "dx"}


@pytest.mark.parametrize("conforming", [False, True])
def test_a_failure_by_orders_of_magnitude_is_cut_short_at_quick_only(monkeypatch, conforming):
    suite = load_suite("l2norm")
    real = op_spec("l2norm")

    def wrong_run(inputs, backend, backward):  # y a thousand times too large: every ratio far above its limit
        out = real.run(inputs, backend, backward)
        return out | {"y": out["y"] * 1000} if backend == "tilelang" else out

    monkeypatch.setattr(accuracy, "spec_of", lambda suite: dataclasses.replace(real, run=wrong_run))
    case = generate(suite, "quick", [torch.float32])[0]
    seeds, fuse = (400, 200) if conforming else (30, 0)
    results, _, _ = merge(run_task(accuracy.Task(suite, ("tilelang",), "L0", 1, seeds, min_seeds=fuse), [case]))
    y = next(r for r in results if r.output == "y")
    assert not y.passed and y.retest.planned == seeds and y.retest.stopped
    if conforming:  # the standard's rule, stopped only where no remaining seed could pass it: past half of them
        assert seeds // 2 < y.retest.seeds < seeds and "decided after" in y.retest.failures[0]
    else:
        assert (
            y.retest.seeds == FAR_SEEDS and "cut short" in y.retest.failures[0] and "cut short" in "; ".join(y.failures)
        )
