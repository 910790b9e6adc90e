"""``tileport lower --impl FILE:FUNCTION --target ascend-a2``: each small kernel of kernels.py trips one known
cause and is reported with it and its fix; the clean one lowers; a package that asks for the NPU gets the
stand-in's chip; the exit status and the report files. Lowering needs triton-ascend (.ci/run's second
environment); the argument parsing and the cause table are tested everywhere."""

import json
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from tileport.backends.triton import ascend
from tileport.cli import app
from tileport.external import ImplError
from tileport.readiness import causes
from tileport.readiness.capture import parse_arg

runner = CliRunner()


def _lower(*args):
    return runner.invoke(app, ["lower", *args])


KERNELS = Path(__file__).with_name("kernels.py")


def _lower_a2(name: str, arg: str, out):
    """``tileport lower --impl kernels.py:NAME --arg ARG --target ascend-a2 --out OUT``."""
    return _lower("--impl", f"{KERNELS}:{name}", "--arg", arg, "--target", "ascend-a2", "--out", str(out))


needs_triton_ascend = pytest.mark.skipif(
    ascend.triton_ascend_version() is None,
    reason="triton-ascend is not the installed Triton here (.ci/run's second environment)",
)

# launcher -> (its argument, the cause it trips, whether the kernel still lowers, whether the check fails)
TRIPS = {
    "fp64": ("x=4096:float32", "fp64", False, True),
    "cuda_libdevice": ("x=4096:float32", "cuda-libdevice", False, True),
    "inline_asm": ("x=4096:float32", "inline-asm", True, True),
    "big_grid": ("x=2097152:float32", "grid", True, True),
    "whole_row": ("x=65536:float32", "ub", True, True),
    "warp_tuned": ("x=65536:float32", "num-warps", True, False),
    "unaligned_rows": ("x=8x4099:float16", "tail", True, False),
    "libdevice_stub": ("x=4096:float32", "libdevice-stub", False, True),
}


def test_arguments_parse_as_shapes_or_values():
    assert parse_arg("x=4096x2048:bfloat16") == ("x", ((4096, 2048), torch.bfloat16))
    assert parse_arg("t=128:int64") == ("t", ((128,), torch.int64))
    assert parse_arg("eps=1e-6") == ("eps", 1e-6)
    assert parse_arg("casting_mode=llama") == ("casting_mode", "llama")
    with pytest.raises(ImplError, match="NAME=SHAPE:DTYPE"):
        parse_arg("4096x2048")
    with pytest.raises(ImplError, match="float128"):
        parse_arg("x=4:float128")


def test_compiler_messages_match_their_cause_or_none():
    assert causes.classify("ValueError(\"Expected dtype ['bf16'] but got fp64\")").key == "fp64"
    assert (
        causes.classify("AttributeError: module 'triton.language.extra' has no attribute 'cuda'").key
        == "cuda-libdevice"
    )
    assert causes.classify("MLIRCompilationError: something no one has seen") is None
    assert {c.key for c in causes.CAUSES if not c.patterns} >= {
        "grid",
        "ub",
        "tail",
        "num-warps",
        "cores",
    }


def _quoting(src: str, line: int, error: BaseException, *callers: str):
    """The CompilationError Triton raises at ``line`` of ``src`` from ``error`` (a builtin's), under one more per
    calling JIT function in ``callers`` (outermost last), as its code generator chains them."""
    import ast

    from triton.compiler.errors import CompilationError

    exc = CompilationError(src, next(n for n in ast.walk(ast.parse(src)) if getattr(n, "lineno", 0) == line), None)
    exc.__cause__ = error
    for caller in callers:
        outer = CompilationError(caller, ast.parse(caller).body[0].body[0], repr(exc))
        outer.__cause__, exc = exc, outer
    return exc


COMMENTED = """def _k(X, Y, N, BLOCK: tl.constexpr):
    # eps pinned to fp32: an fp64 scalar would promote the sum to float64
    r = rsqrt(tl.load(X) + eps)
    tl.store(Y, r)"""


def test_causes_match_the_compilers_error_never_the_source_it_quotes():
    """The message quotes the comment above the failing line (float64); the error itself names no cause."""
    pytest.importorskip("triton")
    from tileport.backends.triton.lowering import compiler_error

    exc = _quoting(COMMENTED, 4, TypeError("cannot convert None of type <class 'NoneType'> to tensor"))
    assert "float64" in str(exc) and causes.classify(str(exc)).key == "fp64"  # what was matched before
    message, where = compiler_error(exc)
    assert message == "TypeError: cannot convert None of type <class 'NoneType'> to tensor"
    assert where == "at 4:4: tl.store(Y, r)" and causes.classify(message) is None
    caller = "def _outer(X):\n    _k(X)"
    assert compiler_error(_quoting(COMMENTED, 4, TypeError("x"), caller)) == ("TypeError: x", where)
    from triton.compiler.errors import CompilationError

    wrapped = CompilationError(COMMENTED, None, "ValueError(\"Expected dtype ['fp32'] but got fp64\")")
    assert compiler_error(wrapped) == ("ValueError: Expected dtype ['fp32'] but got fp64", "")
    assert causes.classify(compiler_error(wrapped)[0]).key == "fp64"
    assert compiler_error(AttributeError("no attribute\n 'cuda'")) == ("AttributeError: no attribute 'cuda'", "")


