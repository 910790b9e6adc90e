"""``--impl``: a user's implementation verified and timed against an operator's contract: resolved once, its
parameters mapped by name (with users' aliases), what it does not return listed, its backward judged through
its own autograd graph; bad targets and signatures refused by name."""

import json
import textwrap

import pytest
import torch
from typer.testing import CliRunner

from tileport.bench import csvfile
from tileport.cli import app
from tileport.external import ImplCaseError, ImplError, resolve
from tileport.ops.catalog import get

runner = CliRunner()
NORMS = "examples/impl/my_norms.py"


def _module(tmp_path, body: str) -> str:
    path = tmp_path / "user_ops.py"
    path.write_text("import torch\n\n" + textwrap.dedent(body))
    return str(path)


def test_parameters_map_by_name_with_users_aliases():
    impl = resolve(get("rms_norm"), f"{NORMS}:rms_norm")
    assert impl.mapping == {"hidden_states": "x", "weight": "weight", "variance_epsilon": "eps"}
    assert "hidden_states" in impl.signature and impl.file.endswith("my_norms.py")


def test_normalized_shape_is_derived_and_arg_maps_by_hand(tmp_path):
    path = _module(
        tmp_path,
        """
        def ln(inp, normalized_shape, gamma=None, beta=None, epsilon=1e-5):
            return torch.nn.functional.layer_norm(inp, normalized_shape, gamma, beta, epsilon)

        def odd(data, eps=1e-6):
            return data * torch.rsqrt(data.float().pow(2).sum(-1, keepdim=True) + eps)
    """,
    )
    impl = resolve(get("layer_norm"), f"{path}:ln")
    assert impl.mapping == {
        "inp": "x",
        "normalized_shape": "normalized_shape",
        "gamma": "weight",
        "beta": "bias",
        "epsilon": "eps",
    }
    x = torch.randn(4, 8)
    out = impl.run(get("layer_norm"), {"x": x, "weight": None, "bias": None, "eps": 1e-5}, False)
    torch.testing.assert_close(out["y"], torch.nn.functional.layer_norm(x, (8,)))
    assert impl.not_judged == {"mean": "not returned by the function", "rstd": "not returned by the function"}
    with pytest.raises(
        ImplError,
        match=r"parameter 'data' maps to nothing in l2norm's contract; it could be one of x, eps \(--arg data=NAME\)",
    ):
        resolve(get("l2norm"), f"{path}:odd")
    assert resolve(get("l2norm"), f"{path}:odd", ["data=x"]).mapping == {"data": "x", "eps": "eps"}


@pytest.mark.parametrize(
    "target,message",
    [
        ("no_colon", "expected MODULE:FUNCTION or path/to/file.py:FUNCTION"),
        ("no/such/file.py:f", "no file"),
        ("no_such_module_xyz:f", "module 'no_such_module_xyz' does not import"),
        (f"{NORMS}:nope", "has no 'nope'"),
    ],
)
def test_a_target_that_does_not_resolve_is_refused_by_name(target, message):
    with pytest.raises(ImplError, match=message):
        resolve(get("rms_norm"), target)


def test_bad_arg_overrides_are_refused(tmp_path):
    with pytest.raises(ImplError, match="the function has no parameter 'nope'"):
        resolve(get("rms_norm"), f"{NORMS}:rms_norm", ["nope=x"])
    with pytest.raises(ImplError, match="'gate' is not an input or attribute of rms_norm"):
        resolve(get("rms_norm"), f"{NORMS}:rms_norm", ["weight=gate"])
    with pytest.raises(ImplError, match="expected NAME=INPUT"):
        resolve(get("rms_norm"), f"{NORMS}:rms_norm", ["weight"])


def test_a_case_it_cannot_take_and_a_result_that_does_not_fit_fail_that_case(tmp_path):
    path = _module(
        tmp_path,
        """
        def no_weight(x, eps=1e-6):
            return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)

        def wrong_shape(x, weight=None, eps=1e-6):
            return x[:, :1]
    """,
    )
    spec = get("rms_norm")
    x = torch.randn(3, 8)
    with pytest.raises(ImplCaseError, match="the function takes no weight"):
        resolve(spec, f"{path}:no_weight").run(spec, {"x": x, "weight": torch.ones(8), "eps": 1e-6}, False)
    with pytest.raises(ImplCaseError, match=r"returned y of shape \(3, 1\), expected \(3, 8\)"):
        resolve(spec, f"{path}:wrong_shape").run(spec, {"x": x, "weight": None, "eps": 1e-6}, False)


