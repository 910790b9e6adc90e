"""An implementation whose call raises in a timed group is reported as not timed, with its error, and the other
providers are timed; tileport's own providers are not excused. (A wrong output shape no longer raises here: each
output gets a gradient in its own shape; verify judges the shape.)"""

import pytest
import torch

from tileport.bench.run import Group, run
from tileport.external import resolve
from tileport.ops.catalog import get
from tileport.providers import Implementation


@pytest.fixture
def raising(tmp_path):
    f = tmp_path / "wrong.py"
    f.write_text("def l2norm(x, eps=1e-6):\n    raise RuntimeError(f'no kernel for {tuple(x.shape)}')\n")
    return resolve(get("l2norm"), f"{f}:l2norm", None)


def test_a_raising_implementation_is_named_and_not_timed(raising):
    failed = {}
    groups = [Group("fwdbwd", torch.float32, (8, 32), 1)]
    rows = run("l2norm", groups, [Implementation(raising)], budget_s=0.01, compile_baseline=False, failed=failed)
    assert list(failed) == [raising.provider]
    assert failed[raising.provider] == "RuntimeError: no kernel for (8, 32)"
    providers = {r["provider"] for r in rows}
    assert raising.provider not in providers and {"torch-eager", "copy"} <= providers
