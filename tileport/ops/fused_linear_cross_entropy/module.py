"""``FusedLinearCrossEntropyLoss``: :func:`fused_linear_cross_entropy` as a ``torch.nn.Module`` (the loss's
settings at construction, the tensors at the call), as Liger-Kernel's and flash-linear-attention's modules."""

from __future__ import annotations

import torch

from .function import fused_linear_cross_entropy


class FusedLinearCrossEntropyLoss(torch.nn.Module):
    """``forward(input, lm_weight, target, bias=None)``: the loss of ``input @ lm_weight.T + bias`` (see
    :func:`tileport.fused_linear_cross_entropy`). ``ce_weight`` (per-class weights) is kept as a buffer, as
    ``torch.nn.CrossEntropyLoss`` keeps its ``weight``."""

    def __init__(
        self,
        ce_weight=None,
        ignore_index=-100,
        reduction="mean",
        label_smoothing=0.0,
        *,
        lse_square_scale=0.0,
        softcap=None,
        return_z_loss=False,
        chunk_size=None,
        accum_dtype=torch.float32,
        backend=None,
    ):
        super().__init__()
        if ce_weight is not None and not isinstance(ce_weight, torch.Tensor):
            raise TypeError(f"ce_weight must be None or a torch.Tensor, got {type(ce_weight).__name__}")
        self.register_buffer("ce_weight", ce_weight)
        self.ignore_index, self.reduction, self.label_smoothing = ignore_index, reduction, label_smoothing
        self.lse_square_scale, self.softcap, self.return_z_loss = lse_square_scale, softcap, return_z_loss
        self.chunk_size, self.accum_dtype, self.backend = chunk_size, accum_dtype, backend

    def forward(self, input, lm_weight, target, bias=None):
        return fused_linear_cross_entropy(
            input,
            lm_weight,
            target,
            bias,
            self.ce_weight,
            self.ignore_index,
            self.reduction,
            self.label_smoothing,
            lse_square_scale=self.lse_square_scale,
            softcap=self.softcap,
            return_z_loss=self.return_z_loss,
            chunk_size=self.chunk_size,
            accum_dtype=self.accum_dtype,
            backend=self.backend,
        )

    def extra_repr(self) -> str:
        return (
            f"ignore_index={self.ignore_index}, reduction={self.reduction!r}, label_smoothing={self.label_smoothing}, "
            f"lse_square_scale={self.lse_square_scale}, softcap={self.softcap}, return_z_loss={self.return_z_loss}, "
            f"accum_dtype={self.accum_dtype}"
        )
