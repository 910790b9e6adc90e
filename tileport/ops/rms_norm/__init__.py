"""rms_norm: the interface layer (checks, dispatch, custom ops, autograd, module).

Contract (stated once here; torch.nn.RMSNorm, Liger-Kernel and flash-linear-attention semantics):
- Forward over the last dimension of ``x[..., D]``: ``rstd = 1 / sqrt(mean(x^2, -1) + eps)``,
  ``y = x * rstd * (weight + offset)``; ``weight=None`` means no scale (offset ignored). Math in fp32 (fp64
  for fp64 inputs). ``y`` has ``output_dtype`` (default x's dtype); ``rstd`` has shape ``x.shape[:-1]``, fp32
  (fp64 for fp64 inputs). ``eps`` finite and >= 0; ``offset`` finite (Gemma's ``1 + w`` is ``offset=1``).
- ``casting="fp32"``: everything in fp32, rounded once. ``casting="llama"``: ``x * rstd`` is rounded to x's
  dtype and multiplied by ``weight + offset`` rounded to x's dtype, the product rounded to the output dtype:
  HF LlamaRMSNorm's order, bit for bit with its outputs when the weight, x and the output share a dtype (HF's
  usual case; with an fp32 weight HF promotes the product to fp32 instead).
- Backward, with ``n = x * rstd`` (fp32, recomputed) and ``g = dy * (weight + offset)``:
  ``dx = (g - n * mean(g * n, -1)) * rstd`` in x's dtype; ``dweight = sum over rows of dy * n`` (``n`` rounded
  to x's dtype under "llama"), reduced in fp32 deterministically (the same bits for any thread count) and
  returned in the weight's dtype; None without a weight. Saved for backward: ``x``, ``weight``, ``rstd``.
  Given the forward's ``eps`` (autograd gives it), a backend with the precision for it computes the same dx
  without the cancellation of ``g - n * mean(g * n)``: ``dx = rstd * (D * eps * g + sum(x^2) * g - x *
  sum(g * x)) / (sum(x^2) + D * eps)`` (TileLang CPU, in fp64); the fp32 backends keep the form above. There
  a given fp32 rstd that is the row's rstd rounded (what the forward saves) stands for that exact value,
  which such a backend may use in dx and dweight (the TileLang CPU kernels do); any other is used as given.
- Empty inputs: no rows gives empty outputs (dweight zeros); D = 0 gives rstd nan (the mean of nothing, as
  torch's mean) and empty rows. Rows holding nan/inf affect only their row of y and dx (and dweight).

The interface (checks, dispatch, the custom ops ``tileport::rms_norm_fwd`` / ``_bwd`` under torch.compile,
autograd) is derived from the spec (``spec.py``); the module form is written here, a drop-in for torch's.
"""

from __future__ import annotations

import torch

from .. import _checks
from .spec import CASTINGS, DEFAULT_EPS, SPEC

OP = "rms_norm"
_API = SPEC.api
rms_norm, rms_norm_fwd, rms_norm_bwd = _API.function, _API.forward, _API.backward


class RMSNorm(torch.nn.Module):
    """A drop-in for ``torch.nn.RMSNorm`` over the trailing ``normalized_shape`` dimensions (an int or a
    tuple), with Gemma's ``offset`` and HF's ``casting``. The weight starts at ``1 - offset``: ones as
    torch's, zeros for Gemma's ``offset=1``, so the initial scale ``weight + offset`` is 1."""

    def __init__(
        self,
        normalized_shape: int | tuple[int, ...] | torch.Size,
        eps: float = DEFAULT_EPS,
        elementwise_affine: bool = True,
        offset: float = 0.0,
        casting: str = "fp32",
        backend: str | None = None,
        device=None,
        dtype=None,
    ):
        super().__init__()
        shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
        if not shape or not all(isinstance(d, int) and d >= 0 for d in shape):
            raise ValueError(f"normalized_shape must be an int or a tuple of ints >= 0, got {normalized_shape!r}")
        self.normalized_shape = shape
        self.eps = _checks.eps_value(eps)
        self.offset = _checks.finite_real(offset, "offset")
        self.casting = _checks.choice(casting, "casting", CASTINGS)
        self.elementwise_affine = elementwise_affine
        self.backend = backend
        if elementwise_affine:
            self.weight = torch.nn.Parameter(torch.empty(shape, device=device, dtype=dtype))
        else:
            self.register_parameter("weight", None)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        if self.weight is not None:
            torch.nn.init.constant_(self.weight, 1.0 - self.offset)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        k = len(self.normalized_shape)
        if not isinstance(x, torch.Tensor) or x.dim() < k or tuple(x.shape[-k:]) != self.normalized_shape:
            got = tuple(x.shape) if isinstance(x, torch.Tensor) else type(x).__name__
            raise ValueError(
                f"RMSNorm over {self.normalized_shape} expects input of shape [*, "
                f"{', '.join(map(str, self.normalized_shape))}], got {got}"
            )
        if k == 1:
            return rms_norm(x, self.weight, self.eps, offset=self.offset, casting=self.casting, backend=self.backend)
        flat = x.reshape(*x.shape[:-k], -1)
        w = None if self.weight is None else self.weight.reshape(-1)
        y = rms_norm(flat, w, self.eps, offset=self.offset, casting=self.casting, backend=self.backend)
        return y.view(x.shape)

    def extra_repr(self) -> str:
        return (
            f"{self.normalized_shape}, eps={self.eps}, elementwise_affine={self.elementwise_affine}, "
            f"offset={self.offset}, casting={self.casting!r}"
        )
