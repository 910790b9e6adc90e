"""cross_entropy's row kernel as plain torch, the precision benchmark (and, in float64, the golden): the contract
of ``tileport.ops.cross_entropy``, rows in chunks of about ``CHUNK_ELEMENTS`` logits so that a 128k or 256k
vocabulary never needs more than a chunk's temporaries; math in fp32 (fp64 for fp64), results rounded once."""

from __future__ import annotations

import torch

from . import compute_dtype

CHUNK_ELEMENTS = 1 << 22  # logits per chunk of rows: bounds the fp32/fp64 temporaries whatever N and C


def _chunks(n: int, c: int):
    step = max(1, CHUNK_ELEMENTS // max(c, 1))
    for r0 in range(0, n, step):
        yield r0, min(n, r0 + step)


def _capped(x, softcap: float):
    """(z, s): the capped logits ``softcap * tanh(x / softcap)`` and their slope ``1 - tanh^2``; x and None
    without a softcap."""
    if not softcap:
        return x, None
    th = torch.tanh(x / softcap)
    return softcap * th, 1 - th * th


def _row_terms(z, lse, t, valid, w, eps: float):
    """Each row's ``(1 - eps) w_t (lse - z_t) + (eps / C) sum_c w_c (lse - z_c)`` (torch's label smoothing),
    0 where the target is ignored; ``w_t`` too."""
    tc = torch.where(valid, t, 0).long()
    z_t = z.gather(1, tc[:, None])[:, 0]
    w_t = torch.ones_like(lse) if w is None else w[tc]
    loss = (1 - eps) * w_t * (lse - z_t)
    if eps:
        d = lse[:, None] - z
        loss = loss + (eps / z.shape[1]) * (d.sum(1) if w is None else (d * w).sum(1))
    return torch.where(valid, loss, 0), w_t, tc


def _grad(z, s, lse, tc, valid, w, w_t, eps: float, scale: float, a, b):
    """``a * dloss/dx + b * dz_loss/dx`` for a chunk (a, b: floats or ``[rows, 1]`` tensors), 0 on ignored rows."""
    c = z.shape[1]
    p = torch.exp(z - lse[:, None])
    wsum = c if w is None else w.sum()
    g = (1 - eps) * w_t[:, None] * p
    g.scatter_add_(1, tc[:, None], -(1 - eps) * w_t[:, None])
    if eps:
        g += (eps / c) * (wsum * p - (1 if w is None else w))
    g *= a
    if scale:
        g += (b * 2 * scale) * lse[:, None] * p
    if s is not None:
        g *= s
    return torch.where(valid[:, None], g, 0)


def forward(
    input,
    target,
    weight,
    ignore_index: int,
    label_smoothing: float,
    lse_square_scale: float,
    softcap: float,
    grad=None,
    scales=(1.0, 1.0),
    wide=False,
):
    """(loss, z_loss, lse), each ``[N]`` in the stat dtype (loss and z_loss widened to fp64 where ``wide``); with
    ``grad`` ([N, C], may be ``input`` itself) the
    gradient ``a * dloss + b * dz_loss`` (``scales = (a, b)``) written into it, each chunk read before written."""
    n, c = input.shape
    cdt = compute_dtype(input.dtype)
    loss, z_loss, lse = (torch.empty(n, dtype=cdt, device=input.device) for _ in range(3))
    w = None if weight is None else weight.to(cdt)
    a, b = scales
    for r0, r1 in _chunks(n, c):
        z, s = _capped(input[r0:r1].to(cdt), softcap)
        m = torch.logsumexp(z, 1)
        t = target[r0:r1]
        valid = t != ignore_index
        loss[r0:r1], w_t, tc = _row_terms(z, m, t, valid, w, label_smoothing)
        z_loss[r0:r1] = torch.where(valid, lse_square_scale * m * m, 0) if lse_square_scale else 0
        lse[r0:r1] = m
        if grad is not None:
            g = _grad(z, s, m, tc, valid, w, w_t, label_smoothing, lse_square_scale, a, b)
            grad[r0:r1].copy_(g)  # every read of these rows (z, s, m) is done: safe when grad is input
    return (loss.double(), z_loss.double(), lse) if wide else (loss, z_loss, lse)


def backward(
    dloss,
    dz_loss,
    input,
    target,
    weight,
    lse,
    ignore_index: int,
    label_smoothing: float,
    lse_square_scale: float,
    softcap: float,
):
    """dinput ``[N, C]`` in input's dtype: ``dloss_r * dloss_r/dx + dz_loss_r * dz_loss_r/dx``, from input and
    the forward's lse."""
    n, c = input.shape
    cdt = compute_dtype(input.dtype)
    out = torch.empty((n, c), dtype=input.dtype, device=input.device)
    w = None if weight is None else weight.to(cdt)
    for r0, r1 in _chunks(n, c):
        z, s = _capped(input[r0:r1].to(cdt), softcap)
        m = lse[r0:r1].to(cdt)
        t = target[r0:r1]
        valid = t != ignore_index
        tc = torch.where(valid, t, 0).long()
        w_t = torch.ones_like(m) if w is None else w[tc]
        a = dloss[r0:r1].to(cdt)[:, None]
        b = 0.0 if dz_loss is None else dz_loss[r0:r1].to(cdt)[:, None]
        out[r0:r1] = _grad(z, s, m, tc, valid, w, w_t, label_smoothing, lse_square_scale, a, b)
    return out
