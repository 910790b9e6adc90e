"""cross_entropy's spec: the row kernel (logits [N, C], class-index targets) by named dimensions, and what the
generic layers (verify, bench, cases, docs, lower) read about it. The public ``tileport.cross_entropy`` (torch's
semantics) is a front over it in this package."""

from __future__ import annotations

import torch

from .. import spec as s

IGNORE_INDEX = -100
ATTRS = (
    s.Attr("ignore_index", IGNORE_INDEX, "an int (a target equal to it is skipped)", s.INT),
    s.Attr("label_smoothing", 0.0, "a real in [0, 1]", s.PROB),
    s.Attr("lse_square_scale", 0.0, "finite, >= 0 (the z-loss' scale)", s.EPS),
    s.Attr("softcap", 0.0, "0.0 (none) or finite > 0", s.EPS),
)


def composite(
    input, target, weight=None, ignore_index=IGNORE_INDEX, label_smoothing=0.0, lse_square_scale=0.0, softcap=0.0
):
    """What users write today: the logits upcast (fp64 kept), Gemma 2's softcap, ``F.cross_entropy(reduction=
    "none")`` and the z-loss ``scale * logsumexp^2`` on the non-ignored rows; ``(loss, z_loss, lse)`` with lse
    detached (a statistic: it has no gradient)."""
    x = input.to(torch.float64 if input.dtype == torch.float64 else torch.float32)
    if softcap:
        x = softcap * torch.tanh(x / softcap)
    w = None if weight is None else weight.to(x.dtype)
    loss = torch.nn.functional.cross_entropy(
        x, target.long(), weight=w, ignore_index=ignore_index, reduction="none", label_smoothing=label_smoothing
    )
    lse = torch.logsumexp(x, -1)
    z_loss = torch.where(target != ignore_index, lse_square_scale * lse * lse, 0)
    return loss, z_loss, lse.detach()


def example(shape, dtype, device, generator) -> dict:
    """Logits of ``shape`` (tokens N, vocabulary C) as a trained LM head gives them (normal, std 2), targets over
    the whole vocabulary with one in ten ignored (padding)."""
    n, c = shape
    x = (torch.randn((n, c), generator=generator) * 2).to(dtype).to(device)
    t = torch.randint(0, c, (n,), generator=generator)
    t[torch.rand(n, generator=generator) < 0.1] = IGNORE_INDEX
    return {"input": x, "target": t.to(device)}


def bytes_moved(shape, dtype, mode: str) -> int:
    """The least traffic: fwd reads the logits and the targets and writes three fp32 values per row; bwd reads
    the logits, the targets, the lse and the row gradients and writes dinput; fwdbwd as the fused forward does it
    (the logits read once, the gradient written once)."""
    n, c = shape
    logits, rows = n * c * dtype.itemsize, n * (8 + 3 * 4)
    return {"fwd": logits + rows, "bwd": 2 * logits + rows, "fwdbwd": 2 * logits + rows}[mode]


V32K = ("4096x32000",)
V128K = ("4096x128256",)
WORKLOADS = {
    "llama2-7b-4k-tokens": (4096, 32000),
    "llama3-8b-4k-tokens": (4096, 128256),
    "gemma2-1k-tokens": (1024, 256000),
}
SWEEP = [(16, 32000), (512, 32000), (4096, 32000), (1024, 128256), (4096, 128256), (256, 262144)]

# The loss over a vocabulary (issue 39): forward and backward at 1.5x torch.compile of the composite or better.
BAR = (
    s.Criterion("fwdbwd vs torch.compile at V = 32000", ("fwdbwd",), V32K, "speedup_vs_compile", 1.5),
    s.Criterion("fwdbwd vs torch.compile at V = 128256", ("fwdbwd",), V128K, "speedup_vs_compile", 1.5),
)

SPEC = s.OpSpec(
    name="cross_entropy",
    aliases=("CrossEntropyLoss", "LigerCrossEntropyFunction", "cross_entropy_loss", "softmax_cross_entropy"),
    summary="cross-entropy over a vocabulary per row (weight, ignore_index, label smoothing, z-loss, softcap)",
    math="loss = (1 - eps) w_t (lse - z_t) + eps / C sum_c w_c (lse - z_c), z_loss = s lse^2, "
    "z = softcap tanh(x / softcap), lse = log sum_c exp(z_c)",
    inputs=(
        "input: [N, C] float grad",
        "target: [N] index in [0, C) or ignore_index",
        "weight: [C] like:input optional",
    ),
    attrs=ATTRS,
    outputs=("loss: [N] stat:input", "z_loss: [N] stat:input", "lse: [N] stat:input"),
    grads=("dinput: [N, C] like:input",),
    where=("C >= 1",),
    unit_stride=True,
    backward=s.Backward(
        ("dloss", "dz_loss", "input", "target", "weight", "lse"),
        ("ignore_index", "label_smoothing", "lse_square_scale", "softcap"),
    ),
    composite=composite,
    example=example,
    bytes_moved=bytes_moved,
    dtypes=s.FLOATS,
    workloads=WORKLOADS,
    sweep=SWEEP,
    bar=BAR,
    precision_dtypes={"loss": torch.float32, "z_loss": torch.float32, "lse": torch.float32},
    usage="""```python
import tileport

loss = tileport.cross_entropy(logits, labels)                        # [N, C] or [N, C, d...], torch's semantics
loss, z_loss = tileport.cross_entropy(logits, labels, label_smoothing=0.1, lse_square_scale=1e-4, softcap=30.0,
                                      return_z_loss=True)             # Liger's z-loss and Gemma 2's softcap
loss = tileport.cross_entropy(logits, labels, inplace_backward=True)  # the gradient written over the logits
loss_fn = tileport.CrossEntropyLoss(ignore_index=-100, reduction="mean")
```""",
)
