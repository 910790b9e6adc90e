"""A benchmark group's figures are named noisy when its rounds spread or its copy scales impossibly, and
``--busy`` runs competing processes for the duration of a run only."""

import os
import time

import pytest

from tileport.bench import contention
from tileport.bench.bar import judge_bar
from tileport.bench.noise import noisy_groups, summary
from tileport.ops.catalog import get


def _rows(threads, provider, min_us, p80_us, shape="1024x512"):
    base = dict(operator="rms_norm", mode="fwd", dtype="float32", shape=shape, threads=threads, provider=provider)
    return [dict(base, statistic="min_us", value=min_us), dict(base, statistic="p80_us", value=p80_us)]


def test_a_quiet_run_has_no_noisy_group():
    rows = (
        _rows(1, "copy", 100, 110)
        + _rows(1, "tilelang", 80, 90)
        + _rows(2, "copy", 60, 66)
        + _rows(2, "tilelang", 45, 50)
    )
    assert noisy_groups(rows) == {}
    in_cache = _rows(1, "copy", 100, 110) + _rows(2, "copy", 37, 40)  # 2.7x: each core's cache holds its half
    assert noisy_groups(in_cache) == {}
    assert summary(rows) == []


def test_rounds_that_spread_past_the_limit_are_named():
    rows = _rows(1, "copy", 100, 110) + _rows(1, "torch-compile", 10, 350)
    noisy = noisy_groups(rows)
    assert list(noisy) == [("fwd", "float32", "1024x512", 1)]
    assert "torch-compile 35.0x" in noisy[("fwd", "float32", "1024x512", 1)][0]
    assert summary(rows)[0].startswith("noisy: 1 of 1 groups")


@pytest.mark.parametrize("copy_at_two, why", [(20.0, "5.00x"), (400.0, "0.25x")])  # past 2 t, under 0.7
def test_a_copy_that_scales_impossibly_marks_the_group(copy_at_two, why):
    rows = _rows(1, "copy", 100, 110) + _rows(2, "copy", copy_at_two, copy_at_two * 1.1)
    noisy = noisy_groups(rows)
    assert list(noisy) == [("fwd", "float32", "1024x512", 2)]
    assert f"the copy scales {why}" in noisy[("fwd", "float32", "1024x512", 2)][0]


def test_the_speed_bar_says_which_records_are_noisy():
    spec = get("rms_norm")
    c = next(c for c in spec.bar if "compile" in c.statistic and not c.kernel_only)
    shape, mode = c.shapes[0], c.modes[0]
    rows = []
    for provider, us, p80 in (("tilelang", 10.0, 11.0), ("torch-compile", 20.0, 200.0), ("copy", 5.0, 5.5)):
        for stat, v in (("min_us", us), ("p80_us", p80)):
            rows.append(
                dict(
                    operator="rms_norm",
                    mode=mode,
                    dtype="float32",
                    shape=shape,
                    threads=1,
                    provider=provider,
                    statistic=stat,
                    value=v,
                )
            )
        rows.append(
            dict(
                operator="rms_norm",
                mode=mode,
                dtype="float32",
                shape=shape,
                threads=1,
                provider=provider,
                statistic="speedup_vs_compile",
                value=20.0 / us,
            )
        )
    judged = [j for j in judge_bar(rows, (c,)) if j["provider"] == "tilelang"]
    assert judged and all("torch-compile 10.0x" in j["noisy"] for j in judged)


def _cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def test_busy_processes_spin_during_the_block_and_end_after_it():
    with contention.busy(1) as procs:
        time.sleep(0.5)
        assert _cpu_seconds(procs[0].pid) > 0.1
        assert procs[0].poll() is None
    assert procs[0].poll() is not None
    assert contention.label(1) == "; 1 competing busy process"
    assert contention.label(0) == ""
    with pytest.raises(ValueError, match="--busy"):
        with contention.busy(-1):
            pass
