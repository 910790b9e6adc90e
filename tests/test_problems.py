"""``verify --problem ref.py --impl new.py``: a KernelBench-style candidate judged against its reference by the
standard (golden: Model in float64; benchmark: Model in the case's dtype), shapes too large for a worker
generalized down and said so, inputs that are not floating point passed as given, bad files refused."""

import textwrap

import pytest
from typer.testing import CliRunner

from tileport.cli import app
from tileport.problems import MAX_ELEMENTS, ProblemError, generalize, load

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
    return runner.invoke(app, ["verify", "--problem", ref, "--impl", impl, "--level", "quick", "--dtype", "bf16", "--out", str(out)])


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
    ref, new = _files(tmp_path, REF.replace("torch.rand(8, 64)", "torch.rand(4096, 393216)").replace("return [64]", "return [393216]"))
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
