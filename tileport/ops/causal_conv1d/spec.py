"""causal_conv1d's spec: the short causal depthwise convolution of gated DeltaNet and Mamba by named dimensions,
and what the generic layers (verify, bench, cases, docs, lower) read about it.

The declaration is the derived forms' (``causal_conv1d_fwd`` / ``_bwd``): the initial states' width ``S`` is
``W - 1`` (the shape grammar has no ``W - 1``, so it is its own dimension and a constraint), and the final states
are an output exactly when initial states are given; the public front (``__init__.py``) passes zeros where the
caller asks for final states without initial ones. ``dbias`` is always computed (a sum over B and T): the
grammar's optional results follow optional tensors that alone bind a dimension, and bias' D is x's.
"""

from __future__ import annotations

import torch

from .. import spec as s

ACTIVATIONS = ("none", "silu")
ACTIVATION = s.Attr(
    "activation",
    "none",
    "none or silu (alias swish; None is none)",
    s.CHOICE,
    ACTIVATIONS,
    (("swish", "silu"), (None, "none")),
)
INPUTS = (
    "x: [B, D, T] float grad",
    "weight: [D, W] like:x grad",
    "bias: [D] like:x grad optional",
    "initial_states: [B, D, S] like:x grad optional",
    "seq_idx: [B, T] index optional",
)


def composite(x, weight, bias=None, initial_states=None, seq_idx=None, activation="none"):
    """What users write today: transformers' fallback (``F.conv1d`` with ``groups=D`` and ``W - 1`` zeros of
    padding, then silu) in x's dtype, with the initial states prepended where given and the final states the last
    ``W - 1`` inputs. No ``seq_idx`` there: a packed batch is run one sequence at a time by its users."""
    if seq_idx is not None:
        raise ValueError("the composite has no seq_idx (transformers' fallback runs one sequence at a time)")
    width = weight.shape[1]
    xs = x if initial_states is None else torch.cat((initial_states, x), -1)
    pad = width - 1 if initial_states is None else 0  # the states stand for the W - 1 zeros of padding
    out = torch.nn.functional.conv1d(xs, weight.unsqueeze(1), bias, padding=pad, groups=x.shape[1])[..., : x.shape[2]]
    out = torch.nn.functional.silu(out) if activation in ("silu", "swish") else out
    return out, (None if initial_states is None else xs[..., xs.shape[2] - (width - 1) :])


def _bdt(shape) -> tuple[int, int, int]:
    """(B, T, D) of a benchmark shape: (B, T, D) as written, or (tokens, D) (the Triton lowering's rows, width)."""
    return (1, shape[0], shape[1]) if len(shape) == 2 else tuple(shape)


def example(shape, dtype, device, generator) -> dict:
    """Inputs for ``shape`` (B, T, D) as gated DeltaNet's layer has them: x the transposed view of a [B, T, D]
    activation (channel-last), a width-4 weight and a bias."""
    b, t, d = _bdt(shape)
    x = torch.randn((b, t, d), generator=generator).to(dtype).to(device).transpose(1, 2)
    weight = (torch.randn((d, 4), generator=generator) / 2).to(dtype).to(device)
    bias = (torch.randn((d,), generator=generator) / 4).to(dtype).to(device)
    return {"x": x, "weight": weight, "bias": bias, "activation": "silu"}


def bytes_moved(shape, dtype, mode: str) -> int:
    """fwd reads x and writes out; bwd reads x and dout and writes dx (the weight and bias, D * (W + 1), aside)."""
    b, t, d = _bdt(shape)
    n, e = b * t * d * dtype.itemsize, dtype.itemsize
    small = 2 * d * 5 * e
    return {"fwd": 2 * n + small, "bwd": 3 * n + small, "fwdbwd": 5 * n + 2 * small}[mode]


PREFILL = ("1x4096x8192", "4x1024x4096")
IN_CACHE = ("1x256x4096", "2x64x8192")

# A streaming operator: its kernels move each element of x once, as the elementwise operators' bar asks.
BAR = (
    s.Criterion(
        "fwd in cache: kernel-only share of copy", ("fwd",), IN_CACHE, "bandwidth_share", 0.6, kernel_only=True
    ),
    s.Criterion("fwd large: kernel-only share of copy", ("fwd",), PREFILL, "bandwidth_share", 0.6, kernel_only=True),
    s.Criterion("fwd vs torch.compile", ("fwd",), IN_CACHE + PREFILL, "speedup_vs_compile", 1.0),
    s.Criterion("fwdbwd vs eager autograd", ("fwdbwd",), IN_CACHE + PREFILL, "speedup_vs_eager", 1.5),
)

SPEC = s.OpSpec(
    name="causal_conv1d",
    aliases=("causal_conv1d_fn", "CausalConv1dFn", "ShortConvolution", "short_conv"),
    summary="the short causal depthwise convolution of gated DeltaNet and Mamba (Dao-AILab's causal_conv1d_fn)",
    math="act(bias[d] + sum_w weight[d, w] * x[b, d, t - (W-1) + w]), zeros (or initial_states) before the start",
    inputs=INPUTS,
    attrs=(ACTIVATION,),
    outputs=("out: [B, D, T] like:x", "final_states: [B, D, S] like:x optional"),
    grads=(
        "dx: [B, D, T] like:x",
        "dweight: [D, W] like:x",
        "dbias: [D] like:x",
        "dinitial_states: [B, D, S] like:x optional",
    ),
    where=("W >= 1", "S + 1 == W"),
    backward=s.Backward(("x", "weight", "bias", "initial_states", "seq_idx", "dout", "dfinal_states"), ("activation",)),
    composite=composite,
    example=example,
    bytes_moved=bytes_moved,
    dtypes=s.FLOATS,
    workloads={
        "qwen3-next-80b-prefill": (1, 4096, 8192),
        "qwen3-next-80b-train": (4, 2048, 8192),
        "qwen3.5-9b-prefill": (1, 2048, 6144),
    },
    sweep=[(1, 256, 4096), (2, 64, 8192), (4, 1024, 4096), (1, 4096, 8192)],
    bar=BAR,
    usage="""```python
import tileport

out = tileport.causal_conv1d(x, weight, bias, activation="silu")   # x [B, D, T] (any strides), weight [D, W]
out, final = tileport.causal_conv1d(x, weight, bias, initial_states=h0, return_final_states=True)
out = tileport.causal_conv1d(x, weight, bias, seq_idx=seq_idx)     # a packed batch: [B, T] sequence ids
y = tileport.causal_conv1d_update(x_t, conv_state, weight, bias, activation="silu")  # decoding, in place
```""",
)
