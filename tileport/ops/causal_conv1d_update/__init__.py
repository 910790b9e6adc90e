"""causal_conv1d_update: one decoding step of the short causal convolution, its conv state updated in place (the
contract, stated once here).

Semantics (Dao-AILab's ``causal_conv1d_update`` without ``cache_seqlens``, as transformers' Qwen3-Next, Qwen3.5 and
OLMo-hybrid layers call it, and its pure-torch fallback of the same name):
- ``x [B, D]`` (one token) or ``[B, D, T]`` (a few), ``conv_state [B, D, S]`` with ``S >= W - 1`` (the last S
  inputs, oldest first; transformers keeps ``S = W``), ``weight [D, W]`` and ``bias [D]`` (optional), all in x's
  dtype. With ``xs = [conv_state, x]`` along the last dimension (S + T positions):
  ``out[b, d, t] = act(bias[d] + sum_{w < W} weight[d, w] * xs[b, d, S + t - (W - 1) + w])``, ``act`` None /
  ``"none"`` or ``"silu"`` (alias ``"swish"``): causal_conv1d with the state's last W - 1 inputs as its initial
  states. Math in fp32 (fp64 for fp64), rounded once to x's dtype; ``out`` has x's shape.
- The state then holds the last S positions of ``xs`` (shifted by T, x appended): written into ``conv_state`` in
  place (a copy of the inputs, exact), as causal-conv1d does.
- Forward only (as causal-conv1d's): no input is differentiable through it.

The derived form (``causal_conv1d_update_fwd``, generated from ``spec.py``) takes x as ``[B, D, T]`` and returns
``(out, new_state)`` without touching ``conv_state``; the front copies ``new_state`` in, so under torch.compile the
custom op mutates nothing and the graph holds a plain ``copy_``. What a backend's ``causal_conv1d_update`` kernel
module gives (tensors as given: any strides):

    forward(x, conv_state, weight, bias, activation: str) -> (out, new_state)

``activation`` is ``"none"`` or ``"silu"``; ``new_state`` is a new contiguous tensor, never ``conv_state`` itself.
"""

from __future__ import annotations

import torch

from .spec import SPEC

OP = "causal_conv1d_update"
_API = SPEC.api
causal_conv1d_update_fwd = _API.forward  # the declaration's form: (out, new_state), conv_state untouched


def causal_conv1d_update(x, conv_state, weight, bias=None, activation=None, *, backend=None):
    """``out`` of x's shape (``[B, D]`` or ``[B, D, T]``), ``conv_state [B, D, S]`` (S >= W - 1) updated in place:
    Dao-AILab's ``causal_conv1d_update`` (transformers' argument order). ``activation``: None, ``"silu"`` or
    ``"swish"``."""
    one = isinstance(x, torch.Tensor) and x.dim() == 2
    xt = x.unsqueeze(-1) if one else x
    with torch.no_grad():  # forward only: nothing of the step is differentiated, the state is a cache
        out, new_state = _API.forward(xt, conv_state, weight, bias, activation=activation, backend=backend)
        conv_state.copy_(new_state)
    return out.squeeze(-1) if one else out
