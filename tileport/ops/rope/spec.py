"""rope's spec: its tensors by named dimensions, and what the generic layers (verify, bench, cases, docs, lower)
read about it."""

from __future__ import annotations

import torch

from .. import spec as s

INPUTS = (
    "q: [B, T, Hq, D] float grad",
    "k: [B, T, Hk, D] like:q grad optional",
    "cos: [T_ro, R/2] like:q",
    "sin: [T_ro, R/2] like:q",
    "position_ids: [B, T] index optional",
    "offsets: [B] index optional",
)


def _rotate(x, cos, sin, pos, interleaved):
    """x [B, T, H, D] with the rows ``pos`` [B, T] of the tables, as users write it (a torch gather, halves or
    pairs split by views), fp32 math."""
    r = cos.shape[-1]
    ok = ((pos >= 0) & (pos < cos.shape[0])).unsqueeze(-1)
    c = torch.where(ok, cos.float()[pos.clamp(0, max(cos.shape[0] - 1, 0))], 0.0).unsqueeze(2)
    s_ = torch.where(ok, sin.float()[pos.clamp(0, max(sin.shape[0] - 1, 0))], 0.0).unsqueeze(2)
    xf = x.float()
    rot, rest = xf[..., : 2 * r], xf[..., 2 * r :]
    if interleaved:
        x1, x2 = rot[..., 0::2], rot[..., 1::2]
        out = torch.stack((x1 * c - x2 * s_, x2 * c + x1 * s_), -1).flatten(-2)
    else:
        x1, x2 = rot[..., :r], rot[..., r:]
        out = torch.cat((x1 * c - x2 * s_, x2 * c + x1 * s_), -1)
    return torch.cat((out, rest), -1).to(x.dtype)


def composite(q, k, cos, sin, position_ids=None, offsets=None, interleaved=False, offset=0):
    """The rotary embedding users write in torch (tables gathered per token, fp32 math, cast back once)."""
    b, t = q.shape[:2]
    if position_ids is None:
        position_ids = torch.arange(t, device=q.device).expand(b, t) + offset
        if offsets is not None:
            position_ids = position_ids + offsets.unsqueeze(1)
    qo = _rotate(q, cos, sin, position_ids, interleaved)
    return qo, None if k is None else _rotate(k, cos, sin, position_ids, interleaved)


def _qshape(shape) -> tuple[int, int, int, int]:
    """q's (B, T, Hq, D); a (tokens, D) shape (the Triton lowering's rows and width) is one head of tokens."""
    return (1, shape[0], 1, shape[1]) if len(shape) == 2 else tuple(shape)


def example(shape, dtype, device, generator) -> dict:
    """Inputs for q of ``shape`` (B, T, Hq, D): GQA with Hk = Hq / 4 (at least 1), rotary over D's even part, the
    tables of a model's rotary embedding (base 10000)."""
    b, t, h, d = _qshape(shape)
    q = torch.randn((b, t, h, d), generator=generator).to(dtype).to(device)
    k = torch.randn((b, t, max(1, h // 4), d), generator=generator).to(dtype).to(device)
    inv = 1.0 / (10000 ** (torch.arange(0, d // 2, dtype=torch.float64) * 2 / max(d, 1)))
    angles = torch.arange(t, dtype=torch.float64)[:, None] * inv[None, :]
    return {"q": q, "k": k, "cos": angles.cos().to(dtype).to(device), "sin": angles.sin().to(dtype).to(device)}


def bytes_moved(shape, dtype, mode: str) -> int:
    """fwd and bwd each read q and k (or their gradients) and the two tables, and write as many as they read."""
    b, t, h, d = _qshape(shape)
    heads = h + max(1, h // 4)
    once = (2 * b * t * heads * d + 2 * t * (d // 2)) * dtype.itemsize
    return {"fwd": once, "bwd": once, "fwdbwd": 2 * once}[mode]


DECODE = ("1x1x32x128", "16x1x32x128")
PREFILL = ("1x1024x32x128", "4x1024x32x64")
LARGE = ("1x4096x32x128", "8x2048x32x128")

# An elementwise operator (issue 38): kernel-only at 0.8 of the copy of its bytes or better, in cache and large.
BAR = (
    s.Criterion(
        "fwd in cache: kernel-only share of copy", ("fwd",), PREFILL[1:], "bandwidth_share", 0.8, kernel_only=True
    ),
    s.Criterion("fwd large: kernel-only share of copy", ("fwd",), LARGE, "bandwidth_share", 0.8, kernel_only=True),
    s.Criterion(
        "fwd vs torch.compile",
        ("fwd",),
        PREFILL + LARGE,
        "speedup_vs_compile",
        1.0,
        cause="fp32 with fresh outputs at two threads: the outputs' first-touch page faults, which take one "
        "thread's time however many run (the kernel-only provider, writing preallocated outputs, is "
        "several times torch.compile's speed there: docs/ops/rope.md)",
    ),
    s.Criterion("fwdbwd vs eager autograd", ("fwdbwd",), PREFILL + LARGE, "speedup_vs_eager", 1.5),
)

SPEC = s.OpSpec(
    name="rope",
    aliases=(
        "apply_rotary_pos_emb",
        "rotary_embedding",
        "RotaryEmbedding",
        "npu_rotary_mul",
        "aclnnRotaryPositionEmbedding",
    ),
    summary="rotary position embedding of q and k (GPT-NeoX halves or GPT-J pairs, partial rotary, positions)",
    math="x1 * cos - x2 * sin, x2 * cos + x1 * sin over the first R columns' pairs; the rest passes through",
    inputs=INPUTS,
    attrs=(s.Attr("interleaved", False, "a bool", s.BOOL), s.Attr("offset", 0, "an int", s.INT)),
    outputs=("q_out: [B, T, Hq, D] like:q", "k_out: [B, T, Hk, D] like:q optional"),
    grads=("dq: [B, T, Hq, D] like:q", "dk: [B, T, Hk, D] like:q optional"),
    where=("R <= D",),
    unit_stride=True,  # the contract: stride 1 in every tensor's last dimension, any other strides
    kernel_out=True,  # rope_fwd(out=...): bench's kernel-only provider
    backward=s.Backward(("dq_out", "dk_out", "cos", "sin", "position_ids", "offsets"), ("interleaved", "offset")),
    composite=composite,
    example=example,
    bytes_moved=bytes_moved,
    dtypes=s.FLOATS,
    workloads={
        "llama3-8b-prefill": (1, 4096, 32, 128),
        "llama3-8b-decode": (32, 1, 32, 128),
        "qwen2.5-7b-prefill": (1, 2048, 28, 128),
    },
    sweep=[(1, 1, 32, 128), (16, 1, 32, 128), (1, 1024, 32, 128), (4, 1024, 32, 64), (1, 4096, 32, 128)],
    bar=BAR,
)
