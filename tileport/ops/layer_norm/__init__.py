"""layer_norm: the interface layer (checks, dispatch, custom ops, autograd, module).

Contract (``torch.nn.functional.layer_norm`` over the last dimension, stated once here):
- Forward over ``x[..., D]``: ``mean = mean(x, -1)``, ``var = mean((x - mean)^2, -1)`` (biased),
  ``rstd = 1 / sqrt(var + eps)``, ``y = (x - mean) * rstd * weight + bias``; ``weight`` / ``bias`` None mean
  no scale / no shift. The variance never comes from ``E[x^2] - mean^2``: rows with a large mean (values near
  1000 with unit spread) keep their spread. Math in fp32 (fp64 for fp64 inputs). ``y`` has ``output_dtype``
  (default x's dtype); ``mean`` and ``rstd`` have shape ``x.shape[:-1]``, fp32 (fp64 for fp64 inputs).
  ``eps`` finite and >= 0.
- Backward from the statistics it is given, with ``xhat = (x - mean) * rstd`` (fp32, recomputed) and
  ``g = dy * weight``; a given fp32 mean that is the row's mean rounded (what the forward saves) stands for
  that exact mean, which a backend may centre on (the TileLang CPU kernels do): ``dx = (g - mean(g) - xhat * mean(g *
  xhat)) * rstd`` in x's dtype;
  ``dweight = sum over rows of dy * xhat``, ``dbias = sum over rows of dy``, reduced in fp32
  deterministically (the same bits for any thread count) and returned in the weight's and the bias's dtype;
  None for a parameter not given. Saved for backward: ``x``, ``weight``, ``mean``, ``rstd``.
- Empty inputs: no rows gives empty outputs (dweight, dbias zeros); D = 0 gives mean and rstd nan (the mean of
  nothing, as torch's) and empty rows. Rows holding nan/inf affect only their row of y and dx (and the sums); a
  row holding inf has a nan mean, as torch's (its Welford update takes inf - inf).

The interface (checks, dispatch, the custom ops ``tileport::layer_norm_fwd`` / ``_bwd`` under torch.compile,
autograd) is derived from the spec (``spec.py``); the module form is written here, a drop-in for torch's.
"""

from __future__ import annotations

import torch

from .. import _checks
from .spec import DEFAULT_EPS, SPEC

OP = "layer_norm"
_API = SPEC.api
layer_norm, layer_norm_fwd, layer_norm_bwd = _API.function, _API.forward, _API.backward


class LayerNorm(torch.nn.Module):
    """A drop-in for ``torch.nn.LayerNorm`` over the trailing ``normalized_shape`` dimensions (an int or a
    tuple): weight ones and bias zeros to start, ``bias=False`` for none, ``elementwise_affine=False`` for
    neither."""

    def __init__(
        self,
        normalized_shape: int | tuple[int, ...] | torch.Size,
        eps: float = DEFAULT_EPS,
        elementwise_affine: bool = True,
        bias: bool = True,
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
        self.elementwise_affine = elementwise_affine
        self.backend = backend
        kw = {"device": device, "dtype": dtype}
        for name, present in (("weight", elementwise_affine), ("bias", elementwise_affine and bias)):
            self.register_parameter(name, torch.nn.Parameter(torch.empty(shape, **kw)) if present else None)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        if self.weight is not None:
            torch.nn.init.ones_(self.weight)
        if self.bias is not None:
            torch.nn.init.zeros_(self.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        k = len(self.normalized_shape)
        if not isinstance(x, torch.Tensor) or x.dim() < k or tuple(x.shape[-k:]) != self.normalized_shape:
            got = tuple(x.shape) if isinstance(x, torch.Tensor) else type(x).__name__
            raise ValueError(
                f"LayerNorm over {self.normalized_shape} expects input of shape [*, "
                f"{', '.join(map(str, self.normalized_shape))}], got {got}"
            )
        w, b = self.weight, self.bias
        if k == 1:
            return layer_norm(x, w, b, self.eps, backend=self.backend)
        flat = x.reshape(*x.shape[:-k], -1)
        w, b = (None if p is None else p.reshape(-1) for p in (w, b))
        return layer_norm(flat, w, b, self.eps, backend=self.backend).view(x.shape)

    def extra_repr(self) -> str:
        return f"{self.normalized_shape}, eps={self.eps}, elementwise_affine={self.elementwise_affine}"
