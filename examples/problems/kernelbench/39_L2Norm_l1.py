"""A wrong candidate for ``39_L2Norm_.py``: it normalizes by the L1 norm, not the L2 norm (fails by orders of
magnitude)."""

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x / x.abs().sum(dim=1, keepdim=True)
