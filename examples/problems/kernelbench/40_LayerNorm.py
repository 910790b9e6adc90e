"""KernelBench level 1, problem 40 (layer normalization), restated for tileport: ``Model`` is an ``nn.LayerNorm``
over the last three dimensions. ``features``, ``dim1`` and ``dim2`` size both the input (``get_inputs``) and the
normalized shape (``get_init_inputs``): a scaled-down run must scale them together."""

import torch
import torch.nn as nn


class Model(nn.Module):
    """nn.LayerNorm(normalized_shape) of x."""

    def __init__(self, normalized_shape: tuple):
        super().__init__()
        self.ln = nn.LayerNorm(normalized_shape=normalized_shape)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.ln(x)


batch_size = 16
features = 64
dim1 = 256
dim2 = 256


def get_inputs():
    x = torch.rand(batch_size, features, dim1, dim2)
    return [x]


def get_init_inputs():
    return [(features, dim1, dim2)]
