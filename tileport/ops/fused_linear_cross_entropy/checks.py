"""fused_linear_cross_entropy's argument checks: every tensor, attribute and dtype of a call, each failure naming
the argument and what was expected; the result is the call's settings in one ``Call``."""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass

import torch

from .. import _checks

REDUCTIONS = ("none", "sum", "mean")
ACCUM_DTYPES = (torch.float32, torch.float64)  # what accum_dtype may name (None: the head's own dtype)
AUTOCAST_DTYPES = (torch.float16, torch.bfloat16, torch.float32)  # what torch.autocast casts (fp64 is left alone)


@dataclass(frozen=True)
class Call:
    """The settings of one call, checked: the compute dtype is the logits' (the autocast dtype where autocast is
    on for the device, else input's); ``softcap`` 0.0 for none (the row kernel's convention); ``accum_dtype`` the
    dtype the head's and the bias's gradients are summed in."""

    compute_dtype: torch.dtype
    ignore_index: int
    reduction: str
    label_smoothing: float
    lse_square_scale: float
    softcap: float
    return_z_loss: bool
    chunk_size: int | None
    backend: str | None
    accum_dtype: torch.dtype = torch.float32


def _tensor(t: object, name: str) -> torch.Tensor:
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    return t


def _floating(t: object, name: str) -> torch.Tensor:
    _tensor(t, name)
    if not t.dtype.is_floating_point:
        raise TypeError(f"{name} must have a floating dtype (float16, bfloat16, float32, float64), got {t.dtype}")
    return t


def _scale(value: object, name: str) -> float:
    """A finite real >= 0."""
    return _checks.eps_value(value, name)


def _softcap(value: object) -> float:
    """None or 0.0 (no cap, the row kernel's 0.0) or a finite real > 0."""
    if value is None:
        return 0.0
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"softcap must be None or a real number, got {type(value).__name__}")
    v = float(value)
    if not 0.0 <= v < math.inf:
        raise ValueError(f"softcap must be None (or 0.0: no cap) or finite and > 0, got {value!r}")
    return v


def _chunk_size(value: object) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"chunk_size must be None or an int, got {type(value).__name__}")
    if value < 1:
        raise ValueError(f"chunk_size must be >= 1 (rows per chunk), got {value}")
    return value


def accum_dtype(value: object, lm_weight: torch.Tensor) -> torch.dtype:
    """The dtype the head's and the bias's gradients are summed in over the chunks: None, the head's own dtype (no
    fp32 buffer the size of the head, Liger-Kernel's default); torch.float32 (the default, flash-linear-attention's
    ``accumulate_grad_in_fp32``) or torch.float64, never narrower than the head's dtype."""
    if value is None:
        return lm_weight.dtype
    if not isinstance(value, torch.dtype):
        raise TypeError(f"accum_dtype must be None or a torch.dtype, got {type(value).__name__}")
    if value not in ACCUM_DTYPES:
        raise ValueError(
            f"accum_dtype must be None (lm_weight's own dtype), torch.float32 or torch.float64, got {value}"
        )
    return torch.promote_types(value, lm_weight.dtype)


def compute_dtype(input: torch.Tensor, lm_weight: torch.Tensor) -> torch.dtype:
    """The logits' dtype: torch.autocast's for the device where it is on (and both are among the dtypes it casts),
    else input's, which lm_weight must share (as ``F.linear`` asks)."""
    kind = input.device.type
    if torch.is_autocast_enabled(kind) and input.dtype in AUTOCAST_DTYPES and lm_weight.dtype in AUTOCAST_DTYPES:
        return torch.get_autocast_dtype(kind)
    if lm_weight.dtype != input.dtype:
        raise TypeError(
            f"lm_weight must have input's dtype {input.dtype} (outside torch.autocast), got {lm_weight.dtype}"
        )
    return input.dtype


def tensors(input, lm_weight, target, bias, ce_weight) -> None:
    """Types, shapes and devices: input [..., H], lm_weight [V, H] (V >= 1), target of input.shape[:-1] (int64 or
    int32), bias and ce_weight None or [V], every tensor on input's device."""
    _floating(input, "input")
    _floating(lm_weight, "lm_weight")
    _tensor(target, "target")
    if input.dim() == 0:
        raise ValueError("input must have at least 1 dimension ([..., H] hidden states), got a 0-dim tensor")
    if lm_weight.dim() != 2:
        raise ValueError(f"lm_weight must be 2-dim [V, H], got shape {tuple(lm_weight.shape)}")
    v, h = lm_weight.shape
    if input.shape[-1] != h:
        raise ValueError(f"input's last dimension must be lm_weight's H = {h}, got input of shape {tuple(input.shape)}")
    if v == 0:
        raise ValueError("lm_weight must have at least one row (V >= 1 classes), got shape (0, H)")
    if target.dtype not in (torch.int64, torch.int32):
        raise TypeError(f"target must be int64 or int32 class indices, got {target.dtype}")
    if target.shape != input.shape[:-1]:
        raise ValueError(f"target must have input.shape[:-1] = {tuple(input.shape[:-1])}, got {tuple(target.shape)}")
    for name, t in (("bias", bias), ("ce_weight", ce_weight)):
        if t is None:
            continue
        _floating(t, name)
        if t.dim() != 1 or t.shape[0] != v:
            raise ValueError(f"{name} must be None or of shape [V] = ({v},), got {tuple(t.shape)}")
    named = {"input": input, "lm_weight": lm_weight, "target": target, "bias": bias, "ce_weight": ce_weight}
    _checks.same_device({n: t for n, t in named.items() if t is not None})


def targets(target: torch.Tensor, classes: int, ignore_index: int) -> None:
    """Every target in [0, V) or equal to ignore_index: IndexError naming the first other value and V."""
    bad = (target != ignore_index) & ((target < 0) | (target >= classes))
    if bool(bad.any()):
        value = int(target[bad].reshape(-1)[0])
        raise IndexError(
            f"target {value} is out of bounds: targets must be in [0, {classes}) (V = {classes} classes) or "
            f"ignore_index = {ignore_index}"
        )


def call(
    input,
    lm_weight,
    target,
    bias,
    ce_weight,
    ignore_index,
    reduction,
    label_smoothing,
    lse_square_scale,
    softcap,
    return_z_loss,
    chunk_size,
    backend,
    accum=torch.float32,
) -> Call:
    """Every argument checked (targets' values included, by the custom op under torch.compile); the call's
    settings."""
    tensors(input, lm_weight, target, bias, ce_weight)
    ignore_index = _checks.integer(ignore_index, "ignore_index")
    settings = Call(
        compute_dtype=compute_dtype(input, lm_weight),
        ignore_index=ignore_index,
        reduction=_checks.choice(reduction, "reduction", REDUCTIONS),
        label_smoothing=_checks.probability(label_smoothing, "label_smoothing"),
        lse_square_scale=_scale(lse_square_scale, "lse_square_scale"),
        softcap=_softcap(softcap),
        return_z_loss=_checks.flag(return_z_loss, "return_z_loss"),
        chunk_size=_chunk_size(chunk_size),
        backend=backend,
        accum_dtype=accum_dtype(accum, lm_weight),
    )
    if not torch.compiler.is_compiling():  # it reads the targets: under torch.compile the forward's custom op checks
        targets(target, lm_weight.shape[0], ignore_index)
    return settings
