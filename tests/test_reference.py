"""Any function through the standard (``tileport.reference``): a test-kit file or ``--api`` naming a torch
function that is no tileport operator; golden the function in float64 on the CPU, benchmark it in the case's
dtype; outputs that are not floating point judged by exact equality; an input the reference refuses must be
refused by the port too; the shipped example files load and run; bad files and APIs are refused by name."""

import csv
import textwrap
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from tileport.cases import CaseFileError, generate, load_suite, make_inputs, problems, spec_of
from tileport.cli import app

runner = CliRunner()
EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "atk"
PORTS = """
import torch

def my_max(input, dim, keepdim=False):
    v, i = torch.max(input.float(), dim=dim, keepdim=keepdim)
    return v.to(input.dtype), i

def first_index_max(input, dim, keepdim=False):  # right values, indices always 0
    v, i = torch.max(input, dim=dim, keepdim=keepdim)
    return v, torch.zeros_like(i)

def lenient_max(input, dim, keepdim=False):  # returns zeros where torch.max refuses (an empty reduction)
    if input.shape[dim] == 0:
        return torch.zeros(input.shape[:-1]), torch.zeros(input.shape[:-1], dtype=torch.long)
    return torch.max(input, dim=dim, keepdim=keepdim)

def my_gelu(input, approximate="none"):
    x = input.float()
    if approximate == "tanh":
        y = 0.5 * x * (1 + torch.tanh(0.7978845608028654 * (x + 0.044715 * x ** 3)))
    else:
        y = 0.5 * x * (1 + torch.erf(x * 0.7071067811865476))
    return y.to(input.dtype)

def gelu_in_dtype_tanh_always(input, approximate="none"):  # ignores approximate
    return torch.nn.functional.gelu(input, approximate="tanh")
"""


def _failed(folder: Path) -> list[dict]:
    return [r for r in csv.DictReader(open(folder / "results.csv")) if r["passed"] == "False"]


def _cli(*args):
    result = runner.invoke(app, ["verify", *map(str, args)])
    return result, " ".join(result.output.replace("│", " ").split())


def _port(example: str, dtype: str, impl: str, out):
    """verify of an example case file at the quick level with a port as --impl."""
    return _cli(
        "--cases", EXAMPLES / f"{example}.yaml", "--level", "quick", "--dtype", dtype, "--impl", impl, "--out", str(out)
    )


@pytest.fixture
def ports(tmp_path):
    (tmp_path / "ports.py").write_text(textwrap.dedent(PORTS))
    return tmp_path / "ports.py"


def test_the_example_files_load_as_references_or_operators():
    mx = load_suite(EXAMPLES / "torch_max_dim.yaml")
    assert (
        mx.reference == "torch.max"
        and [t.name for t in mx.tensors] == ["input"]
        and [a.name for a in mx.attrs] == ["dim", "keepdim"]
    )
    spec = spec_of(mx)
    assert (
        [t.name for t in spec.outputs] == ["values", "indices"]
        and spec.exact == ("indices",)
        and [g.name for g in spec.grads] == ["dinput"]
    )
    gelu = load_suite(EXAMPLES / "gelu_approximate.yaml")
    assert gelu.reference == "torch.nn.functional.gelu" and gelu.attrs[0].values == ("none", "tanh")
    assert load_suite(EXAMPLES / "rms_norm_api_names.yaml").reference is None  # a tileport operator: its backends
    assert load_suite(EXAMPLES / "l2norm.yaml").name == "l2norm"


def test_the_golden_is_the_function_in_float64_and_the_gradient_is_drawn_in_the_outputs_shape():
    s = load_suite(EXAMPLES / "torch_max_dim.yaml")
    spec = spec_of(s)
    case = next(c for c in generate(s, "quick", [torch.bfloat16]) if c.counted and len(c.shape) == 3)
    inputs = make_inputs(s, case)
    x, dim, keepdim = inputs["input"], inputs["dim"], inputs["keepdim"]
    assert inputs["dvalues"].shape == torch.max(x, dim=dim, keepdim=keepdim).values.shape and "dindices" not in inputs
    gold = spec.run_golden({k: v.double() if isinstance(v, torch.Tensor) else v for k, v in inputs.items()}, True)
    x64 = x.double().requires_grad_(True)
    want = torch.max(x64, dim=dim, keepdim=keepdim)
    (dx,) = torch.autograd.grad(want.values, x64, inputs["dvalues"].double())
    assert gold["values"].dtype == torch.float64 and torch.equal(gold["values"], want.values.detach())
    assert torch.equal(gold["indices"], want.indices) and torch.equal(gold["dinput"], dx)


def test_a_port_passes_and_wrong_indices_fail_by_exact_equality(ports, tmp_path):
    ok, text = _port("torch_max_dim", "fp16", f"{ports}:my_max", tmp_path / "ok")
    assert ok.exit_code == 0, text[-2000:]
    bad, text = _port("torch_max_dim", "fp16", f"{ports}:first_index_max", tmp_path / "bad")
    assert bad.exit_code == 1
    md = (tmp_path / "bad" / "report.md").read_text()
    assert "elements differ from the golden (exact equality" in md
    assert {r["output"] for r in _failed(tmp_path / "bad")} == {"indices"}  # the values pass: only the indices fail


