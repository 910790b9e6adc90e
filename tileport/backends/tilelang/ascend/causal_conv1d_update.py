"""causal_conv1d_update (one decoding step, ``tileport.ops.causal_conv1d_update``'s contract) on causal_conv1d's
Ascend arch35 (Ascend 950) kernel in TileLang's ascend dialect: the forward over the last T + W - 1 positions of
``[conv_state, x]``, its last T outputs; the new state a copy of the last S positions
(``../causal_conv1d_device.py``). Lowered here, never run.
"""

from __future__ import annotations

from .. import causal_conv1d_device as device
from .causal_conv1d import RUNNER, build

lowered = device.update_lowered_for(build)


def forward(x, conv_state, weight, bias, activation: str):
    """(out, new_state) on an Ascend 950 NPU."""
    return device.update_forward(RUNNER, build, x, conv_state, weight, bias, activation)
