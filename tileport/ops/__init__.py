"""The interface layer: one module per operator (checks, autograd, module, custom-op registration)."""

from .l2norm import L2Norm, l2norm, l2norm_bwd, l2norm_fwd  # noqa: F401
