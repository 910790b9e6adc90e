"""layer_norm rejects bad input with a TypeError/ValueError naming the argument."""

import math

import pytest
import torch

import tileport

X = torch.randn(4, 16)


@pytest.mark.parametrize(
    "kwargs, error, message",
    [
        ({"x": torch.ones(4, 16, dtype=torch.int32)}, TypeError, "x must have a floating dtype"),
        ({"x": torch.tensor(1.0)}, ValueError, "x must have at least 1 dimension"),
        ({"weight": torch.ones(15)}, ValueError, r"weight must have shape x.shape\[-1:\] = \(16,\), got \(15,\)"),
        ({"bias": torch.ones(4, 16)}, ValueError, r"bias must have shape x.shape\[-1:\] = \(16,\), got \(4, 16\)"),
        ({"bias": torch.ones(16, dtype=torch.int64)}, TypeError, "bias must have a floating dtype"),
        ({"weight": torch.ones(16, device="meta")}, ValueError, "weight must be on x's device"),
        ({"bias": [0.0] * 16}, TypeError, "bias must be None or a torch.Tensor"),
        ({"eps": -1e-6}, ValueError, "eps must be finite and >= 0"),
        ({"eps": math.nan}, ValueError, "eps must be finite and >= 0"),
        ({"eps": "small"}, TypeError, "eps must be a real number"),
        ({"output_dtype": torch.int8}, TypeError, "output_dtype must be None or a floating torch.dtype"),
    ],
)
def test_forward_errors_name_the_argument(kwargs, error, message):
    args = {"x": X, "weight": torch.ones(16), "bias": torch.zeros(16)} | kwargs
    for fn in (tileport.layer_norm, tileport.layer_norm_fwd):
        with pytest.raises(error, match=message):
            fn(**args)


def test_backward_errors_name_the_argument():
    _, mean, rstd = tileport.layer_norm_fwd(X)
    dy = torch.randn(4, 16)
    with pytest.raises(ValueError, match=r"dy must have x's shape \(4, 16\), got \(4, 15\)"):
        tileport.layer_norm_bwd(X, mean, rstd, torch.randn(4, 15))
    with pytest.raises(ValueError, match=r"mean must have shape x.shape\[:-1\] = \(4,\), got \(5,\)"):
        tileport.layer_norm_bwd(X, torch.ones(5), rstd, dy)
    with pytest.raises(TypeError, match="rstd must be a floating torch.Tensor"):
        tileport.layer_norm_bwd(X, mean, torch.ones(4, dtype=torch.int32), dy)
    with pytest.raises(ValueError, match="bias must have shape"):
        tileport.layer_norm_bwd(X, mean, rstd, dy, bias=torch.ones(3))


def test_out_must_match():
    with pytest.raises(ValueError, match=r"out\[1\] \(mean\) must be torch.float32 of shape \(4,\)"):
        tileport.layer_norm_fwd(X, out=(torch.empty(4, 16), torch.empty(3), torch.empty(4)))
    with pytest.raises(TypeError, match=r"out must be a \(y, mean, rstd\) triple"):
        tileport.layer_norm_fwd(X, out=(torch.empty(4, 16), torch.empty(4)))


def test_module_refuses_input_of_the_wrong_trailing_shape():
    with pytest.raises(ValueError, match=r"LayerNorm over \(64,\) expects input of shape \[\*, 64\], got \(2, 32\)"):
        tileport.LayerNorm(64)(torch.randn(2, 32))
