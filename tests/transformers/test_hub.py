"""tileport as the kernel source of transformers' own mechanism: ``kernelize`` with ``hub.mapping()`` (no network)
puts tileport's operators into the layers transformers marks."""

import pytest
import torch

pytest.importorskip("transformers")
kernels = pytest.importorskip("kernels")

from tileport.backends.torch import gated_rms_norm, rms_norm
from tileport.transformers import hub, zoo


@pytest.mark.parametrize(
    ("family", "operator", "count"),
    [("llama", rms_norm, 5), ("qwen3_next", gated_rms_norm, 1)],
)
def test_kernelize_with_tileport_as_the_kernel_source(family, operator, count, monkeypatch):
    model = zoo.model(family).eval()
    tokens = torch.randint(1, 128, (2, 9), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        want = model(tokens).logits
    with kernels.use_kernel_mapping(hub.mapping(), inherit_mapping=False):
        kernels.kernelize(model, mode=kernels.Mode.INFERENCE, device="cpu")
    seen = []
    forward = operator.forward
    monkeypatch.setattr(operator, "forward", lambda *a, **k: (seen.append(1), forward(*a, **k))[1])
    monkeypatch.setenv("TILEPORT_BACKEND", "torch")
    with torch.no_grad():
        got = model(tokens).logits
    assert len(seen) == count
    torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6)
