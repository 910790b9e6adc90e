"""The interface layer: one package per operator (its interface, and its spec for the generic layers).
One import line per operator; ``tileport`` re-exports what they import."""

from . import interface  # noqa: F401 - first: it sets how each operator's spec derives its interface
from .add_rms_norm import AddRMSNorm, add_rms_norm, add_rms_norm_bwd, add_rms_norm_fwd  # noqa: F401
from .causal_conv1d import causal_conv1d, causal_conv1d_bwd, causal_conv1d_fwd  # noqa: F401
from .causal_conv1d_update import causal_conv1d_update, causal_conv1d_update_fwd  # noqa: F401
from .chunk_gated_delta_rule import chunk_gated_delta_rule, chunk_gated_delta_rule_bwd, chunk_gated_delta_rule_fwd  # noqa: F401
from .cross_entropy import CrossEntropyLoss, cross_entropy, cross_entropy_bwd, cross_entropy_fwd  # noqa: F401
from .fused_linear_cross_entropy import FusedLinearCrossEntropyLoss, fused_linear_cross_entropy  # noqa: F401
from .fused_recurrent_gated_delta_rule import fused_recurrent_gated_delta_rule, fused_recurrent_gated_delta_rule_fwd  # noqa: F401
from .gated_rms_norm import GatedRMSNorm, gated_rms_norm, gated_rms_norm_bwd, gated_rms_norm_fwd  # noqa: F401
from .geglu import GEGLU, GEGLUMLP, geglu, geglu_bwd, geglu_fwd, gelu_and_mul  # noqa: F401
from .l2norm import L2Norm, l2norm, l2norm_bwd, l2norm_fwd  # noqa: F401
from .layer_norm import LayerNorm, layer_norm, layer_norm_bwd, layer_norm_fwd  # noqa: F401
from .log_softmax import LogSoftmax, log_softmax, log_softmax_bwd, log_softmax_fwd  # noqa: F401
from .rms_norm import RMSNorm, rms_norm, rms_norm_bwd, rms_norm_fwd  # noqa: F401
from .rope import apply_rotary_pos_emb, rope, rope_bwd, rope_fwd  # noqa: F401
from .softmax import Softmax, softmax, softmax_bwd, softmax_fwd  # noqa: F401
from .swiglu import SwiGLU, SwiGLUMLP, silu_and_mul, swiglu, swiglu_bwd, swiglu_fwd  # noqa: F401
