"""User implementations of RMSNorm, as a team's package would hold them, for `tileport verify rms_norm --impl
examples/impl/my_norms.py:FUNCTION`.

- ``rms_norm``: fp32 math rounded once, with its own backward (the formula in n = x * rstd): passes.
- ``rms_norm_autograd``: the same forward left to autograd. Its dx fails the standard's `large` value range
  in bf16/fp16: the derivative of rsqrt(mean(x^2) + eps) is (mean(x^2) + eps)^-1.5, below fp32's range for
  |x| near 1e17, so dx loses its component along x.
- ``rms_norm_low_precision_sum``: the sum of squares in the input's dtype (a common porting slip): fails.
"""

import torch


class _RMSNorm(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, eps):
        xf = x.float()
        rstd = torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
        ctx.save_for_backward(x, weight, rstd)
        y = xf * rstd
        return (y if weight is None else y * weight.float()).to(x.dtype)

    @staticmethod
    def backward(ctx, dy):
        x, weight, rstd = ctx.saved_tensors
        n, g = x.float() * rstd, dy.float()
        gw = g if weight is None else g * weight.float()
        dx = (gw - n * (gw * n).mean(-1, keepdim=True)) * rstd
        gn = g * n
        dw = None if weight is None else (gn.flatten(0, -2).sum(0) if gn.dim() > 1 else gn).to(weight.dtype)
        return dx.to(x.dtype), dw, None


def rms_norm(
    hidden_states: torch.Tensor, weight: torch.Tensor | None = None, variance_epsilon: float = 1e-6
) -> torch.Tensor:
    """HF-style parameter names; math in fp32, the output rounded once, an explicit backward."""
    return _RMSNorm.apply(hidden_states, weight, variance_epsilon)


def rms_norm_autograd(
    hidden_states: torch.Tensor, weight: torch.Tensor | None = None, variance_epsilon: float = 1e-6
) -> torch.Tensor:
    """The same forward, the backward left to autograd."""
    x = hidden_states.float()
    y = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + variance_epsilon)
    return (y if weight is None else y * weight.float()).to(hidden_states.dtype)


def rms_norm_low_precision_sum(
    input: torch.Tensor, weight: torch.Tensor | None = None, eps: float = 1e-6
) -> torch.Tensor:
    """The sum of squares in the input's dtype."""
    ms = input.pow(2).mean(-1, keepdim=True)
    y = input * torch.rsqrt(ms + eps)
    return y if weight is None else y * weight
