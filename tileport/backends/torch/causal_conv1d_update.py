"""causal_conv1d_update as a torch composite, the precision benchmark (and, in float64, the golden): the step is
causal_conv1d's reference with the state's last W - 1 inputs as its initial states, and the new state the last S
positions of the state followed by x (a copy)."""

from __future__ import annotations

import torch

from . import causal_conv1d


def forward(x, conv_state, weight, bias, activation: str):
    """(out, new_state): out in fp32 (fp64 for fp64) rounded once to x's dtype; new_state a new contiguous tensor."""
    s, t, width = conv_state.shape[2], x.shape[2], weight.shape[1]
    out, _ = causal_conv1d.forward(x, weight, bias, conv_state[..., s - (width - 1) :], None, activation)
    return out, torch.cat((conv_state, x), -1)[..., t:].contiguous()
