"""The front's row math in plain torch, rows in chunks (a 256k vocabulary never needs more than a chunk's
temporaries): the probability targets' loss and gradient from the kernel's lse, and the z-loss' gradient
alone (a backward through the returned z_loss). Math in the statistics dtype, results rounded once."""

from __future__ import annotations

import torch

from ...dtypes import stat_dtype

CHUNK_ELEMENTS = 1 << 21  # logits per chunk of rows


def _chunks(n: int, c: int):
    step = max(1, CHUNK_ELEMENTS // max(c, 1))
    for r0 in range(0, n, step):
        yield r0, min(n, r0 + step)


def _capped(x, softcap: float):
    """(z, s): ``softcap * tanh(x / softcap)`` and its slope ``1 - tanh^2``; x and None without a softcap."""
    if not softcap:
        return x, None
    th = torch.tanh(x / softcap)
    return softcap * th, 1 - th * th


def prob_rows(
    x, q, weight, label_smoothing: float, lse_square_scale: float, softcap: float, lse, scales=(1.0, 1.0), grad=None
):
    """(loss, z_loss) ``[N]`` of rows ``x [N, C]`` against class probabilities ``q [N, C]`` (torch's: ``-sum_c w_c
    q'_c log p_c`` with ``q' = (1 - eps) q + eps / C``; z_loss = s lse^2 on every row), ``lse`` the kernel's. With
    ``grad`` ([N, C], may be x itself) ``a * dloss + b * dz_loss`` is written into it, each chunk read first."""
    n, c = x.shape
    cdt = stat_dtype(x.dtype)
    loss = torch.empty(n, dtype=cdt, device=x.device)
    w = None if weight is None else weight.to(cdt)
    a, b = scales
    eps = label_smoothing
    for r0, r1 in _chunks(n, c):
        z, s = _capped(x[r0:r1].to(cdt), softcap)
        m = lse[r0:r1, None].to(cdt)
        logp = z - m
        wq = q[r0:r1].to(cdt) * (1 - eps) + eps / c
        if w is not None:
            wq = wq * w
        loss[r0:r1] = -(wq * logp).sum(1)
        if grad is not None:
            p = torch.exp(logp)
            g = a * (wq.sum(1, keepdim=True) * p - wq)
            if lse_square_scale:
                g += (b * 2 * lse_square_scale) * m * p
            if s is not None:
                g *= s
            grad[r0:r1].copy_(g)
    return loss, lse_square_scale * lse.to(cdt) ** 2


def z_loss_grad(x, lse, softcap: float, lse_square_scale: float, rows):
    """``rows[r] * dz_loss_r/dx`` ``[N, C]`` in x's dtype: ``s_c 2 s lse p_c`` per row (``rows`` 0 where a row has
    no z-loss)."""
    n, c = x.shape
    cdt = stat_dtype(x.dtype)
    out = torch.empty((n, c), dtype=x.dtype, device=x.device)
    for r0, r1 in _chunks(n, c):
        z, s = _capped(x[r0:r1].to(cdt), softcap)
        m = lse[r0:r1, None].to(cdt)
        g = (2 * lse_square_scale) * (rows[r0:r1, None].to(cdt) * m) * torch.exp(z - m)
        out[r0:r1] = g if s is None else g * s
    return out
