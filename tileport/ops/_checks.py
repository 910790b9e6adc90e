"""Argument checks shared by the operators: each failure names the argument and what was expected."""

from __future__ import annotations

import math
import numbers

import torch


def floating_tensor(t: object, name: str) -> torch.Tensor:
    """``t`` must be a real floating-point tensor of rank >= 1."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if not t.dtype.is_floating_point:
        kind = "complex" if t.dtype.is_complex else "integer/bool"
        raise TypeError(
            f"{name} must have a floating dtype (float16, bfloat16, float32, float64), got {kind} {t.dtype}"
        )
    if t.dim() == 0:
        raise ValueError(f"{name} must have at least 1 dimension (the reduced last one), got a 0-dim tensor")
    return t


def eps_value(eps: object, name: str = "eps") -> float:
    """A finite, non-negative real number (an eps)."""
    if type(eps) is float and 0.0 <= eps < math.inf:  # the common case, without the numbers.Real ABC check
        return eps
    if isinstance(eps, bool) or not isinstance(eps, numbers.Real):
        raise TypeError(f"{name} must be a real number, got {type(eps).__name__}")
    value = float(eps)
    if not 0.0 <= value < math.inf:  # False for nan too; plain comparisons also trace under torch.compile
        raise ValueError(f"{name} must be finite and >= 0, got {eps!r}")
    return value


def output_dtype(dtype: object, default: torch.dtype | None, name: str = "output_dtype") -> torch.dtype | None:
    """None means ``default``; otherwise a floating torch.dtype."""
    if dtype is None:
        return default
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise TypeError(f"{name} must be None or a floating torch.dtype, got {dtype!r}")
    return dtype


def flag(value: object, name: str) -> bool:
    """A bool (not 0/1: a swapped positional argument shows)."""
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be a bool, got {type(value).__name__}")
    return value


def integer(value: object, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    return value


def output_tensor(t: object, index: int, name: str, shape: tuple, dtype: torch.dtype, device: torch.device) -> None:
    """A caller-provided output ``out[index]`` (the output ``name``) must be a contiguous tensor of exactly this
    shape, dtype and device. One combined test first (the kernel-only path runs it on every call); the
    message is built only for a tensor that fails it."""
    if (
        isinstance(t, torch.Tensor)
        and t.shape == shape
        and t.dtype == dtype
        and t.device == device
        and t.is_contiguous()
    ):
        return
    label = f"out[{index}] ({name})"
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{label} must be a torch.Tensor, got {type(t).__name__}")
    if tuple(t.shape) != shape or t.dtype != dtype or t.device != device:
        raise ValueError(
            f"{label} must be {dtype} of shape {shape} on {device}, got {t.dtype} of shape {tuple(t.shape)} on "
            f"{t.device}"
        )
    raise ValueError(f"{label} must be contiguous")


def same_device(tensors: dict[str, torch.Tensor]) -> None:
    devices = {name: t.device for name, t in tensors.items()}
    if len(set(devices.values())) > 1:
        listing = ", ".join(f"{n} on {d}" for n, d in devices.items())
        raise ValueError(f"tensors must be on one device, got {listing}")


def rows_2d(t: torch.Tensor) -> torch.Tensor:
    """A (rows, D) view of ``t`` (a copy only when no view exists) whose rows are unit-stride.

    Backends receive this form: any row stride, last-dim stride 1. Transposed or sliced inputs are handled
    here once, so no kernel ever reads a non-contiguous row.
    """
    if t.dim() == 2 and (t.is_contiguous() or t.stride(1) == 1 or t.shape[1] <= 1):  # is_contiguous: the
        return t  # cheapest question to torch, and the usual answer
    d = t.shape[-1]
    m = math.prod(t.shape[:-1])
    t2 = t.reshape(m, d)
    if d > 1 and t2.stride(1) != 1:
        t2 = t2.contiguous()
    return t2


def vector_tensor(t: object, name: str, x: torch.Tensor) -> torch.Tensor | None:
    """None, or a floating tensor of shape (D,) = x.shape[-1:] on x's device (a weight or a bias)."""
    if t is None:
        return None
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be None or a torch.Tensor, got {type(t).__name__}")
    if not t.dtype.is_floating_point:
        raise TypeError(f"{name} must have a floating dtype, got {t.dtype}")
    if t.dim() != 1 or t.shape[0] != x.shape[-1]:  # no tuples built: this runs on every call
        raise ValueError(f"{name} must have shape x.shape[-1:] = {tuple(x.shape[-1:])}, got {tuple(t.shape)}")
    if t.device != x.device:
        raise ValueError(f"{name} must be on x's device {x.device}, got {t.device} (tensors must be on one device)")
    return t


