"""What the derived layers build from a declaration and a binding: a custom op's schema types, its fake
implementation's outputs (shapes from the declaration) and the declarations of the output gradients (``dy``
in its output's own shape)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import torch

from .bind import Binding
from .decl import TensorDecl


def schema_type(t: TensorDecl) -> str:
    """The torch custom-op schema type of a tensor parameter: ``Tensor``, or ``Tensor?`` where optional."""
    return "Tensor?" if t.optional else "Tensor"


def gradient_of(t: TensorDecl, optional: bool = False) -> TensorDecl:
    """The declaration of ``d<name>``, the gradient of the output ``t``: its shape and its dtype."""
    return TensorDecl(f"d{t.name}", t.shape, f"like:{t.name}", optional=optional)


def fake_outputs(
    outputs: Iterable[TensorDecl | str],
    binding: Binding,
    dtype_of: Mapping[str, torch.dtype] | None = None,
    device: torch.device | str | None = None,
) -> tuple[torch.Tensor, ...]:
    """Uninitialized outputs in their declared shapes (what a custom op's fake implementation returns), each in
    its ``dtype_of`` entry's dtype, else the one its declaration fixes; on ``device`` (default the binding's)."""
    where = device if device is not None else binding.device
    if where is None:
        raise ValueError("no device to allocate the outputs on: no tensor was bound and none was given")
    out = []
    for t in outputs:
        name = t.name if isinstance(t, TensorDecl) else t
        out.append(torch.empty(binding.shape_of(t), dtype=binding.dtype(name, dtype_of), device=where))
    return tuple(out)
