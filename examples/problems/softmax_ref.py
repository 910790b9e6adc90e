"""A KernelBench-style problem (written for tileport, after the public level-1 softmax problem's convention):
``Model`` is the reference, ``get_inputs()`` draws its inputs, ``get_init_inputs()`` its constructor's."""

import torch

batch_size = 4096
dim = 393216  # 1.6e9 elements: tileport runs it generalized down to what a worker here holds


class Model(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(x, dim=1)


def get_inputs():
    return [torch.rand(batch_size, dim)]


def get_init_inputs():
    return []