def test_libdevice_dispatch_stubs_are_found_through_the_kernels_calls():
    """A stub called one JIT function down is found by what the call resolves to; a backend that swaps the
    stubs' module (a GPU's) has none."""
    pytest.importorskip("triton")
    from tileport.external import import_file
    from tileport.readiness import dispatch

    kernels = import_file(KERNELS)
    assert dispatch.called_stubs(kernels._stub) == ["rsqrt (triton.language.extra.libdevice.rsqrt)"]
    assert dispatch.called_stubs(kernels._stub, {dispatch.STUBS}) == []
    assert dispatch.called_stubs(kernels._scale) == dispatch.called_stubs(kernels._erf_cuda) == []


def test_impl_needs_an_ascend_target_and_arguments(tmp_path):
    res = _lower("--impl", f"{KERNELS}:clean", "--arg", "x=64:float32", "--target", "cuda", "--out", str(tmp_path))
    assert res.exit_code == 2 and "ascend-a2 or ascend-a3" in res.output
    res = _lower("--impl", f"{KERNELS}:clean", "--target", "ascend-a2", "--out", str(tmp_path))
    assert res.exit_code == 2 and "--arg NAME=SHAPE:DTYPE" in res.output


@pytest.mark.ascend
@needs_triton_ascend
@pytest.mark.parametrize("name", sorted(TRIPS))
def test_each_kernel_is_reported_with_its_cause_and_fix(name, tmp_path):
    arg, key, lowers, fails = TRIPS[name]
    res = _lower_a2(name, arg, tmp_path)
    assert res.exit_code == (1 if fails else 0), res.output
    report = json.loads((tmp_path / "lower.json").read_text())
    (kernel,) = report["kernels"]
    assert kernel["lowered"] is lowers and kernel["ok"] is not fails
    found = {f["cause"]: f for f in kernel["findings"]}
    assert key in found, found
    assert found[key]["fix"] == causes.BY_KEY[key].fix and found[key]["fails"] is fails
    md = (tmp_path / "lower.md").read_text()
    assert md.startswith(f"# tileport lower --impl {KERNELS}:{name} --target ascend-a2: {'FAIL' if fails else 'PASS'}")
    assert causes.BY_KEY[key].fix in md
    if lowers:
        assert any(p.suffix == ".ttadapter" for p in tmp_path.iterdir())


@pytest.mark.ascend
@needs_triton_ascend
def test_an_unknown_cause_is_said_with_the_error_quoted(tmp_path):
    """The failing line follows a comment about float64: no fp64 finding; unknown, and the error quoted."""
    res = _lower_a2("commented_unknown", "x=4096:float32", tmp_path)
    assert res.exit_code == 1, res.output
    error = "ValueError: reshape() cannot change total number of elements in tensor"
    assert f"error: {error} (at 5:20: tl.store(" in res.output and "unknown: no cause" in res.output
    (kernel,) = json.loads((tmp_path / "lower.json").read_text())["kernels"]
    (finding,) = kernel["findings"]
    assert finding["cause"] == "unknown" and finding["detail"].startswith(error) and kernel["error"].startswith(error)
    assert error in (tmp_path / "lower.md").read_text()


@pytest.mark.ascend
@needs_triton_ascend
def test_a_libdevice_stub_is_named_where_its_none_fails(tmp_path):
    """The compiler stops at the store of the stub's None; the finding names the stub, not that line."""
    res = _lower_a2("libdevice_stub", "x=4096:float32", tmp_path)
    assert res.exit_code == 1, res.output
    (kernel,) = json.loads((tmp_path / "lower.json").read_text())["kernels"]
    (finding,) = kernel["findings"]
    assert finding["cause"] == "libdevice-stub" and finding["what"].startswith("rsqrt (triton.language.extra.libdevice")
    assert "tl.math.rsqrt" in res.output and "at 4:4: tl.store(Y + o, r" in finding["detail"]


@pytest.mark.ascend
@needs_triton_ascend
@pytest.mark.parametrize("target", ["ascend-a2", "ascend-a3"])
def test_a_clean_kernel_lowers_within_the_limits(target, tmp_path):
    res = _lower("--impl", f"{KERNELS}:clean", "--arg", "x=65536:float32", "--target", target, "--out", str(tmp_path))
    assert res.exit_code == 0, res.output
    report = json.loads((tmp_path / "lower.json").read_text())
    assert report["ok"] and report["arch"] == ascend.CHIPS[target].arch
    (kernel,) = report["kernels"]
    assert kernel["findings"] == [] and kernel["programs"] == 40 and kernel["ub_bytes"] <= ascend.CHIPS[target].ub_bytes


