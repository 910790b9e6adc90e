"""causal_conv1d as a torch composite, the precision benchmark (and, in float64, the golden): the W taps as W
shifted views of the left-extended sequence, each product masked where ``seq_idx`` keeps positions apart, summed
in fp32 (fp64 for fp64) after the bias, rounded once; the backward written out the same way (a correlation for
dx, sums over B and T for dweight and dbias)."""

from __future__ import annotations

import torch

from . import compute_dtype


def extended(x, initial_states, width: int, cdt):
    """xe [B, D, W - 1 + T] in cdt: the initial states (zeros without them) before x."""
    b, d, _ = x.shape
    head = (
        initial_states.to(cdt)
        if initial_states is not None
        else torch.zeros(b, d, width - 1, dtype=cdt, device=x.device)
    )
    return torch.cat((head, x.to(cdt)), -1)


def masks(seq_idx, width: int, t: int):
    """Per tap w, where position t - (W - 1) + w enters token t ([B, 1, T] bools; None without seq_idx): the same
    sequence id, inside the row, the token not padding; and where a token is not padding (its id >= 0)."""
    if seq_idx is None:
        return None, None
    ids = seq_idx.long()
    before = torch.full((ids.shape[0], width - 1), -1, dtype=torch.long, device=ids.device)
    inside = torch.cat((torch.zeros_like(before, dtype=torch.bool), torch.ones_like(ids, dtype=torch.bool)), -1)
    ext = torch.cat((before, ids), -1)
    live = ids >= 0  # a padding token has no terms at all
    taps = [((ext[:, w : w + t] == ids) & inside[:, w : w + t] & live).unsqueeze(1) for w in range(width)]
    return taps, live.unsqueeze(1)


def preactivation(xe, weight, bias, taps, live, t: int):
    """z [B, D, T] = bias + sum_w weight[:, w] * xe[..., w : w + T], the terms seq_idx keeps out left out (not
    multiplied by 0); padding tokens 0."""
    width = weight.shape[1]
    w = weight.to(xe.dtype)
    z = torch.zeros(xe.shape[0], xe.shape[1], t, dtype=xe.dtype, device=xe.device)
    if bias is not None:
        z = z + bias.to(xe.dtype)[:, None]
    for k in range(width):
        term = w[:, k, None] * xe[..., k : k + t]
        z = z + (term if taps is None else torch.where(taps[k], term, 0))
    return z if live is None else torch.where(live, z, 0)


def final(xe, width: int):
    """The last W - 1 positions of the extended sequence."""
    return xe[..., xe.shape[2] - (width - 1) :]


def forward(x, weight, bias, initial_states, seq_idx, activation: str):
    """(out, final_states or None): the contract's z and act(z), rounded once to x's dtype."""
    cdt, width, t = compute_dtype(x.dtype), weight.shape[1], x.shape[2]
    xe = extended(x, initial_states, width, cdt)
    taps, live = masks(seq_idx, width, t)
    z = preactivation(xe, weight, bias, taps, live, t)
    out = (torch.nn.functional.silu(z) if activation == "silu" else z).to(x.dtype)
    return out, (None if initial_states is None else final(xe, width).to(x.dtype).contiguous())


def backward(x, weight, bias, initial_states, seq_idx, dout, dfinal_states, activation: str):
    """(dx, dweight, dbias, dinitial_states or None): g = dout * act'(z) (0 at padding), dxe its correlation with
    the weight over the terms that entered (plus dfinal_states at the last W - 1 positions), dweight and dbias
    its sums over B and T."""
    cdt, width, t = compute_dtype(x.dtype), weight.shape[1], x.shape[2]
    xe = extended(x, initial_states, width, cdt)
    taps, live = masks(seq_idx, width, t)
    g = dout.to(cdt)
    if activation == "silu":
        z = preactivation(xe, weight, bias, taps, live, t)
        s = torch.sigmoid(z)
        g = g * (s * (1 + z * (1 - s)))
    if live is not None:
        g = torch.where(live, g, 0)
    w = weight.to(cdt)
    dxe = torch.zeros_like(xe)
    dweight = torch.empty(weight.shape, dtype=cdt, device=x.device)
    for k in range(width):  # a term that did not enter has no gradient (not a product with 0: inf * 0 is nan)
        dx_k, dw_k = w[:, k, None] * g, g * xe[..., k : k + t]
        dxe[..., k : k + t] += dx_k if taps is None else torch.where(taps[k], dx_k, 0)
        dweight[:, k] = (dw_k if taps is None else torch.where(taps[k], dw_k, 0)).sum((0, 2))
    if dfinal_states is not None and width > 1:
        dxe[..., dxe.shape[2] - (width - 1) :] += dfinal_states.to(cdt)
    dx = dxe[..., width - 1 :].to(x.dtype).contiguous()  # results of their own, as the custom ops' fakes are
    dinit = None if initial_states is None else dxe[..., : width - 1].to(x.dtype).contiguous()
    return dx, dweight.to(x.dtype), g.sum((0, 2)).to(x.dtype), dinit
