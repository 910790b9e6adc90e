"""KernelBench level 1, problem 39 (L2 normalization), restated for tileport: ``Model`` divides each row by its
L2 norm over dim 1. The sizes are module constants read by ``get_inputs()``, as in KernelBench; at 32768 x 65535
(2.1e9 elements) tileport runs it scaled down, and the report says to what."""

import torch
import torch.nn as nn


class Model(nn.Module):
    """x / ||x||_2 over dim 1."""

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x / torch.norm(x, p=2, dim=1, keepdim=True)


batch_size = 32768
dim = 65535  # the total stays below 2^31 elements


def get_inputs():
    x = torch.rand(batch_size, dim)
    return [x]


def get_init_inputs():
    return []
