"""rms_norm rejects bad input with a TypeError/ValueError naming the argument."""

import math

import pytest
import torch

import tileport

X = torch.randn(4, 16)


@pytest.mark.parametrize(
    "kwargs, error, message",
    [
        ({"x": torch.ones(4, 16, dtype=torch.int32)}, TypeError, "x must have a floating dtype"),
        ({"weight": torch.ones(15)}, ValueError, r"weight must have shape x.shape\[-1:\] = \(16,\), got \(15,\)"),
        ({"weight": torch.ones(4, 16)}, ValueError, "weight must have shape"),
        ({"weight": torch.ones(16, dtype=torch.int64)}, TypeError, "weight must have a floating dtype"),
        ({"weight": torch.ones(16, device="meta")}, ValueError, "weight must be on x's device"),
        ({"weight": [1.0] * 16}, TypeError, "weight must be None or a torch.Tensor"),
        ({"eps": -1e-6}, ValueError, "eps must be finite and >= 0"),
        ({"eps": math.nan}, ValueError, "eps must be finite and >= 0"),
        ({"eps": math.inf}, ValueError, "eps must be finite and >= 0"),
        ({"eps": "small"}, TypeError, "eps must be a real number"),
        ({"offset": math.inf}, ValueError, "offset must be finite"),
        ({"casting": "gemma"}, ValueError, "casting must be one of 'fp32', 'llama'"),
        ({"output_dtype": torch.int8}, TypeError, "output_dtype must be None or a floating torch.dtype"),
    ],
)
def test_forward_errors_name_the_argument(kwargs, error, message):
    args = {"x": X, "weight": torch.ones(16)} | kwargs
    for fn in (tileport.rms_norm, tileport.rms_norm_fwd):
        with pytest.raises(error, match=message):
            fn(**args)


def test_backward_errors_name_the_argument():
    _, rstd = tileport.rms_norm_fwd(X)
    dy = torch.randn(4, 16)
    with pytest.raises(ValueError, match=r"dy must have x's shape \(4, 16\), got \(4, 15\)"):
        tileport.rms_norm_bwd(X, rstd, torch.randn(4, 15))
    with pytest.raises(TypeError, match="dy must have a floating dtype"):
        tileport.rms_norm_bwd(X, rstd, dy.int())
    with pytest.raises(ValueError, match=r"rstd must have shape x.shape\[:-1\] = \(4,\), got \(5,\)"):
        tileport.rms_norm_bwd(X, torch.ones(5), dy)
    with pytest.raises(TypeError, match="rstd must be a floating torch.Tensor"):
        tileport.rms_norm_bwd(X, torch.ones(4, dtype=torch.int32), dy)
    with pytest.raises(ValueError, match="weight must have shape"):
        tileport.rms_norm_bwd(X, rstd, dy, torch.ones(3))


def test_out_must_match():
    with pytest.raises(ValueError, match=r"out\[1\] \(rstd\) must be torch.float32 of shape \(4,\)"):
        tileport.rms_norm_fwd(X, out=(torch.empty(4, 16), torch.empty(3)))
