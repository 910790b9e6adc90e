"""``verify --problem ref.py --impl new.py``: a KernelBench-style candidate judged against its reference by the
standard (golden: Model in float64; benchmark: Model in the case's dtype), run at the problem's own sizes within
the memory budget and scaled down past it (KernelBench's module constants, so the init arguments follow) and said
so, inputs that are not floating point passed as given, bad files refused; the KernelBench examples."""

import json
import re
import textwrap
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tileport.cases import problems
from tileport.cases.problems import MAX_ELEMENTS, ProblemError, describe, generalize, load
from tileport.cli import app
from tileport.precision.retest import FAR_SEEDS

runner = CliRunner()
REF = """
import torch

class Model(torch.nn.Module):
    def __init__(self, features):
        super().__init__()
        self.norm = torch.nn.LayerNorm(features)

    def forward(self, x, scale):
        return self.norm(x) * scale

def get_inputs():
    return [torch.rand(8, 64), 3]

def get_init_inputs():
    return [64]
"""
NEW = """
import torch
import tileport

class ModelNew(torch.nn.Module):
    def __init__(self, features):
        super().__init__()
        self.norm = tileport.LayerNorm(features)

    def forward(self, x, scale):
        return self.norm(x) * scale

class ModelHalfStats(ModelNew):  # the statistics in the input's dtype
    def forward(self, x, scale):
        m = x.mean(-1, keepdim=True)
        v = ((x - m) ** 2).mean(-1, keepdim=True)
        return ((x - m) / torch.sqrt(v + 1e-5) * self.norm.weight + self.norm.bias) * scale
"""


def _files(tmp_path, ref=REF, new=NEW):
    (tmp_path / "ref.py").write_text(textwrap.dedent(ref))
    (tmp_path / "new.py").write_text(textwrap.dedent(new))
    return str(tmp_path / "ref.py"), str(tmp_path / "new.py")


def _verify(ref, impl, out):
    return runner.invoke(
        app, ["verify", "--problem", ref, "--impl", impl, "--level", "quick", "--dtype", "bf16", "--out", str(out)]
    )


def test_a_candidate_passes_or_fails_on_its_merits(tmp_path):
    ref, new = _files(tmp_path)
    ok = _verify(ref, new, tmp_path / "ok")
    assert ok.exit_code == 0, ok.output[-3000:]
    md = (tmp_path / "ok" / "report.md").read_text()
    assert "# tileport verify problem:ref (quick): PASS" in md and "new.py:ModelNew" in md
    bad = _verify(ref, f"{new}:ModelHalfStats", tmp_path / "bad")
    assert bad.exit_code == 1 and "new.py:ModelHalfStats" in (tmp_path / "bad" / "report.md").read_text()


def test_the_non_floating_input_is_passed_as_the_problem_gives_it(tmp_path):
    ref, new = _files(tmp_path)
    p = load(ref, new)
    assert p.shapes == [(8, 64), None] and p.given[1] == 3 and p.notes == []


def test_shapes_too_large_are_generalized_and_reported(tmp_path):
    assert generalize((4096, 393216)) == (32, 393216)
    assert generalize((2, 3, 5)) == (2, 3, 5)
    assert generalize((1, MAX_ELEMENTS * 4)) == (1, MAX_ELEMENTS)  # the last dimension alone too large: cut too
    ref, new = _files(
        tmp_path, REF.replace("torch.rand(8, 64)", "torch.rand(4096, 393216)").replace("return [64]", "return [393216]")
    )
    p = load(ref, new)
    assert p.shapes[0] == (32, 393216) and "(4096, 393216)" in p.notes[0] and "ran as (32, 393216)" in p.notes[0]


@pytest.mark.parametrize(
    "ref,new,message",
    [
        ("import torch\ndef get_inputs(): return []\n", NEW, "no Model, get_init_inputs"),
        (REF, "import torch\nclass Other: pass\n", "no ModelNew"),
        (REF, "raise ImportError('broken')\n", "does not import: ImportError: broken"),
    ],
)
def test_bad_problem_files_are_refused_by_name(tmp_path, ref, new, message):
    r, n = _files(tmp_path, ref, new)
    with pytest.raises(ProblemError, match=message):
        load(r, n)
    result = _verify(r, n, tmp_path / "out")
    assert result.exit_code == 2 and message in " ".join(result.output.replace("│", " ").split())


