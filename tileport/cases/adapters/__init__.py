"""Adapters map a case's inputs to an operator's public API (ATK's executor role), one module per operator.

Each module provides ``run(inputs, backend, backward) -> {output name: tensor}`` and
``precision_dtype(output, dtype)``: the dtype whose small-value rule applies to that output; ``ROWWISE = True``
when cases can be stacked along a new leading dimension (rows independent), which batches retests.
"""

from __future__ import annotations

import importlib
from typing import Any

import torch

from ..schema import DTYPES, Suite


def adapter_for(suite: Suite):
    try:
        return importlib.import_module(suite.adapter)
    except ImportError as exc:
        raise ValueError(f"{suite.file}: key 'adapter': cannot import {suite.adapter!r}: {exc}") from exc


def golden_inputs(suite: Suite, inputs: dict[str, Any]) -> dict[str, Any]:
    """The inputs in the golden's dtype (float64 by the standard): floating tensors upcast, the rest as is."""
    gd = DTYPES[suite.standard.get("golden", "float64")]
    return {k: v.to(gd) if isinstance(v, torch.Tensor) and v.is_floating_point() else v for k, v in inputs.items()}