PACKAGE = """
import torch, triton, triton.language as tl

BACKEND = triton.runtime.driver.active.get_current_target().backend  # what fla asks at import
CORES = torch.npu.get_device_properties(0).vector_core_num if BACKEND == "npu" else 1024


@triton.jit
def _copy(X, Y, N, BLOCK: tl.constexpr):
    for blk in range(tl.program_id(0), tl.cdiv(N, BLOCK), tl.num_programs(0)):
        o = blk * BLOCK + tl.arange(0, BLOCK)
        tl.store(Y + o, tl.load(X + o, mask=o < N), mask=o < N)


def copy(x):
    y = torch.empty_like(x)
    _copy[(CORES,)](x, y, x.numel(), BLOCK=2048)
    return y
"""


@pytest.mark.ascend
@needs_triton_ascend
def test_a_package_that_asks_for_the_npu_takes_its_path(tmp_path):
    """Its import asks Triton's driver and torch.npu (which raise without an NPU): the stand-in answers as A3."""
    (tmp_path / "pkg.py").write_text(PACKAGE)
    res = _lower(
        "--impl",
        f"{tmp_path / 'pkg.py'}:copy",
        "--arg",
        "x=1048576:bfloat16",
        "--target",
        "ascend-a3",
        "--out",
        str(tmp_path / "out"),
    )
    assert res.exit_code == 0, res.output
    report = json.loads((tmp_path / "out" / "lower.json").read_text())
    assert "triton driver: target" in report["path"] and "torch.npu.get_device_properties" in report["path"]
    assert report["kernels"][0]["programs"] == ascend.CHIPS["ascend-a3"].vector_cores
    assert not hasattr(torch, "npu") or torch.npu is not None  # restored: no stand-in left behind
    import sys

    assert "torch_npu" not in sys.modules


@pytest.mark.ascend
@needs_triton_ascend
def test_autograd_function_apply_captures_the_backward(tmp_path):
    (tmp_path / "fn.py").write_text(
        PACKAGE
        + """

class Copy(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, scale=1.0):
        return copy(x)

    @staticmethod
    def backward(ctx, g):
        return copy(g), None
"""
    )
    res = _lower(
        "--impl",
        f"{tmp_path / 'fn.py'}:Copy.apply",
        "--arg",
        "x=4096:float32",
        "--target",
        "ascend-a2",
        "--out",
        str(tmp_path / "out"),
    )
    assert res.exit_code == 0, res.output
    report = json.loads((tmp_path / "out" / "lower.json").read_text())
    assert report["backward"] == "captured" and report["arguments"] == {"x": "4096:float32"}


PROBLEM = """
import torch


class Model(torch.nn.Module):
    def forward(self, x):
        return x * 2


def get_inputs():
    return [torch.randn(64, 1024)]


def get_init_inputs():
    return []
"""


@pytest.mark.ascend
@needs_triton_ascend
def test_inputs_from_a_problem_or_a_case_file(tmp_path):
    (tmp_path / "problem.py").write_text(PROBLEM)
    res = _lower(
        "--impl",
        f"{KERNELS}:clean",
        "--problem",
        str(tmp_path / "problem.py"),
        "--target",
        "ascend-a2",
        "--out",
        str(tmp_path / "p"),
    )
    assert res.exit_code == 0, res.output
    assert json.loads((tmp_path / "p" / "lower.json").read_text())["arguments"] == {"input 0": "64x1024:float32"}
    suite = Path(__file__).resolve().parents[2] / "tileport" / "cases" / "suites" / "l2norm.yaml"
    res = _lower(
        "l2norm",
        "--impl",
        f"{KERNELS}:clean",
        "--cases",
        str(suite),
        "--target",
        "ascend-a2",
        "--out",
        str(tmp_path / "c"),
    )
    assert res.exit_code == 0, res.output
    report = json.loads((tmp_path / "c" / "lower.json").read_text())
    assert report["kernels"] and all(k["ok"] for k in report["kernels"])


@pytest.mark.ascend
@needs_triton_ascend
def test_a_backward_that_raises_fails_the_check(tmp_path):
    """fla's Ascend layer norm refuses D = 2048 in its backward: the forward's kernels lowering is no PASS."""
    (tmp_path / "fn.py").write_text(
        PACKAGE
        + """

class Refusing(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return copy(x)

    @staticmethod
    def backward(ctx, g):
        raise RuntimeError("feature dim exceeds the UB-safe block size")
"""
    )
    res = _lower(
        "--impl",
        f"{tmp_path / 'fn.py'}:Refusing.apply",
        "--arg",
        "x=4096:float32",
        "--target",
        "ascend-a2",
        "--out",
        str(tmp_path / "out"),
    )
    assert res.exit_code == 1, res.output
    md = (tmp_path / "out" / "lower.md").read_text()
    assert "FAIL: 1 kernels lower, but the backward stopped: RuntimeError: feature dim exceeds" in md.splitlines()[0]
