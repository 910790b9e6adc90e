"""The retest rule's early stop: a retest stopped because its outcome was decided fails exactly where the full
retest over every planned seed fails, and runs no seed past the decision; quick's cut of a failure by orders of
magnitude; the small-sample fuse and inf/nan errors decide at once; a pass always runs every seed."""

import math

import numpy as np
import pytest

from tileport.precision import Metrics, Verdict
from tileport.precision.retest import FAR, FAR_SEEDS, decided, retest_stream, retest_verdicts

LIMITS = {"mare": 10.0, "mere": 2.0, "rmse": 2.0}  # L0


def _verdict(mare: float, mere: float = 1.0, rmse: float = 1.0, nonfinite: int = 0) -> Verdict:
    m = Metrics(0.0, 0.0, 0.0, 0, nonfinite, 100)
    ratios = {"mare": mare, "mere": mere, "rmse": rmse, "small": 0.0}
    failures = [f"{k} over" for k, r in ratios.items() if k in LIMITS and not r <= LIMITS[k]]
    return Verdict("L0", m, m, ratios, failures + ["inf/nan"] * bool(nonfinite))


class Counted:
    """The verdicts of a retest, counting how many were taken (each stands for a seed run)."""

    def __init__(self, verdicts):
        self.verdicts, self.taken = verdicts, 0

    def __iter__(self):
        for v in self.verdicts:
            self.taken += 1
            yield v


def _random_retest(rng) -> list[Verdict]:
    """Ratios around a centre from clearly better to clearly worse than the benchmark, some exactly 1 and a
    rare nan, per metric."""
    n = int(rng.choice([30, 60, 200]))
    out = []
    centres = {m: float(np.exp(rng.uniform(-1.0, 1.5))) for m in ("mare", "mere", "rmse")}
    for _ in range(n):
        r = {m: c * float(np.exp(rng.normal(0, 0.8))) for m, c in centres.items()}
        if rng.random() < 0.1:
            r["mere"] = 1.0
        if rng.random() < 0.01:
            r["rmse"] = math.nan
        out.append(_verdict(**r))
    return out


def test_an_early_stop_gives_the_full_retests_verdict():
    rng = np.random.default_rng(7)
    stopped = 0
    for _ in range(60):
        verdicts = _random_retest(rng)
        full = retest_verdicts(verdicts, min_seeds=0)
        taken = Counted(verdicts)
        early = retest_stream(taken, len(verdicts), min_seeds=0)
        assert early.passed == full.passed
        assert early.seeds == taken.taken <= len(verdicts) and early.planned == len(verdicts)
        if early.stopped:
            stopped += 1
            assert early.seeds < len(verdicts) and "decided after" in early.failures[0]
        else:  # not stopped: the very result of the full retest
            assert early == full
    assert 10 <= stopped < 60  # the property was exercised both ways


def test_a_clear_failure_stops_near_the_seed_that_decides_it():
    verdicts = [_verdict(1.0, mere=50.0) for _ in range(200)]
    taken = Counted(verdicts)
    r = retest_stream(taken, 200, min_seeds=0)
    assert not r.passed and r.stopped and "MERE" in r.stopped
    assert 100 < r.seeds < 140 and taken.taken == r.seeds  # more than half must be above 1 for any bound above 1
    assert decided(verdicts[: r.seeds - 1], 200, min_seeds=0) == ""  # one seed earlier it was still open


def test_a_pass_runs_every_seed():
    verdicts = [_verdict(0.5, 0.9, 0.95) for _ in range(60)]
    r = retest_stream(Counted(verdicts), 60, min_seeds=0)
    assert r.passed and r.seeds == 60 and not r.stopped


def test_the_fuse_and_an_inf_nan_error_decide_at_once():
    fused = retest_stream(Counted([_verdict(0.5)] * 50), 50, min_seeds=200)
    assert (
        not fused.passed and fused.seeds == 1 and "small-sample fuse: 50 new seeds < 200" in "; ".join(fused.failures)
    )
    verdicts = [_verdict(0.5), _verdict(0.5, nonfinite=3)] + [_verdict(0.5)] * 28
    r = retest_stream(Counted(verdicts), 30, min_seeds=0)
    assert not r.passed and r.seeds == 2 and "inf/nan" in r.stopped


def test_quick_cuts_a_failure_by_orders_of_magnitude_short():
    far = [_verdict(1.0, mere=FAR * LIMITS["mere"] * 3) for _ in range(30)]
    r = retest_stream(Counted(far), 30, min_seeds=0, far=True)
    assert not r.passed and r.seeds == FAR_SEEDS and "cut short" in r.stopped and "MERE" in r.stopped
    # one new seed within a hundred times the limit: the cut is off, the rule runs until decided
    mixed = far[:1] + [_verdict(1.0, mere=5.0)] + far[2:]
    r = retest_stream(Counted(mixed), 30, min_seeds=0, far=True)
    assert not r.passed and r.seeds > FAR_SEEDS and "cut short" not in r.stopped and "decided after" in r.stopped
    # without far (a conforming level, or a first seed that missed by less) no cut
    assert retest_stream(Counted(far), 30, min_seeds=0).seeds > FAR_SEEDS


@pytest.mark.parametrize("planned", [30, 200])
def test_a_decision_holds_for_any_completion(planned):
    """Decided means decided: whatever ratios the remaining seeds bring (here the best case for the
    candidate, 0, and random ones), the full retest fails."""
    rng = np.random.default_rng(planned)
    head = [_verdict(1.0, mere=3.0) for _ in range(planned)]
    n = next(k for k in range(1, planned) if decided(head[:k], planned, min_seeds=0))
    for tail in ([0.0] * (planned - n), list(rng.uniform(0, 1, planned - n))):
        full = retest_verdicts(head[:n] + [_verdict(1.0, mere=t, rmse=t) for t in tail], min_seeds=0)
        assert not full.passed and any("MERE" in f for f in full.failures)
