"""Run one case on a backend, on the benchmark and on the golden, through the suite's adapter."""

from __future__ import annotations

import importlib
from typing import Any

import torch

from .schema import DTYPES, Suite


def adapter_for(suite: Suite):
    try:
        return importlib.import_module(suite.adapter)
    except ImportError as exc:
        raise ValueError(f"{suite.file}: key 'adapter': cannot import {suite.adapter!r}: {exc}") from exc


def golden_inputs(suite: Suite, inputs: dict[str, Any]) -> dict[str, Any]:
    """The inputs in the golden's dtype (float64 by the standard): floating tensors upcast, the rest as is."""
    gd = DTYPES[suite.standard.get("golden", "float64")]
    return {k: v.to(gd) if isinstance(v, torch.Tensor) and v.is_floating_point() else v for k, v in inputs.items()}