def finite_real(value: object, name: str) -> float:
    """A finite real number (not bool)."""
    if type(value) is float and -math.inf < value < math.inf:  # the common case, without the ABC check
        return value
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a real number, got {type(value).__name__}")
    v = float(value)
    if not -math.inf < v < math.inf:
        raise ValueError(f"{name} must be finite, got {value!r}")
    return v


def probability(value: object, name: str) -> float:
    """A real number in [0, 1] (a probability, such as a label smoothing)."""
    if type(value) is float and 0.0 <= value <= 1.0:  # the common case, without the ABC check
        return value
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a real number, got {type(value).__name__}")
    v = float(value)
    if not 0.0 <= v <= 1.0:  # False for nan too
        raise ValueError(f"{name} must be in [0, 1], got {value!r}")
    return v


def choice(value: object, name: str, options: tuple[str, ...], aliases: tuple[tuple[str, str], ...] = ()) -> str:
    """One of ``options``, or an alias of one (returned as the option it stands for)."""
    for alias, meant in aliases:
        if value == alias:
            return meant
    if value not in options:
        names = ", ".join(map(repr, options + tuple(a for a, _ in aliases)))
        raise ValueError(f"{name} must be one of {names}, got {value!r}")
    return value  # type: ignore[return-value]


def like_rows(t: object, name: str, x: torch.Tensor, ref: str = "x") -> torch.Tensor:
    """A floating tensor of x's shape on x's device (a gradient of a rows output); ``ref``: x's name."""
    floating_tensor(t, name)
    if t.shape != x.shape:  # torch.Size is a tuple: compared as one, without copies
        raise ValueError(f"{name} must have {ref}'s shape {tuple(x.shape)}, got {tuple(t.shape)}")
    if t.device != x.device:
        raise ValueError(f"{name} must be on {ref}'s device {x.device}, got {t.device} (tensors must be on one device)")
    return t


def per_row_tensor(t: object, name: str, x: torch.Tensor, ref: str = "x") -> torch.Tensor:
    """A floating tensor of shape x.shape[:-1] on x's device (a saved statistic such as rstd)."""
    if not isinstance(t, torch.Tensor) or not t.dtype.is_floating_point:
        raise TypeError(f"{name} must be a floating torch.Tensor, got {getattr(t, 'dtype', type(t).__name__)}")
    if tuple(t.shape) != tuple(x.shape[:-1]):
        raise ValueError(f"{name} must have shape {ref}.shape[:-1] = {tuple(x.shape[:-1])}, got {tuple(t.shape)}")
    if t.device != x.device:
        raise ValueError(f"{name} must be on {ref}'s device {x.device}, got {t.device} (tensors must be on one device)")
    return t


def dim_index(dim: object, ndim: int) -> int:
    """An int dimension of an ``ndim``-dim tensor (negative counts from the end), as a non-negative index."""
    if isinstance(dim, bool) or not isinstance(dim, int):
        raise TypeError(f"dim must be an int, got {type(dim).__name__}")
    if not -ndim <= dim < ndim:
        raise IndexError(f"dim must be in [{-ndim}, {ndim - 1}] for a {ndim}-dim input, got {dim}")
    return dim % ndim
