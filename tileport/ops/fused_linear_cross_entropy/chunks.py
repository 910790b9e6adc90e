"""The chunked pass of fused_linear_cross_entropy: the hidden states' rows in chunks, each chunk's logits made by
torch's matmul and turned into loss and gradient (in place, over the logits) by the cross_entropy row kernel, and
the gradients of the hidden states, the head and the bias accumulated chunk by chunk (the head's and the bias's in
the call's accum_dtype, fp32 by default). No [N, V] tensor is ever made: a chunk's [rows, V] logits are the largest
temporary."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from ...dtypes import stat_dtype
from .checks import Call

MIN_CHUNK_LOGITS = 1 << 20  # 2 MiB of 16-bit logits: below it a chunk's fixed calls outweigh its work
MIN_CHUNK_ROWS = 256  # each chunk reads and writes the head's fp32 gradient (8 V H bytes); 256 rows give its three
# GEMMs 1536 V H flops against them, so the GEMMs dominate (Liger's 7-row chunks at H 512, V 151936 did not)
UPCAST_ELEMENTS = 1 << 23  # a 16-bit gradient block widened for the fp32 weight-gradient GEMM (32 MiB in fp32: a
# 256 x 32000 chunk whole, one GEMM; blocks of 2^21 made the pass 10% slower)
NARROW_FIRST, NARROW_ELEMENTS = 1 << 20, 1 << 23  # the accumulator narrowed in blocks of at most 8M elements


def chunk_rows(n: int, v: int, h: int, chunk_size: int | None) -> int:
    """Rows per chunk: ``chunk_size`` where given, else Liger-Kernel's choice, a chunk's logits about as large as
    the hidden states (``next_power_of_2(ceil(N / ceil(V / H)))``: 256 rows for 4096 x 2048 against V = 32000), but
    at least ``MIN_CHUNK_LOGITS`` logits and ``MIN_CHUNK_ROWS`` rows (small calls in a few chunks, not many
    chunks of a few rows each paying the per-chunk calls and a pass over the head's fp32 gradient)."""
    if chunk_size is not None:
        return chunk_size
    factor = -(-v // max(h, 1))
    rows = -(-n // max(factor, 1))
    return max(1 << max(rows - 1, 0).bit_length(), -(-MIN_CHUNK_LOGITS // max(v, 1)), MIN_CHUNK_ROWS)


@dataclass(frozen=True)
class Rows:
    """What every pass over the chunks reads: hidden states ``x [N, H]`` (input's dtype), the head ``weight
    [V, H]`` and ``bias [V]`` in the compute dtype, ``target [N]``, the class weights ``ce_weight [V]`` in the
    compute dtype, the call's settings and the cross_entropy kernel module."""

    x: torch.Tensor
    weight: torch.Tensor
    bias: torch.Tensor | None
    target: torch.Tensor
    ce_weight: torch.Tensor | None
    call: Call
    kernel: object

    def kernel_args(self) -> tuple:
        c = self.call
        return (c.ignore_index, c.label_smoothing, c.lse_square_scale, c.softcap)


@dataclass
class Result:
    """A pass's results: per-row ``loss`` and ``z_loss`` in fp64 and ``lse`` in the stat dtype (None after a
    backward pass);
    ``grad_input`` in x's dtype, ``grad_weight`` and ``grad_bias`` accumulated in the call's ``accum_dtype`` (None
    where not asked for)."""

    loss: torch.Tensor | None = None
    z_loss: torch.Tensor | None = None
    lse: torch.Tensor | None = None
    grad_input: torch.Tensor | None = None
    grad_weight: torch.Tensor | None = None
    grad_bias: torch.Tensor | None = None


@contextlib.contextmanager
def _fp32_gemm_of(dtype: torch.dtype, device: torch.device):
    """On the CPU, fp32 GEMMs of widened bf16 values at bf16 speed: oneDNN's bf16 math mode rounds the fp32
    operands to bf16 (exact here, they are bf16 values widened) and accumulates and writes in fp32. The
    process-wide setting is restored on exit."""
    matmul = getattr(torch.backends.mkldnn, "matmul", None)  # the setting is torch >= 2.9's
    if (
        dtype != torch.bfloat16
        or device.type != "cpu"
        or not torch.backends.mkldnn.is_available()
        or not hasattr(matmul, "fp32_precision")
    ):
        yield
        return
    before = matmul.fp32_precision
    matmul.fp32_precision = "bf16"
    try:
        yield
    finally:
        matmul.fp32_precision = before


def _accumulate(acc: torch.Tensor, g: torch.Tensor, x: torch.Tensor) -> None:
    """``acc += g.T @ x`` in acc's dtype. 16-bit g and x: on CUDA (sm80+) by addmm's fp32 output (unverified here: no
    GPU); elsewhere g in blocks of V widened to fp32 (exact) and added by an fp32 GEMM (bf16 math on the CPU:
    ``_fp32_gemm_of``)."""
    if g.dtype == acc.dtype:
        acc.addmm_(g.t(), x.to(acc.dtype))
        return
    if acc.device.type == "cuda" and torch.cuda.get_device_capability(acc.device)[0] >= 8:  # as Liger-Kernel
        torch.addmm(acc, g.t(), x.to(g.dtype), out_dtype=acc.dtype, out=acc)
        return
    xw = x.to(acc.dtype)
    step = max(1, UPCAST_ELEMENTS // max(g.shape[0], 1))
    with _fp32_gemm_of(g.dtype, g.device):
        for v0 in range(0, g.shape[1], step):
            acc[v0 : v0 + step].addmm_(g[:, v0 : v0 + step].to(acc.dtype).t(), xw)


def narrowed(acc: torch.Tensor, dtype: torch.dtype, scale: float = 1.0) -> torch.Tensor:
    """``acc * scale`` in ``dtype``. A narrower dtype is written over the front of acc's own storage, block by
    block of rows (each block read whole before any of it is written, so no fresh [V, H] tensor is made): the
    result is a view of acc, and holds acc's storage."""
    if acc.dtype == dtype or dtype.itemsize > acc.dtype.itemsize:
        if scale != 1.0:
            acc.mul_(scale)
        return acc.to(dtype)
    n = acc.numel()
    src, dst = acc.view(-1), acc.view(-1).view(dtype)[:n]
    done = 0
    while done < n:
        # the first block's output bytes overlap its own input: it goes through a temporary; after it, a block
        # [done, end) with end <= 2 done writes below its input's bytes and is converted in place
        end = min(n, done + (NARROW_FIRST if done == 0 else min(done, NARROW_ELEMENTS)))
        block = src[done:end]
        if scale != 1.0:
            block.mul_(scale)
        dst[done:end].copy_(block.to(dtype) if done == 0 else block)
        done = end
    return dst.view(acc.shape)


def _no_autocast(device: torch.device):
    """Autocast off inside a pass: every dtype is chosen here (the compute dtype was taken from autocast)."""
    kind = device.type
    return torch.autocast(kind, enabled=False) if torch.is_autocast_enabled(kind) else contextlib.nullcontext()


def run(
    rows: Rows,
    wants: tuple[bool, bool, bool] = (False, False, False),
    scales: tuple[float, float] | None = None,
    row_grads: tuple | None = None,
) -> Result:
    """One pass over the chunks. ``wants``: gradients of (x, weight, bias). The logits' gradient is the row
    kernel's fused ``a * dloss + b * dz_loss`` with ``scales = (a, b)``, or, with ``row_grads = (dloss, dz_loss,
    lse)`` (per row, the stat dtype; dz_loss may be None), its ``backward``; neither: the loss alone."""
    x, w, call = rows.x, rows.weight, rows.call
    n, v = x.shape[0], w.shape[0]
    cd, st = call.compute_dtype, stat_dtype(call.compute_dtype)
    device = x.device
    res = Result()
    if row_grads is None:
        # loss and z_loss rows in fp64 (the kernel's values unrounded): added and summed, then rounded once
        res.loss, res.z_loss = (torch.empty(n, dtype=torch.float64, device=device) for _ in range(2))
        res.lse = torch.empty(n, dtype=st, device=device)
    if scales is not None or row_grads is not None:
        if wants[0]:
            res.grad_input = torch.empty(x.shape, dtype=x.dtype, device=device)
        if wants[1]:
            res.grad_weight = torch.zeros(w.shape, dtype=call.accum_dtype, device=device)
        if wants[2] and rows.bias is not None:
            res.grad_bias = torch.zeros(v, dtype=call.accum_dtype, device=device)
    step = chunk_rows(n, v, x.shape[1], call.chunk_size)
    args = rows.kernel_args()
    with _no_autocast(device):
        for r0 in range(0, n, step):
            r1 = min(n, r0 + step)
            xs, ts = x[r0:r1].to(cd), rows.target[r0:r1]
            logits = F.linear(xs, w, rows.bias)
            if row_grads is not None:
                dloss, dz, lse = row_grads
                g = rows.kernel.backward(
                    dloss[r0:r1], None if dz is None else dz[r0:r1], logits, ts, rows.ce_weight, lse[r0:r1], *args
                )
                del logits
            else:
                out = rows.kernel.forward(
                    logits,
                    ts,
                    rows.ce_weight,
                    *args,
                    grad=None if scales is None else logits,
                    scales=scales or (1.0, 1.0),
                    wide=True,
                )
                for kept, part in zip((res.loss, res.z_loss, res.lse), out):
                    kept[r0:r1] = part
                if scales is None:
                    continue
                g = logits  # the kernel wrote the gradient over the logits
            _project(res, g, xs, w, r0, r1)
    return res


def _project(res: Result, g: torch.Tensor, xs: torch.Tensor, w: torch.Tensor, r0: int, r1: int) -> None:
    """A chunk's logits gradient ``g [rows, V]`` into the gradients asked for: x's rows ``g @ W``, W's ``g.T @ x``
    and the bias's ``g.sum(0)`` added in the stat dtype."""
    if res.grad_input is not None:
        rows_out = res.grad_input[r0:r1]
        if rows_out.dtype == g.dtype:
            torch.mm(g, w, out=rows_out)
        else:
            rows_out.copy_(g @ w)
    if res.grad_weight is not None:
        _accumulate(res.grad_weight, g, xs)
    if res.grad_bias is not None:
        res.grad_bias.add_(g.sum(0, dtype=res.grad_bias.dtype))
