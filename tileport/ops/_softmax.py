"""The interface both softmax operators share (softmax, log_softmax): checks, any-dim handling, dispatch,
custom ops, autograd and the module; each operator's package states its contract and calls ``family(...)``.

Any ``dim``: the reduced dimension is moved last (a view); rows whose last stride is not 1 are copied once
(``_checks.rows_2d``), and the output is the kernels' (M, D) result moved back: a fresh tensor laid out with
``dim`` innermost (contiguous for the last dim), the layout the custom ops' fake implementations give too.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional

import torch

from ..backends.registry import REGISTRY
from . import _checks


def _moved(t: torch.Tensor, d: int) -> torch.Tensor:
    return t.movedim(d, -1) if d != t.dim() - 1 else t


def _back(t: torch.Tensor, d: int) -> torch.Tensor:
    return t.movedim(-1, d) if d != t.dim() - 1 else t


def empty_moved(t: torch.Tensor, d: int, dtype: torch.dtype | None = None) -> torch.Tensor:
    """An uninitialized tensor of t's shape laid out as the operators' outputs are (dim d innermost)."""
    return _back(t.new_empty(_moved(t, d).shape, dtype=dtype or t.dtype), d)


def check_forward(x: object, dim: object) -> int:
    """x a floating tensor of rank >= 1 and dim an int in range; the dim as a non-negative index."""
    _checks.floating_tensor(x, "x")
    return _checks.dim_index(dim, x.dim())


def check_backward(y: object, dy: object, dim: object) -> int:
    _checks.floating_tensor(y, "y")
    _checks.floating_tensor(dy, "dy")
    if tuple(dy.shape) != tuple(y.shape) or dy.device != y.device:
        raise ValueError(f"dy must have y's shape {tuple(y.shape)} on {y.device}, got {tuple(dy.shape)} on {dy.device}")
    return _checks.dim_index(dim, y.dim())


@dataclass(frozen=True)
class Family:
    """One softmax operator's public functions and module class."""

    forward: Callable  # (x, dim=-1, *, backend=None) -> y, without autograd
    backward: Callable  # (y, dy, dim=-1, *, backend=None) -> dx
    function: Callable  # (x, dim=-1, *, backend=None) -> y, differentiable
    module: type  # torch.nn.Module: Class(dim=-1, backend=None)


def family(op: str, class_name: str) -> Family:
    """The interface of softmax operator ``op``, whose backends give ``forward(rows) -> y`` and
    ``backward(y_rows, dy_rows) -> dx`` over the last dimension of (M, D) rows with unit-stride rows; reached
    through the custom ops ``tileport::<op>_fwd`` / ``tileport::<op>_bwd`` under torch.compile."""

    def forward_impl(x: torch.Tensor, d: int, backend: Optional[str]) -> torch.Tensor:
        if x.numel() == 0:
            return empty_moved(x, d)
        moved = _moved(x, d)
        y = REGISTRY.kernels(op, x.device, (x.dtype,), backend).forward(_checks.rows_2d(moved))
        return _back(y.view(moved.shape), d)

    def backward_impl(y: torch.Tensor, dy: torch.Tensor, d: int, backend: Optional[str]) -> torch.Tensor:
        if y.numel() == 0:
            return empty_moved(y, d)
        moved = _moved(y, d)
        impl = REGISTRY.kernels(op, y.device, (y.dtype, dy.dtype), backend)
        dx = impl.backward(_checks.rows_2d(moved), _checks.rows_2d(_moved(dy, d)))
        return _back(dx.view(moved.shape), d)

    def fwd_op(x: torch.Tensor, d: int, backend: Optional[str]) -> torch.Tensor:
        return forward_impl(x, d, backend)

    def bwd_op(y: torch.Tensor, dy: torch.Tensor, d: int, backend: Optional[str]) -> torch.Tensor:
        return backward_impl(y, dy, d, backend)

    fwd_custom = torch.library.custom_op(f"tileport::{op}_fwd", fwd_op, mutates_args=())
    bwd_custom = torch.library.custom_op(f"tileport::{op}_bwd", bwd_op, mutates_args=())
    fwd_custom.register_fake(lambda x, d, backend: empty_moved(x, d))
    bwd_custom.register_fake(lambda y, dy, d, backend: empty_moved(y, d))

    def fwd(x, d, backend):
        return fwd_custom(x, d, backend) if torch.compiler.is_compiling() else forward_impl(x, d, backend)

    def bwd(y, dy, d, backend):
        return bwd_custom(y, dy, d, backend) if torch.compiler.is_compiling() else backward_impl(y, dy, d, backend)

    class Function(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, d, backend):
            y = fwd(x, d, backend)
            ctx.save_for_backward(y)
            ctx.d, ctx.backend = d, backend
            return y

        @staticmethod
        def backward(ctx, dy):
            (y,) = ctx.saved_tensors
            return bwd(y, dy, ctx.d, ctx.backend), None, None

    def forward(x: torch.Tensor, dim: int = -1, *, backend: str | None = None) -> torch.Tensor:
        return fwd(x, check_forward(x, dim), backend)

    def backward(y: torch.Tensor, dy: torch.Tensor, dim: int = -1, *, backend: str | None = None) -> torch.Tensor:
        return bwd(y, dy, check_backward(y, dy, dim), backend)

    def function(x: torch.Tensor, dim: int = -1, *, backend: str | None = None) -> torch.Tensor:
        d = check_forward(x, dim)
        if torch.is_grad_enabled() and x.requires_grad:
            return Function.apply(x, d, backend)
        return fwd(x, d, backend)  # no graph to record: skip Function.apply

    def init(self, dim: int = -1, backend: str | None = None):
        torch.nn.Module.__init__(self)
        if isinstance(dim, bool) or not isinstance(dim, int):
            raise TypeError(f"dim must be an int, got {type(dim).__name__}")
        self.dim, self.backend = dim, backend

    module = type(class_name, (torch.nn.Module,), {
        "__doc__": f"``{op}`` over ``dim`` (default the last) as a module: ``torch.nn.{class_name}`` with a dim.",
        "__init__": init,
        "forward": lambda self, x: function(x, self.dim, backend=self.backend),
        "extra_repr": lambda self: f"dim={self.dim}",
        "__module__": f"tileport.ops.{op}",
    })  # fmt: skip
    for f, name in ((forward, f"{op}_fwd"), (backward, f"{op}_bwd"), (function, op)):
        f.__name__ = f.__qualname__ = name
        f.__module__ = f"tileport.ops.{op}"
    return Family(forward, backward, function, module)
