"""causal_conv1d's TileLang device kernels (CUDA, Ascend arch35): what every target shares around its builders,
written once: the kernels a target lowers for ``tileport lower``, the host side of a launch (the tensors in the
kernels' form, the outputs back in the contract's), and the math of one term (which positions enter a token).

The kernels' form: x and dout channel-last and contiguous ``[B, L, D]`` (a view where the models' x is already
that), the initial states ``[B, S, D]`` (S = W - 1; S = 0 without them), the sequence ids int32 ``[B, L]`` (a
``[1, 1]`` placeholder without them), the weight transposed to fp32 ``[W, D]`` and the bias fp32 ``[D]`` (zeros
without one). The backward runs three kernels: ``g = dout * act'(z)`` in fp32 ``[B, L, D]``, the input gradient
of every position (its correlation with the weight, plus dfinal_states), and the parameter gradients
``[W + 1, D]`` (a CTA or core per channel chunk walking every token in order: deterministic).
"""

from __future__ import annotations

import torch

from .. import outputs

KERNELS = ("fwd", "grad", "dx", "dweight")  # causal_conv1d_<name>


def variants(activation: str, initial_states, seq_idx) -> tuple[bool, bool, bool]:
    """(silu, has_init, has_seq): the build options a call selects."""
    return activation == "silu", initial_states is not None, seq_idx is not None


def lowered_for(build):
    """A target's ``lowered(dtype, dim, width=4, activation="silu", initial_states=False, seq_idx=False)`` over its
    ``build(name, dtype, width, silu, has_init, has_seq)``: {kernel name: prim_func}, D a runtime value."""

    def lowered(
        dtype: torch.dtype,
        dim: int,
        width: int = 4,
        activation: str = "silu",
        initial_states: bool = False,
        seq_idx: bool = False,
    ) -> dict:
        """{kernel name: prim_func} of the forward and the backward's three kernels for ``width`` taps (``dim``
        unused: channels and tokens are runtime values), for ``tileport lower``."""
        if width < 1:
            raise ValueError(f"width must be >= 1, got {width}")
        opts = (dtype, width, activation == "silu", bool(initial_states), bool(seq_idx))
        return {f"causal_conv1d_{k}": build(k, *opts) for k in KERNELS}

    return lowered


def inputs(x, weight, bias, initial_states, seq_idx) -> tuple:
    """(xt [B, L, D], h [B, S, D], ids int32, weight fp32 [W, D], bias fp32 [D]): the kernels' form."""
    B, D, _ = x.shape
    xt = x.transpose(1, 2).contiguous()  # a view where x is channel-last already
    h = initial_states.transpose(1, 2).contiguous() if initial_states is not None else x.new_empty((B, 0, D))
    ids = seq_idx.to(torch.int32).contiguous() if seq_idx is not None else torch.zeros((1, 1), dtype=torch.int32)
    wt = weight.t().float().contiguous()
    b = bias.float().contiguous() if bias is not None else torch.zeros(D, dtype=torch.float32, device=x.device)
    return xt, h, ids.to(x.device), wt, b


def in_layout_of(x, t_view):
    """A [B, L, D] result as [B, D, L] in x's layout: a view where x is channel-last, else contiguous."""
    out = t_view.transpose(1, 2)
    return out if x.stride(1) == 1 or x.shape[1] <= 1 else out.contiguous()


def final_states(x, initial_states, width: int):
    """The last W - 1 positions of the initial states followed by x: a copy, contiguous."""
    keep = width - 1
    both = torch.cat((initial_states, x[..., max(0, x.shape[2] - keep) :]), -1)
    return both[..., both.shape[2] - keep :].contiguous()


def forward(runner, build, x, weight, bias, initial_states, seq_idx, activation: str):
    """(out, final_states or None) through a target's runner and builder."""
    width = weight.shape[1]
    xt, h, ids, wt, b = inputs(x, weight, bias, initial_states, seq_idx)
    out_t = outputs.empty(tuple(xt.shape), x.dtype, x.device)
    fn = runner.kernel(
        "causal_conv1d_fwd", build, "fwd", x.dtype, width, *variants(activation, initial_states, seq_idx)
    )
    fn(xt, h, ids, wt, b, out_t)
    final = None if initial_states is None else final_states(x, initial_states, width)
    return in_layout_of(x, out_t), final


def backward(runner, build, x, weight, bias, initial_states, seq_idx, dout, dfinal_states, activation: str):
    """(dx, dweight, dbias, dinitial_states or None) through a target's runner and builder: g, then the
    positions' gradients, then the parameters' (fp32, rounded once to x's dtype)."""
    width = weight.shape[1]
    opts = (x.dtype, width, *variants(activation, initial_states, seq_idx))
    xt, h, ids, wt, b = inputs(x, weight, bias, initial_states, seq_idx)
    B, L, D = xt.shape
    g = outputs.empty((B, L, D), torch.float32, x.device)
    runner.kernel("causal_conv1d_grad", build, "grad", *opts)(xt, h, ids, wt, b, dout.transpose(1, 2).contiguous(), g)
    keep = width - 1
    df = dfinal_states.transpose(1, 2).contiguous() if dfinal_states is not None else x.new_zeros((B, keep, D))
    dx_t = outputs.empty((B, L, D), x.dtype, x.device)
    dh = outputs.empty(tuple(h.shape), x.dtype, x.device)
    runner.kernel("causal_conv1d_dx", build, "dx", *opts)(g, ids, wt, df, dx_t, dh)
    dwb = outputs.empty((width + 1, D), torch.float32, x.device)
    runner.kernel("causal_conv1d_dweight", build, "dweight", *opts)(xt, h, ids, g, dwb)
    dinit = None if initial_states is None else dh.transpose(1, 2).contiguous()
    return in_layout_of(x, dx_t), dwb[:width].t().to(x.dtype).contiguous(), dwb[width].to(x.dtype), dinit


def update_lowered_for(build):
    """A target's ``lowered(dtype, dim, width=4, activation="silu")`` for causal_conv1d_update: its step runs the
    forward kernel over the last T + W - 1 positions of ``[conv_state, x]``."""

    def lowered(dtype: torch.dtype, dim: int, width: int = 4, activation: str = "silu") -> dict:
        """{kernel name: prim_func} of the step (``dim`` unused: a runtime value), for ``tileport lower``."""
        return {"causal_conv1d_update_fwd": build("fwd", dtype, width, activation == "silu", False, False)}

    return lowered


def update_forward(runner, build, x, conv_state, weight, bias, activation: str):
    """(out, new_state) of one step (``tileport.ops.causal_conv1d_update``'s contract): the forward kernel over the
    window ``[conv_state, x]``'s last T + W - 1 positions (each output reads real positions only), its last T
    outputs; the new state the last S positions of ``[conv_state, x]`` (a copy)."""
    t, width = x.shape[2], weight.shape[1]
    xs = torch.cat((conv_state, x), -1)
    window = xs[..., xs.shape[2] - (t + width - 1) :]
    out, _ = forward(runner, build, window, weight, bias, None, None, activation)
    return out[..., width - 1 :].contiguous(), xs[..., t:].contiguous()
