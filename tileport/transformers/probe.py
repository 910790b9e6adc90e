"""Identifying a module by what it computes, not by its name: the module is run on a small seeded input with
random parameters (``torch.func.functional_call``, its own parameters untouched) beside each candidate form of a
tileport operator, and the form whose outputs agree is the one it is. Bit-for-bit agreement decides the casting
where forms differ only in rounding."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch.func import functional_call

PROBE_ROWS = 6


def _generator(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def random_params(module: torch.nn.Module, dtype: torch.dtype, gen: torch.Generator) -> dict[str, torch.Tensor]:
    """Every parameter of ``module`` (recursively) replaced by a seeded random tensor of its shape in ``dtype``."""
    return {n: (torch.randn(p.shape, generator=gen) * 0.5).to(dtype) for n, p in module.named_parameters()}


def run_module(module: torch.nn.Module, params: dict, *args) -> torch.Tensor | None:
    """The module's output with ``params`` in place of its own, or None where it fails on the probe (it does not
    take tensors of that shape: not the module we look for)."""
    try:
        with torch.no_grad():
            out = functional_call(module, params, args)
    except Exception:  # noqa: BLE001 - any failure means the module does not compute what we probe for
        return None
    return out if isinstance(out, torch.Tensor) else None


def same(a: torch.Tensor | None, b: torch.Tensor | None, exact: bool) -> bool:
    """Equal bit for bit (``exact``), else within a few units of the dtype's rounding."""
    if a is None or b is None or a.shape != b.shape or a.dtype != b.dtype:
        return False
    if exact:
        return torch.equal(a, b)
    tol = {torch.float32: 2e-5, torch.float64: 1e-12}.get(a.dtype, 2e-2)
    return torch.allclose(a.double(), b.double(), rtol=tol, atol=tol)


def pick(
    module_out: Callable[[torch.dtype], torch.Tensor | None],
    forms: dict[str, Callable[[torch.dtype], torch.Tensor]],
) -> str | None:
    """The name of the form that agrees with the module: close in fp32 and, among those, bit for bit in bf16 where
    one is (the casting); None where none agrees."""
    ref32 = module_out(torch.float32)
    close = [name for name, f in forms.items() if same(ref32, f(torch.float32), exact=False)]
    if len(close) <= 1:
        return close[0] if close else None
    ref16 = module_out(torch.bfloat16)
    exact = [name for name in close if same(ref16, forms[name](torch.bfloat16), exact=True)]
    return (exact or close)[0]
