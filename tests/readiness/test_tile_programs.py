"""``tileport lower --impl FILE:NAME --target ascend|cpu`` on TileLang kernels written for GPUs (tile_kernels.py):
each GPU construct is reported with its Ascend counterpart, a failure with its cause and fix; the Ascend
dialect's kernel lowers clean; the CPU's C target builds the elementwise kernel and refuses fragments."""

from pathlib import Path

import pytest
from typer.testing import CliRunner

from tileport.cli import app
from tileport.readiness import causes

pytest.importorskip("tilelang")
runner = CliRunner()
KERNELS = Path(__file__).with_name("tile_kernels.py")
SIZE = ["--arg", "M=256", "--arg", "N=256"]

# kernel, target -> (exit status, the causes that fail it, the notes)
EXPECTED = {
    ("elementwise", "ascend"): (1, {"vf-block"}, {"threads"}),
    ("rownorm", "ascend"): (1, {"dma-cast"}, {"threads", "fragment", "rsqrt"}),
    ("matmul", "ascend"): (1, {"dma-cast"}, {"threads", "fragment", "gemm"}),
    ("ascend_scale", "ascend"): (0, set(), set()),
    ("elementwise", "cpu"): (0, set(), set()),
    ("rownorm", "cpu"): (1, {"fragment"}, set()),
}


@pytest.mark.parametrize(("name", "target"), sorted(EXPECTED))
def test_each_construct_is_named_with_its_counterpart(name, target, tmp_path):
    from tileport.readiness import tile_programs

    status, fails, notes = EXPECTED[(name, target)]
    args = SIZE if name != "matmul" else ["--arg", "M=256", "--arg", "N=256", "--arg", "K=256"]
    res = runner.invoke(
        app,
        [
            "lower",
            "--impl",
            f"{KERNELS}:{name}",
            *args,
            "--target",
            target,
            "--out",
            str(tmp_path),
        ],
    )
    assert res.exit_code == status, res.output
    v = tile_programs.check(
        f"{KERNELS}:{name}",
        target,
        {"M": 256, "N": 256} | ({"K": 256} if name == "matmul" else {}),
    )
    assert {f.key for f in v.findings if f.fails} == fails
    assert {f.key for f in v.findings if not f.fails} == notes
    md = (tmp_path / "lower.md").read_text()
    assert md.startswith(
        f"# tileport lower --impl {KERNELS}:{name} --target {target}: {'PASS' if status == 0 else 'FAIL'}"
    )
    for key in fails | notes:
        assert causes.BY_KEY[key].fix in md
    if status == 0:
        assert (tmp_path / ("kernel.cpp" if target == "ascend" else "kernel.c")).read_text()


def test_a_module_level_prim_func_is_taken(tmp_path):
    """``--impl FILE:gemm`` names a T.prim_func (no callable): lowered and judged as the builder's is."""
    res = runner.invoke(app, ["lower", "--impl", f"{KERNELS}:gemm", "--target", "ascend", "--out", str(tmp_path)])
    assert res.exit_code == 1, res.output
    md = (tmp_path / "lower.md").read_text()
    assert md.startswith(f"# tileport lower --impl {KERNELS}:gemm --target ascend: FAIL")
    for key in ("dma-cast", "threads", "fragment", "gemm"):
        assert causes.BY_KEY[key].fix in md


def test_lower_help_says_impl_takes_tilelang_kernels():
    text = " ".join(runner.invoke(app, ["lower", "--help"], terminal_width=200).output.split())
    assert "TileLang kernel (FILE.py:KERNEL: a T.prim_func" in text
    assert "for --target ascend" in text and "or cpu (built for this CPU" in text


def test_what_is_no_tile_program_is_refused(tmp_path):
    res = runner.invoke(
        app,
        [
            "lower",
            "--impl",
            f"{KERNELS}:SIZE",
            "--target",
            "ascend",
            "--out",
            str(tmp_path),
        ],
    )
    assert res.exit_code == 2
    res = runner.invoke(
        app,
        [
            "lower",
            "--impl",
            "tileport.dtypes:name",
            "--arg",
            "dtype=1",
            "--target",
            "ascend",
            "--out",
            str(tmp_path),
        ],
    )
    assert res.exit_code == 2 and "not a TileLang prim_func" in res.output