def test_an_input_the_reference_refuses_must_be_refused_by_the_port(ports, tmp_path):
    bad, _ = _port("torch_max_dim", "fp32", f"{ports}:lenient_max", tmp_path / "r")
    assert bad.exit_code == 1
    assert "returned a result where the reference raised" in (tmp_path / "r" / "report.md").read_text()


def test_gelu_port_is_judged_per_approximate_class(ports, tmp_path):
    ok, text = _port("gelu_approximate", "bf16", f"{ports}:my_gelu", tmp_path / "ok")
    assert ok.exit_code == 0, text[-2000:]
    assert "dinput" in (tmp_path / "ok" / "results.csv").read_text()  # the gradient judged through the port's autograd
    bad, _ = _port("gelu_approximate", "fp32", f"{ports}:gelu_in_dtype_tanh_always", tmp_path / "bad")
    assert bad.exit_code == 1
    failed = _failed(tmp_path / "bad")
    assert failed and {r["attrs"] for r in failed} == {"approximate=none"}


@pytest.mark.parametrize("example", ["torch_max_dim", "gelu_approximate"])
def test_each_reference_example_runs_the_function_itself(example, tmp_path):
    ok, text = _cli("--cases", EXAMPLES / f"{example}.yaml", "--level", "quick", "--dtype", "fp32", "--out", tmp_path)
    assert ok.exit_code == 0, text[-2000:]
    assert "the reference" in text and "function" in (tmp_path / "results.csv").read_text()


@pytest.mark.parametrize("example", ["rms_norm_api_names", "l2norm"])
def test_each_operator_example_runs_on_tileports_backend(example, tmp_path):
    ok, text = _cli(
        "--cases",
        EXAMPLES / f"{example}.yaml",
        "--level",
        "quick",
        "--dtype",
        "fp32",
        "--backend",
        "tilelang",
        "--no-perf",
        "--out",
        tmp_path,
    )
    assert ok.exit_code == 0, text[-2000:]


def test_api_option_runs_a_torch_function_without_a_file(tmp_path):
    ok, text = _cli("--api", "torch.nn.functional.silu", "--level", "quick", "--dtype", "bf16", "--out", tmp_path)
    assert ok.exit_code == 0, text[-2000:]
    assert "torch.nn.functional.silu" in (tmp_path / "report.md").read_text()


MODULE = """
import torch

def scale_add(input, other, alpha):
    return input + alpha * other
"""
DESIGN = """
api: pytorch
name: {name}
standard: {{acc: double_bm}}
inputs:
  - name: input
    type: tensor
    dtypes: {{values: [fp32]}}
    shapes: {{dim_numbers: {{values: [2]}}}}
{more}
"""


@pytest.mark.parametrize(
    "name,more,message",
    [
        ("torch.nn.functional.no_such_gelu", "", "does not import"),
        ("refmod.scale_add", "  - {name: other, type: tensor}\n", "required parameter 'alpha' is not given"),
        (
            "refmod.scale_add",
            "  - {name: other, type: tensor}\n  - {name: beta, type: attr, ranges: {valid: {values: [1.0]}}}\n",
            "has no parameter 'beta'",
        ),
        (
            "torch.nn.functional.gelu",
            "  - {name: approx, type: attr, ranges: {valid: {values: [tanh]}}}\n",
            "refused a call",
        ),
    ],
)
def test_bad_design_files_are_refused_naming_file_and_key(tmp_path, monkeypatch, name, more, message):
    (tmp_path / "refmod.py").write_text(MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    path = tmp_path / "design.yaml"
    path.write_text(DESIGN.format(name=name, more=more))
    with pytest.raises(CaseFileError, match=message) as info:
        load_suite(path)
    assert str(path) in str(info.value)
    result, text = _cli("--cases", path, "--level", "quick", "--out", tmp_path / "out")
    assert result.exit_code == 2 and message in text


def test_api_that_does_not_import_exits_2(tmp_path):
    result, text = _cli("--api", "torch.nn.functional.no_such", "--out", tmp_path)
    assert result.exit_code == 2 and "does not import" in text


def test_a_problem_is_a_reference_suite_too(tmp_path):
    (tmp_path / "ref.py").write_text(
        "import torch\nclass Model(torch.nn.Module):\n    def forward(self, a, b):\n        return a @ b\n"
        "def get_inputs():\n    return [torch.rand(8, 16), torch.rand(16, 4)]\ndef get_init_inputs():\n    return []\n"
    )
    (tmp_path / "new.py").write_text(
        "import torch\nclass ModelNew(torch.nn.Module):\n    def forward(self, a, b):\n        return (a.double() "
        "@ "
        "b.double()).to(a.dtype)\n"
    )
    p = problems.load(str(tmp_path / "ref.py"), str(tmp_path / "new.py"))
    s = problems.suite(p)
    spec = spec_of(s)
    assert s.reference.startswith("problem:") and spec.reference and [t.name for t in spec.inputs] == ["a", "b"]
    case = generate(s, "quick", [torch.float32])[0]
    inputs = make_inputs(s, case)
    assert inputs["a"].shape == (8, 16) and inputs["b"].shape == (16, 4)  # each input its own shape
    ok, text = _cli(
        "--problem", tmp_path / "ref.py", "--impl", tmp_path / "new.py", "--level", "quick", "--out", tmp_path / "out"
    )
    assert ok.exit_code == 0, text[-2000:]
