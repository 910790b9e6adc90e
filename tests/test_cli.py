from typer.testing import CliRunner

from tileport.cli import app

runner = CliRunner()


def test_backends_lists_each_backend():
    result = runner.invoke(app, ["backends"])
    assert result.exit_code == 0, result.output
    assert "tilelang" in result.output and "torch" in result.output


def test_verify_l2norm_passes_one_dtype():
    result = runner.invoke(app, ["verify", "l2norm", "--dtype", "bf16"])
    assert result.exit_code == 0, result.output
    assert "all 21 checks passed at L0" in result.output


def test_verify_on_forced_torch_backend():
    result = runner.invoke(app, ["verify", "l2norm", "--dtype", "fp32", "--backend", "torch"])
    assert result.exit_code == 0, result.output


def test_verify_rejects_unknown_operator_and_dtype():
    result = runner.invoke(app, ["verify", "softmax"])
    assert result.exit_code == 2 and "unknown operator 'softmax'" in result.output
    result = runner.invoke(app, ["verify", "l2norm", "--dtype", "int8"])
    assert result.exit_code == 2 and "unknown dtype 'int8'" in result.output


def test_verify_exits_non_zero_on_failure(monkeypatch):
    import tileport.verify as verify_mod

    real = verify_mod.compare

    def failing(*args, **kwargs):  # a backend whose every output is judged against a far better benchmark
        a, g, b = args[:3]
        return real(a + 1.0, g, b, **kwargs)

    monkeypatch.setattr(verify_mod, "compare", failing)
    result = runner.invoke(app, ["verify", "l2norm", "--dtype", "fp16"])
    assert result.exit_code == 1 and "checks failed" in result.output
