"""The speed bar judged on a run's rows: statistics the rows hold, and those derived from them (16-bit against
fp32, two threads against one), each criterion limited to its modes, shapes and dtypes."""

from tileport.bench.bar import derived, judge_bar
from tileport.ops.spec import Criterion


def _row(provider, dtype, threads, us, shape="1024x512", mode="fwd", statistic="min_us"):
    return dict(provider=provider, mode=mode, dtype=dtype, shape=shape, threads=threads, statistic=statistic, value=us)


ROWS = [
    _row("tilelang:kernel", "float32", 1, 100.0),
    _row("tilelang:kernel", "bfloat16", 1, 80.0),
    _row("tilelang:kernel", "float16", 1, 125.0),
    _row("tilelang:kernel", "float32", 2, 55.0),
    _row("tilelang:kernel", "bfloat16", 2, 60.0),
]


def test_vs_fp32_is_the_fp32_time_over_this_dtypes():
    d = derived(ROWS, "vs_fp32")
    assert d[("fwd", "bfloat16", "1024x512", 1)]["tilelang:kernel"] == 100.0 / 80.0
    assert d[("fwd", "float16", "1024x512", 1)]["tilelang:kernel"] == 100.0 / 125.0
    assert ("fwd", "float32", "1024x512", 1) not in d  # fp32 is the reference, not judged against itself


def test_thread_scaling_is_the_one_thread_time_over_this_ones():
    d = derived(ROWS, "thread_scaling")
    assert d[("fwd", "float32", "1024x512", 2)]["tilelang:kernel"] == 100.0 / 55.0
    assert ("fwd", "float32", "1024x512", 1) not in d


def test_a_criterion_judges_only_its_dtypes_and_says_met_or_not():
    half = Criterion(
        "16-bit no slower", ("fwd",), ("1024x512",), "vs_fp32", 1.0, kernel_only=True, dtypes=("float16", "bfloat16")
    )
    judged = {(j["dtype"], j["threads"]): j["met"] for j in judge_bar(ROWS, [half])}
    assert judged == {("bfloat16", 1): True, ("float16", 1): False, ("bfloat16", 2): False}  # 55 / 60 at 2 threads
    scaling = Criterion("two threads", ("fwd",), ("1024x512",), "thread_scaling", 1.6, kernel_only=True)
    assert [(j["dtype"], round(j["measured"], 3), j["met"]) for j in judge_bar(ROWS, [scaling])] == [
        ("float32", 1.818, True),
        ("bfloat16", 1.333, False),
    ]
