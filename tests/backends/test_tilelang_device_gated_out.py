"""The TileLang device backends' (CUDA, Ascend) swiglu and geglu forwards with ``out=``, their launch stood in by a
runner that writes a known value: the preallocated y is what the kernel writes into and what is returned."""

import pytest
import torch

pytest.importorskip("tilelang")

from tileport.backends.tilelang import gated  # noqa: E402


class Runner:
    """Runs every kernel as ``out = gate * up`` over the flat tensors it is given."""

    def kernel(self, op, builder, *args):
        def launch(gate, up, y):
            y.copy_(gate * up)

        return launch


@pytest.mark.parametrize("entries", [gated.swiglu_entries, gated.geglu_entries])
def test_forward_writes_into_out(entries):
    args = (None, None, Runner(), "a stand-in") + ((None,) if entries is gated.geglu_entries else ())
    _, forward, _ = entries(*args)
    gate, up = torch.randn(3, 5), torch.randn(3, 5)
    y = torch.full((3, 5), float("nan"))
    assert forward(gate, up, out=y) is y and torch.equal(y, gate * up)
    fresh = forward(gate, up)
    assert fresh.shape == (3, 5) and torch.equal(fresh, gate * up)