KB = Path(__file__).resolve().parents[2] / "examples" / "problems" / "kernelbench"


def _shrunk(tmp_path, name: str, **constants) -> str:
    """A copy of a KernelBench example with its module constants set (``batch_size = 16`` lines)."""
    text = (KB / name).read_text()
    for k, v in constants.items():
        text, n = re.subn(rf"^{k} = \d+", f"{k} = {v}", text, flags=re.M)
        assert n == 1, k
    (tmp_path / name).write_text(text)
    return str(tmp_path / name)


def test_kernelbench_problems_run_at_their_own_sizes_within_the_budget():
    p = load(
        str(KB / "40_LayerNorm.py"), str(KB / "40_LayerNorm_new.py")
    )  # 67M elements: shapes read on the meta device
    assert p.shapes == p.original == [(16, 64, 256, 256)] and p.scaled == {} and p.notes == []
    assert describe(p)["sizes"].startswith("the problem's own: a case needs about 4 GiB, within the 6 GiB budget")
    p = load(str(KB / "39_L2Norm_.py"), str(KB / "39_L2Norm_l1.py"))  # 2.1e9 elements: past it
    assert p.original == [(32768, 65535)] and p.shapes == [(256, 65535)] and p.scaled == {"batch_size": (32768, 256)}
    assert "batch_size 32768 -> 256" in describe(p)["sizes"] and "6 GiB budget" in describe(p)["sizes"]


def test_scaling_the_module_constants_scales_the_init_arguments_too(tmp_path, monkeypatch):
    """The outermost dimension's constant first, then the next: the normalized shape follows the input's."""
    monkeypatch.setattr(problems, "MEMORY_BUDGET", 4096 * problems.BYTES_PER_ELEMENT)
    monkeypatch.setattr(problems, "MAX_ELEMENTS", 1024)
    ref = _shrunk(tmp_path, "40_LayerNorm.py", batch_size=16, features=8, dim1=16, dim2=16)
    module, p = problems.read(ref)
    assert p.original == [(16, 8, 16, 16)] and p.shapes == [(1, 4, 16, 16)]
    assert p.scaled == {"batch_size": (16, 1), "features": (8, 4)} and module.get_init_inputs() == [(4, 16, 16)]
    assert problems.read(ref)[1].shapes == [(1, 4, 16, 16)]  # read again in the same process: the same scaling


def _problem_args(ref: str, impl: str) -> list[str]:
    """verify's arguments for the KernelBench pair ``ref`` and ``KB / impl``: quick, fp32, in this process."""
    return ["verify", "--problem", ref, "--impl", str(KB / impl), "--level", "quick", "--dtype", "fp32", "--jobs", "1"]


def test_kernelbench_layer_norm_passes_with_scaled_init_arguments(tmp_path, monkeypatch):
    monkeypatch.setattr(problems, "MEMORY_BUDGET", 2048 * problems.BYTES_PER_ELEMENT)  # in this process: --jobs 1
    ref = _shrunk(tmp_path, "40_LayerNorm.py", batch_size=4, features=4, dim1=8, dim2=32)
    args = _problem_args(ref, "40_LayerNorm_new.py")
    ok = runner.invoke(app, args + ["--out", str(tmp_path / "out")])
    assert ok.exit_code == 0, ok.output[-3000:]
    md = (tmp_path / "out" / "report.md").read_text()
    assert ": PASS" in md and "batch_size 4 -> 2" in md  # 4x4x8x32 ran as 2x4x8x32, LayerNorm((4, 8, 32))


def test_kernelbench_l2norm_by_the_l1_norm_fails_fast(tmp_path):
    ref = _shrunk(tmp_path, "39_L2Norm_.py", batch_size=8, dim=1000)
    args = _problem_args(ref, "39_L2Norm_l1.py")
    bad = runner.invoke(app, args + ["--out", str(tmp_path / "out")])
    assert bad.exit_code == 1, bad.output[-3000:]
    rows = json.loads((tmp_path / "out" / "results.json").read_text())["results"]
    assert rows and all(not r["passed"] for r in rows)
    assert all(
        f"retest over {FAR_SEEDS} seeds failed: cut short" in r["failures"] for r in rows
    )  # every ratio ~1e6 its limit
