"""Dtype names: every spelling users type (``fp32``, ``float32``, ``torch.float32``, ``half``, ``bf16``,
``bfloat16``) is accepted everywhere; one spelling is printed (torch's, without ``torch.``: ``bfloat16``)."""

from __future__ import annotations

import torch

CANONICAL = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16, "float64": torch.float64}
ALIASES = {
    "fp32": "float32",
    "float": "float32",
    "fp16": "float16",
    "half": "float16",
    "bf16": "bfloat16",
    "fp64": "float64",
    "double": "float64",
}


def parse(text: str) -> torch.dtype:
    """The torch dtype of any accepted spelling; ValueError listing them otherwise."""
    key = str(text).strip().lower().removeprefix("torch.")
    key = ALIASES.get(key, key)
    if key not in CANONICAL:
        names = ", ".join(f"{a}/{c}" for a, c in ALIASES.items() if c in CANONICAL and a.startswith(("fp", "bf")))
        raise ValueError(f"unknown dtype {text!r}; choose from {names}")
    return CANONICAL[key]


def name(dtype: torch.dtype) -> str:
    """The printed spelling: ``float32``, ``float16``, ``bfloat16``, ``float64``."""
    return str(dtype).removeprefix("torch.")


def normalize(text: str) -> str:
    """Any accepted spelling as the printed one (rows written before one spelling was chosen say ``bf16``)."""
    return name(parse(text))


def stat_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype of the math and of saved per-row statistics for inputs of ``dtype``: fp32 for 16-bit and fp32
    inputs, fp64 for fp64 (the golden keeps its precision)."""
    return torch.float64 if dtype == torch.float64 else torch.float32
