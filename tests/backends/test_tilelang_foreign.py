"""A user's TileLang kernel built for the C target and put through an operator's contract (``tileport verify OP
--impl FILE:KERNEL``): the fixtures of tests/readiness/tile_kernels.py, against float64."""

import csv
import math
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

pytest.importorskip("tilelang")

from tileport import external  # noqa: E402
from tileport.backends.tilelang.cpu import foreign  # noqa: E402
from tileport.cli import app  # noqa: E402
from tileport.ops.l2norm.spec import SPEC as L2NORM  # noqa: E402
from tileport.ops.swiglu.spec import SPEC as SWIGLU  # noqa: E402

KERNELS = Path(__file__).parents[1] / "readiness" / "tile_kernels.py"


def _silu_mul():
    return external.resolve(SWIGLU, f"{KERNELS}:silu_mul", {"G": "gate", "U": "up"})


def test_a_jit_kernel_takes_every_shape_from_one_symbolic_build():
    impl = _silu_mul()
    assert impl.mapping == {"G": "gate", "U": "up"}
    assert "built for the C target" in impl.signature
    g = torch.Generator().manual_seed(0)
    shapes = [(37, 50), (2, 3, 8), (), (5, 0), (1, 1)]
    for shape in shapes:
        gate, up = torch.randn(shape, generator=g), torch.randn(shape, generator=g)
        y = impl.run(SWIGLU, {"gate": gate, "up": up, "casting": "fp32"}, backward=False)["y"]
        gold = torch.nn.functional.silu(gate.double()) * up.double()
        assert y.shape == gate.shape
        assert torch.allclose(y.double(), gold, rtol=4e-7, atol=1e-30), shape
    assert [k for k in impl.fn.built if k[0] == torch.float32] == [(torch.float32, "symbolic")]


def test_non_contiguous_inputs_are_read_as_their_values():
    impl = _silu_mul()
    gate = torch.randn(64, 48).t()  # a transposed view
    up = torch.randn(48, 128)[:, ::2]  # every other column
    y = impl.fn(G=gate, U=up)
    assert torch.allclose(y.double(), torch.nn.functional.silu(gate.double()) * up.double(), rtol=4e-7)


def test_a_scalar_parameter_is_the_operators_attribute():
    impl = external.resolve(L2NORM, f"{KERNELS}:l2norm_rows")
    assert impl.mapping == {"X": "x", "eps": "eps"}
    x = torch.randn(6, 64, dtype=torch.float32)
    out = impl.run(L2NORM, {"x": x, "eps": 1e-2}, backward=False)
    gold = x.double() / (x.double().pow(2).sum(-1, keepdim=True) + 1e-2).sqrt()
    assert torch.allclose(out["y"].double(), gold, rtol=2e-6)
    assert impl.not_judged["rstd"] == "not returned by the function"


def test_bfloat16_is_refused_with_the_c_targets_reason():
    impl = _silu_mul()
    x = torch.randn(4, 8, dtype=torch.bfloat16)
    with pytest.raises(foreign.KernelBuildError, match="prints no bfloat16: verify with --dtype fp32"):
        impl.fn(G=x, U=x)


def test_a_static_prim_func_refuses_another_shape():
    import tile_kernels  # the fixture module, on sys.path (below)

    kernel = foreign.Kernel(tile_kernels.elementwise(64, 64, 32, 32, "float32"), lambda n: n in "AB", {})
    assert kernel.inputs == ["A", "B"] and kernel.outputs == [2]
    a, b = torch.randn(64, 64), torch.randn(64, 64)
    assert torch.equal(kernel(A=a, B=b), a + b)
    with pytest.raises(foreign.KernelBuildError, match="refuses the call: Static shape mismatch"):
        kernel(A=torch.randn(32, 64), B=torch.randn(32, 64))
    with pytest.raises(foreign.KernelBuildError, match="A is declared float32; the case gives torch.float16"):
        kernel(A=a.half(), B=b.half())


@pytest.fixture(autouse=True)
def _fixtures_importable(monkeypatch):
    monkeypatch.syspath_prepend(str(KERNELS.parent))


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--arg", "G=gate", "--arg", "U=up", "--arg", "block_X=4"], "the function has no parameter 'block_X'"),
        (["--arg", "G=gate", "--arg", "U=up", "--arg", "Y=up"], "the function has no parameter 'Y'"),  # its output
    ],
)
def test_a_request_the_kernel_cannot_take_is_refused(args, message):
    res = CliRunner().invoke(app, ["verify", "swiglu", "--impl", f"{KERNELS}:silu_mul", *args, "--level", "quick"])
    assert res.exit_code == 2, res.output
    assert message in " ".join(res.output.split())


def test_verify_judges_the_kernel_by_the_standard(tmp_path):
    """The fp32 cases pass the standard's limits; the cases asking the rounding the kernel lacks (casting=eager)
    fail, each saying so; the backward is listed as not tested."""
    res = CliRunner().invoke(
        app,
        [
            "verify",
            "swiglu",
            "--impl",
            f"{KERNELS}:silu_mul",
            "--arg",
            "G=gate",
            "--arg",
            "U=up",
            "--backend",
            "torch",
            "--dtype",
            "fp32",
            "--level",
            "quick",
            "--no-perf",
            "--jobs",
            "1",
            "--out",
            str(tmp_path),
        ],
    )
    assert res.exit_code == 1, res.output
    rows = [r for r in csv.DictReader((tmp_path / "results.csv").open()) if r["backend"].startswith("impl:")]
    judged = [r for r in rows if r["output"] == "y"]
    assert judged and all(r["passed"] == "True" for r in judged)
    assert all(math.isfinite(float(r["mere_ratio"])) for r in judged)
    failed = [r for r in rows if r["passed"] != "True"]
    assert failed and all("the function takes no casting" in r["failures"] for r in failed)
    assert all("casting=eager" in r["attrs"] for r in failed)
    assert "backward not tested" in (tmp_path / "report.md").read_text()


def test_a_jit_parameter_given_with_arg_builds_the_kernel_so():
    """``--arg accum_dtype=float32`` is the jit function's parameter (a build argument), not a mapped input: the
    fp32 row sum of 4096 elements rounds where the fp64 one (the default) does not."""
    narrow = external.resolve(L2NORM, f"{KERNELS}:l2norm_rows", {"accum_dtype": "float32"})
    wide = external.resolve(L2NORM, f"{KERNELS}:l2norm_rows")
    assert narrow.fn.build_args == {"accum_dtype": "float32"} and wide.fn.build_args == {}
    x = torch.rand(8, 4096, generator=torch.Generator().manual_seed(1))
    gold = x.double() / (x.double().pow(2).sum(-1, keepdim=True) + 1e-6).sqrt()
    errors = {
        name: (impl.fn(X=x, eps=1e-6).double() - gold).abs().max().item()
        for name, impl in (("narrow", narrow), ("wide", wide))
    }
    assert errors["wide"] <= 2**-24 * gold.abs().max().item() < errors["narrow"]
