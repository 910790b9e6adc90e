"""L2's model cases (clause 2: generalized : model = 2 : 1): rows of the activations a small decoder
transformer gives an operator, captured once by ``scripts/capture_model_cases.py`` and shipped in
``cases/models/<config>.pt`` (bfloat16; the script's docstring says what the model is and is not).

An operator's spec maps its inputs to the captured sites (``model_sites``: x -> ``hidden``, weight ->
``hidden_weight``, dy -> ``hidden_grad``, ...); a case takes one capture of every mapped site at the same
index and a slice of its rows, so x, its weight and its gradient come from the same place in the model.
"""

from __future__ import annotations

import math
from functools import cache
from pathlib import Path

import numpy as np
import torch

MODELS = Path(__file__).with_name("models")


@cache
def pool(config: str) -> dict[str, torch.Tensor]:
    """The captured sites of one model configuration."""
    return torch.load(MODELS / f"{config}.pt", weights_only=True)["sites"]


def configs() -> list[str]:
    return sorted(p.stem for p in MODELS.glob("*.pt"))


def draw(rng: np.random.Generator, sites: dict[str, str], primary: str) -> tuple[str, int, int, int, tuple[int, ...]]:
    """(config, capture index, first row, rows, shape) of one model case: a log-uniform number of rows."""
    config = configs()[int(rng.integers(len(configs())))]
    captured = pool(config)[sites[primary]]
    index = int(rng.integers(captured.shape[0]))
    total, width = captured.shape[1], captured.shape[2]
    rows = max(1, min(total, int(math.exp(rng.uniform(0.0, math.log(total + 1))))))
    start = int(rng.integers(0, total - rows + 1))
    return config, index, start, rows, (rows, width)


def values(config: str, site: str, index: int, start: int, rows: int) -> torch.Tensor:
    """The captured values (float32) of one site: a row slice, or the whole [D] vector of a weight site."""
    t = pool(config)[site][index].float()
    return t if t.dim() == 1 else t[start : start + rows].clone()
