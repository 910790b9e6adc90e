"""causal_conv1d: the short causal depthwise convolution of gated DeltaNet, Mamba and their hybrids (the contract,
stated once here).

Semantics (Dao-AILab's ``causal_conv1d_fn``, which transformers' Qwen3-Next, Qwen3.5 and OLMo-hybrid layers call,
and flash-linear-attention's ``ShortConvolution``):
- ``x [B, D, T]`` (channels D, tokens T; any strides: the models hand the transposed view of a ``[B, T, D]``
  activation, channel-last, which the kernels read in place), ``weight [D, W]`` and ``bias [D]`` (optional) in
  x's dtype, ``W >= 1``. With ``xe`` the sequence extended to the left by ``W - 1`` positions, each ``0``, or the
  ``initial_states [B, D, W - 1]`` (the ``W - 1`` inputs before the start, oldest first) where given:
  ``z[b, d, t] = bias[d] + sum_{w < W} weight[d, w] * xe[b, d, t - (W - 1) + w]`` and
  ``out = z`` (``activation`` None or ``"none"``) or ``silu(z) = z * sigmoid(z)`` (``"silu"``, alias ``"swish"``).
- Without ``seq_idx`` every term enters, a position before the start holding its zero (a zero that multiplies, as
  ``F.conv1d``'s padding does: an inf weight gives nan there) or its initial state.
- ``seq_idx [B, T]`` (int32 or int64; optional) packs several sequences into a row: the term at position ``s``
  enters ``z[b, d, t]`` only where ``seq_idx[b, s] == seq_idx[b, t]`` (the convolution restarts where the id
  changes; ids need not be sorted); a term that does not enter is left out, not multiplied by 0; a position before
  the start belongs to no sequence (so with ``seq_idx`` the initial states are never read); a token whose id is
  negative is padding: its output is 0 (no bias, no activation) and no gradient flows from it.
- ``final_states [B, D, W - 1]``: the last ``W - 1`` positions of ``xe`` (x's last inputs, preceded by the
  initial states' where ``T < W - 1``), returned with ``return_final_states=True``.
- Math in fp32 (fp64 for fp64 inputs), ``out`` rounded once to x's dtype; final states are copies (exact).
- Backward: with ``g = dout * act'(z)`` (0 at padding tokens), ``dxe[s] = sum_w weight[d, w] * g[s + (W - 1) - w]``
  (the terms that entered, a correlation) plus ``dfinal_states`` at the last ``W - 1`` positions; ``dx`` and
  ``dinitial_states`` are its two parts; ``dweight[d, w] = sum_{b, t} g * xe[t - (W - 1) + w]`` and
  ``dbias[d] = sum_{b, t} g``, summed in fp32 or better (deterministic, the same bits for any thread count),
  in x's dtype. Differentiable in x, weight, bias and initial_states; seq_idx has no gradient.
- Empty inputs give empty outputs (``T = 0``: out empty, final states the initial ones, gradients of weight and
  bias zero). Inputs holding nan/inf spread to the outputs that read them, as the formula says.

The derived forms (``causal_conv1d_fwd`` / ``causal_conv1d_bwd``, generated from ``spec.py``) take the
declaration's tensors: the final states are an output exactly when ``initial_states`` are given. What a backend's
``causal_conv1d`` kernel module gives (called for a non-empty output; tensors as given: any strides):

    forward(x, weight, bias, initial_states, seq_idx, activation: str) -> (out, final_states or None)
    backward(x, weight, bias, initial_states, seq_idx, dout, dfinal_states, activation: str)
        -> (dx, dweight, dbias, dinitial_states or None)

``activation`` is ``"none"`` or ``"silu"``; ``dinitial_states`` is None where ``initial_states`` is (and, from the
derived ``causal_conv1d_bwd`` under torch.compile, where ``dfinal_states`` is: the declaration's optional results
follow every optional tensor that binds their width); ``dfinal_states`` may be None (no gradient reaches the final
states). ``out`` and ``dx`` may keep x's layout (the CPU kernels do, where x is channel-last or contiguous: the
models' next transpose is then free); every other result is contiguous. Under torch.compile the custom ops' fake
results are contiguous, so the front hands x over contiguous there.
"""

from __future__ import annotations

import torch

from .spec import ACTIVATIONS, SPEC  # noqa: F401

OP = "causal_conv1d"
_API = SPEC.api
causal_conv1d_fwd, causal_conv1d_bwd = _API.forward, _API.backward  # the declaration's forms


def causal_conv1d(
    x,
    weight,
    bias=None,
    activation=None,
    initial_states=None,
    return_final_states=False,
    seq_idx=None,
    *,
    final_states_out=None,
    backend=None,
):
    """``out [B, D, T]``, or ``(out, final_states [B, D, W - 1])`` with ``return_final_states=True``: Dao-AILab's
    ``causal_conv1d_fn`` (transformers' ``causal_conv1d_fn(x, weight, bias, activation)`` argument order).

    ``activation``: None, ``"silu"`` or ``"swish"``; ``initial_states [B, D, W - 1]``: the inputs before the start;
    ``seq_idx [B, T]``: the sequence of each token of a packed batch (negative: padding, output 0); not with
    initial or final states, as causal-conv1d. ``final_states_out``: written with the final states and returned.
    Differentiable in x, weight, bias and initial_states."""
    if not isinstance(return_final_states, bool):
        raise TypeError(f"return_final_states must be a bool, got {type(return_final_states).__name__}")
    if seq_idx is not None and (initial_states is not None or return_final_states):
        raise ValueError(
            "seq_idx cannot be combined with initial_states or return_final_states (as in causal-conv1d: the "
            "states of a packed batch belong to no one sequence)"
        )
    if final_states_out is not None and not return_final_states:
        raise ValueError("final_states_out is written only with return_final_states=True")
    if return_final_states and initial_states is None and _conv_shaped(x, weight):
        b, d, _ = x.shape
        initial_states = x.new_zeros(b, d, weight.shape[1] - 1)  # zeros before the start: the final states follow
    if torch.compiler.is_compiling() and isinstance(x, torch.Tensor):
        # The custom op's fake results are contiguous; the kernels give x's layout, so under torch.compile x is
        # handed over contiguous (the graph's producer can write it so) and every result matches its fake.
        x = x.contiguous()
    out, final = _API.function(x, weight, bias, initial_states, seq_idx, activation=activation, backend=backend)
    if not return_final_states:
        return out
    if final_states_out is not None:
        if not isinstance(final_states_out, torch.Tensor) or final_states_out.shape != final.shape:
            got = getattr(final_states_out, "shape", type(final_states_out).__name__)
            raise ValueError(f"final_states_out must be a tensor of shape {tuple(final.shape)}, got {got}")
        final = final_states_out.copy_(final)
    return out, final


def _conv_shaped(x, weight) -> bool:
    """Whether x and weight have the ranks the zeros of the initial states are sized from (else the derived
    checks, called next, say what is wrong)."""
    return (
        isinstance(x, torch.Tensor)
        and isinstance(weight, torch.Tensor)
        and x.dim() == 3
        and weight.dim() == 2
        and weight.shape[1] >= 1
    )
