"""The bench's autograd harness differentiates only the differentiable inputs and gives each output a gradient
in its own shape (issue 38: a loss or a rotated q beside k broke it with shape and unused-input errors)."""

import torch

from tileport.bench.providers import group_inputs
from tileport.ops.catalog import get
from tileport.providers.timed import in_mode, output_grads


def _rope_like(x, cos):
    """Two outputs of other shapes than x: a per-row sum and a rotated half (cos is a table, not differentiated)."""
    half = x[..., : x.shape[-1] // 2]
    return x.pow(2).sum(-1), half * cos


def test_outputs_of_their_own_shapes_get_gradients_of_those_shapes():
    g = torch.Generator().manual_seed(0)
    x, cos = torch.randn(4, 3, 8, generator=g), torch.randn(3, 4, generator=g)
    dy = torch.randn(4, 3, 8, generator=g)
    call = in_mode(_rope_like, {"x": x, "cos": cos}, dy, "fwdbwd", ["x"])
    (dx,) = call()
    s, r = output_grads(_rope_like(x, cos), dy)
    assert s.shape == (4, 3) and r.shape == (4, 3, 4)
    want = 2 * x * s[..., None]
    want[..., :4] += r * cos
    torch.testing.assert_close(dx, want)
    (again,) = call()  # the gradients are drawn once: the same on every call
    assert torch.equal(dx, again)


def test_an_output_of_the_inputs_shape_keeps_the_groups_dy():
    dy = torch.randn(2, 5)
    (kept,) = output_grads((torch.empty(2, 5),), dy)
    assert kept is dy


def test_only_inputs_with_a_gradient_in_the_spec_are_differentiated():
    spec = get("rms_norm")
    inputs, dy, grads = group_inputs(spec, (4, 8), torch.float32)
    assert grads == ["x", "weight"] and dy.shape == (4, 8)
