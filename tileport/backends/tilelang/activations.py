"""Gate activations for TileLang device kernels, written once for any dialect (``T``: ``tilelang.language`` or
``tilelang.ascend.language``; both give ``T.exp``). silu is v / (1 + exp(-v)): one rounding fewer than
v * sigmoid(v), torch's order."""


def sigmoid(T, v):
    return 1.0 / (1.0 + T.exp(-v))


def act(T, activation: str, v):
    """silu (v / (1 + exp(-v))) or sigmoid of ``v``."""
    return v / (1.0 + T.exp(-v)) if activation == "silu" else sigmoid(T, v)


def act_grad(T, activation: str, v):
    """The derivative: silu's s * (1 + v * (1 - s)), sigmoid's s * (1 - s), s = sigmoid(v)."""
    s = sigmoid(T, v)
    return s * (1.0 + v * (1.0 - s)) if activation == "silu" else s * (1.0 - s)