def test_gradients_are_judged_through_autograd_or_listed_as_not_tested(tmp_path):
    path = _module(
        tmp_path,
        """
        def detached(x, weight=None, eps=1e-6):
            with torch.no_grad():
                return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    """,
    )
    spec = get("rms_norm")
    x, dy, w = torch.randn(3, 8), torch.randn(3, 8), torch.randn(8)
    good = resolve(spec, f"{NORMS}:rms_norm").run(spec, {"x": x, "weight": w, "eps": 1e-6, "dy": dy}, True)
    want = spec.run({"x": x.double(), "weight": w.double(), "eps": 1e-6, "dy": dy.double()}, "torch", True)
    torch.testing.assert_close(good["dx"].double(), want["dx"], rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(good["dweight"].double(), want["dweight"], rtol=1e-4, atol=1e-5)
    impl = resolve(spec, f"{path}:detached")
    out = impl.run(spec, {"x": x, "weight": None, "eps": 1e-6, "dy": dy}, True)
    assert set(out) == {"y"} and "backward not tested" in impl.not_judged["dx"]


def _verify(target, out, *more):
    return runner.invoke(
        app,
        [
            "verify",
            "rms_norm",
            "--impl",
            target,
            "--level",
            "quick",
            "--dtype",
            "bf16",
            "--backend",
            "torch",
            "--no-perf",
            "--out",
            str(out),
            *more,
        ],
    )


def test_verify_passes_an_fp32_implementation_and_fails_a_low_precision_sum(tmp_path):
    ok = _verify(f"{NORMS}:rms_norm", tmp_path / "ok")
    assert ok.exit_code == 0, ok.output[-3000:]
    results = json.loads((tmp_path / "ok" / "results.json").read_text())
    env = results["environment"]
    assert any(k.startswith("impl ") and "rms_norm(hidden_states" in v and "my_norms.py" in v for k, v in env.items())
    md = (tmp_path / "ok" / "report.md").read_text()
    assert "impl:" in md and "rstd | " in md and "not returned by the function" in md
    bad = _verify(f"{NORMS}:rms_norm_low_precision_sum", tmp_path / "bad")
    assert bad.exit_code == 1
    assert "impl:examples/impl/my_norms.py:rms_norm_low_precision_sum" in (tmp_path / "bad" / "report.md").read_text()


def test_verify_refuses_a_bad_impl_before_any_case(tmp_path):
    result = _verify(f"{NORMS}:nope", tmp_path / "r")
    assert result.exit_code == 2 and "has no 'nope'" in " ".join(result.output.replace("│", " ").split())
    assert not (tmp_path / "r" / "journal.bin").exists()


def test_bench_times_the_implementation_beside_the_backends(tmp_path):
    args = [
        "bench",
        "rms_norm",
        "--impl",
        f"{NORMS}:rms_norm",
        "--shape",
        "33x100",
        "--dtype",
        "fp32",
        "--threads",
        "1",
        "--mode",
        "fwd",
        "--no-compile",
        "--budget",
        "0.05",
        "--out",
        str(tmp_path),
    ]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    providers = {r["provider"] for r in csvfile.read(tmp_path / "bench.csv")}
    assert f"impl:{NORMS}:rms_norm" in providers and "torch-eager" in providers


def test_a_function_taking_out_gets_nan_filled_outputs(tmp_path):
    """Where the function accepts ``out=``, it is given NaN-filled outputs (the standard's section 3): an element
    it never writes stays NaN and fails, instead of passing by luck."""
    path = _module(
        tmp_path,
        """
        def partial(x, weight=None, eps=1e-6, out=None):
            y = x * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + eps)
            out[..., :-1].copy_(y[..., :-1])  # forgets the last column
            return out
    """,
    )
    spec = get("rms_norm")
    out = resolve(spec, f"{path}:partial").run(spec, {"x": torch.randn(3, 8), "weight": None, "eps": 1e-6}, False)
    assert torch.isnan(out["y"][:, -1]).all() and torch.isfinite(out["y"][:, :-1]).all()


def test_verify_times_the_implementation_too(tmp_path):
    result = runner.invoke(
        app,
        [
            "verify",
            "l2norm",
            "--impl",
            f"{tmp_path_module(tmp_path)}:l2",
            "--level",
            "quick",
            "--dtype",
            "fp32",
            "--backend",
            "torch",
            "--out",
            str(tmp_path / "v"),
        ],
    )
    assert result.exit_code in (0, 1), result.output[
        -3000:
    ]  # its plain autograd dx fails the large range: judged, not the point
    perf = json.loads((tmp_path / "v" / "results.json").read_text())["performance"]
    assert any(r["provider"].startswith("impl:") and r["mode"] == "fwdbwd" for r in perf)


def tmp_path_module(tmp_path):
    return _module(
        tmp_path,
        """
        def l2(input, eps=1e-6):
            x = input.float()
            return (x * torch.rsqrt(x.pow(2).sum(-1, keepdim=True) + eps)).to(input.dtype)
    """,
    )
