"""causal_conv1d_update's spec: one decoding step of the short causal convolution (Dao-AILab's
``causal_conv1d_update``) by named dimensions, forward only, and what the generic layers read about it.

The declaration is the derived form's: the state's update is an output (``new_state``), which the public front
(``__init__.py``) copies into ``conv_state``, so torch.compile sees a plain ``copy_`` and the custom op mutates
nothing.
"""

from __future__ import annotations

import torch

from .. import spec as s
from ..causal_conv1d.spec import ACTIVATION

INPUTS = (
    "x: [B, D, T] float",
    "conv_state: [B, D, S] like:x",
    "weight: [D, W] like:x",
    "bias: [D] like:x optional",
)


def composite(x, conv_state, weight, bias=None, activation="none"):
    """What users write today: transformers' fallback (the state and x concatenated in x's dtype, ``F.conv1d``
    over them with ``groups=D``, the last T outputs, silu), returning the state's update as a new tensor."""
    t, width = x.shape[2], weight.shape[1]
    xs = torch.cat((conv_state, x), -1)
    out = torch.nn.functional.conv1d(
        xs[..., xs.shape[2] - (t + width - 1) :], weight.unsqueeze(1), bias, groups=x.shape[1]
    )
    out = torch.nn.functional.silu(out) if activation in ("silu", "swish") else out
    return out, xs[..., t:].contiguous()


def _bds(shape) -> tuple[int, int, int]:
    """(B, D, T) of a benchmark shape: (B, D, T) as written, or (rows, D) (the Triton lowering's): a decode step."""
    return (shape[0], shape[1], 1) if len(shape) == 2 else tuple(shape)


def example(shape, dtype, device, generator) -> dict:
    """Inputs for ``shape`` (B, D, T): a decode step of gated DeltaNet's layer, its cache's state [B, D, 4] as
    transformers keeps it (S = W = 4), a width-4 weight and a bias."""
    b, d, t = _bds(shape)
    x = torch.randn((b, d, t), generator=generator).to(dtype).to(device)
    state = torch.randn((b, d, 4), generator=generator).to(dtype).to(device)
    weight = (torch.randn((d, 4), generator=generator) / 2).to(dtype).to(device)
    bias = (torch.randn((d,), generator=generator) / 4).to(dtype).to(device)
    return {"x": x, "conv_state": state, "weight": weight, "bias": bias, "activation": "silu"}


def bytes_moved(shape, dtype, mode: str) -> int:
    """A step reads x and the state and writes out and the state (the weight and bias, D * (W + 1), aside)."""
    b, d, t = _bds(shape)
    return (2 * b * d * t + 2 * b * d * 4 + d * 5) * dtype.itemsize


DECODE = ("16x8192x1", "64x8192x1")

_CAUSE = (
    "not yet profiled: at 16x8192x1, fp32 (AMD EPYC, AVX2), tileport's call moves its bytes at 13-14% of the copy's "
    "rate at 1 and 2 threads (1455 and 816 us), the fallback at 9%; 1.44x it at 2 threads, 1.58x at 1"
)
BAR = (s.Criterion("fwd vs transformers' fallback", ("fwd",), DECODE, "speedup_vs_eager", 1.5, cause=_CAUSE),)

SPEC = s.OpSpec(
    name="causal_conv1d_update",
    aliases=("causal_conv1d_update_fn",),
    summary="one decoding step of the short causal convolution, its conv state updated (Dao's causal_conv1d_update)",
    math="xs = [conv_state, x]; out[t] = act(bias + sum_w weight[:, w] * xs[S + t - (W-1) + w]); state = xs[T:]",
    inputs=INPUTS,
    attrs=(ACTIVATION,),
    outputs=("out: [B, D, T] like:x", "new_state: [B, D, S] like:x"),
    grads=(),
    where=("W >= 1", "S >= W - 1"),
    composite=composite,
    example=example,
    bytes_moved=bytes_moved,
    dtypes=s.FLOATS,
    modes=("fwd",),
    workloads={"qwen3-next-80b-decode-b16": (16, 8192, 1), "qwen3-next-80b-verify-b4": (4, 8192, 4)},
    sweep=[(1, 8192, 1), (16, 8192, 1), (64, 8192, 1), (4, 8192, 4)],
    bar=BAR,
    usage="""```python
import tileport

y = tileport.causal_conv1d_update(x_t, conv_state, weight, bias, activation="silu")  # x_t [B, D] or [B, D, T]
```""",
)
