"""An implementation whose call raises in a timed group (a wrong output shape under autograd) is reported as
not timed, with its error, and the other providers are timed; tileport's own providers are not excused."""

import pytest
import torch

from tileport.bench.run import Group, run
from tileport.external import resolve
from tileport.ops.spec import get


@pytest.fixture
def wrong_shape(tmp_path):
    f = tmp_path / "wrong.py"
    f.write_text("def l2norm(x, eps=1e-6):\n    return x[..., :-1].clone()\n")
    return resolve(get("l2norm"), f"{f}:l2norm", None)


def test_a_raising_implementation_is_named_and_not_timed(wrong_shape):
    failed = {}
    groups = [Group("fwdbwd", torch.float32, (8, 32), 1)]
    rows = run("l2norm", groups, backends=[], budget_s=0.01, compile_baseline=False, impls=(wrong_shape,), failed=failed)
    assert list(failed) == [wrong_shape.provider]
    assert "Mismatch in shape" in failed[wrong_shape.provider]
    providers = {r["provider"] for r in rows}
    assert wrong_shape.provider not in providers and {"torch-eager", "copy"} <= providers
