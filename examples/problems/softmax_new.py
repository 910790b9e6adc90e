"""Candidates for ``softmax_ref.py``: ``ModelNew`` on tileport's fused softmax (passes); ``ModelNaive`` with the
max not subtracted and the sum in the input's dtype (fails)."""

import torch

import tileport


class ModelNew(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return tileport.softmax(x, dim=1)


class ModelNaive(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        e = torch.exp(x)
        return e / e.sum(dim=1, keepdim=True)
