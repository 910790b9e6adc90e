"""The README's Python tour runs as written, each block in a fresh namespace: every name it uses it defines."""

import re
from pathlib import Path

import torch

from tileport.transformers import patched, unpatch

ROOT = Path(__file__).resolve().parents[2]


def _python_blocks(text: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", text, flags=re.S)


def test_the_python_tour_runs_as_written():
    blocks = _python_blocks((ROOT / "README.md").read_text())
    assert blocks, "the README has no Python tour"
    spaces = []
    for code in blocks:
        spaces.append({})
        exec(compile(code, "README.md", "exec"), spaces[-1])  # noqa: S102 (the README's own code)
    namespace = next(ns for ns in spaces if "layer" in ns)  # the operators' block
    x, weight, y = namespace["x"], namespace["weight"], namespace["y"]
    golden = x.double() * torch.rsqrt(x.double().pow(2).mean(-1, keepdim=True) + 1e-6) * weight.double()
    torch.testing.assert_close(y.double(), golden, rtol=1e-5, atol=1e-6)
    assert x.grad is not None and weight.grad is not None
    assert namespace["layer"].eps == 1e-6
    model = next(ns for ns in spaces if "model" in ns)["model"]  # the model block: its sites replaced
    assert patched(model) and "forward" in vars(model.model.norm)  # replaced on the instance
    unpatch(model)  # the rotary global back as it was
