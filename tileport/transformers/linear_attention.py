"""Gated DeltaNet layers (Qwen3-Next, Qwen3.5, OLMo-hybrid): the kernel functions a layer calls, replaced on that
layer alone by tileport's operators, each confirmed first by a probe of what transformers' function computes.

transformers marks these functions for kernel replacement (``@use_kernel_func_from_hub_with_fallback``) and
attaches them to the layer class (``@use_kernelized_func([...])``): every layer instance holds its own wrapper of
each function in ``module._kernel_funcs`` (keyed by the kernel's name, flash-linear-attention's and Dao-AILab's),
and while the layer's forward runs, a call of the file's global is routed to that instance's wrapper (eager and
torch.compile alike). A wrapper's ``forward`` bound on it, as the ``kernels`` package's ``kernelize`` does, is
therefore the per-instance replacement point: other layers and models keep theirs, and the undo puts back what
the wrapper had. ``causal_conv1d_forward`` (the cache's conv state, read and written) stays: it calls the two
convolutions, which are replaced.
"""

from __future__ import annotations

import inspect
import types
import weakref
from collections.abc import Callable
from dataclasses import dataclass

import torch

from .. import ops
from . import probe

ACTIVATIONS = (None, "none", "silu", "swish")  # what tileport's causal_conv1d computes


@dataclass(frozen=True)
class Kernel:
    """One of a layer's kernel functions: its name in ``_kernel_funcs``, tileport's operator, and how the call
    maps (``make(original, backend)``: the replacement, ``check(reference, module)``: None where transformers'
    function computes the operator's form on a probe, else why not)."""

    name: str
    operator: str
    detail: str
    make: Callable[[Callable, str | None], Callable]
    check: Callable[[Callable, torch.nn.Module], str | None]


def _cu_seqlens(cu_seqlens):
    """transformers' packed-sequence offsets (``cu_seq_lens_q``, int32 from its collators) as tileport's int64."""
    return cu_seqlens if cu_seqlens is None else cu_seqlens.to(torch.int64)


def _chunk(original, backend):
    def chunk_gated_delta_rule(
        query,
        key,
        value,
        g,
        beta,
        chunk_size=64,
        initial_state=None,
        output_final_state=False,
        use_qk_l2norm_in_kernel=False,
        cu_seqlens=None,
        **kwargs,
    ):
        """transformers' ``torch_chunk_gated_delta_rule`` call onto tileport's (the model's other keyword arguments
        dropped; ``chunk_size`` is tileport's own tiling, the result does not depend on it)."""
        return ops.chunk_gated_delta_rule(
            query,
            key,
            value,
            g,
            beta,
            initial_state=initial_state,
            output_final_state=output_final_state,
            use_qk_l2norm_in_kernel=use_qk_l2norm_in_kernel,
            cu_seqlens=_cu_seqlens(cu_seqlens),
            backend=backend,
        )

    return chunk_gated_delta_rule


def _recurrent(original, backend):
    def fused_recurrent_gated_delta_rule(
        query,
        key,
        value,
        g,
        beta,
        initial_state=None,
        output_final_state=False,
        use_qk_l2norm_in_kernel=False,
        cu_seqlens=None,
        **kwargs,
    ):
        """transformers' ``torch_recurrent_gated_delta_rule`` call onto tileport's decode step; where a gradient is
        asked of it (tileport's step is forward only), the chunked operator, the same recurrence."""
        args = (query, key, value, g, beta, initial_state)
        train = torch.is_grad_enabled() and any(isinstance(t, torch.Tensor) and t.requires_grad for t in args)
        fn = ops.chunk_gated_delta_rule if train else ops.fused_recurrent_gated_delta_rule
        return fn(
            query,
            key,
            value,
            g=g,
            beta=beta,
            initial_state=initial_state,
            output_final_state=output_final_state,
            use_qk_l2norm_in_kernel=use_qk_l2norm_in_kernel,
            cu_seqlens=_cu_seqlens(cu_seqlens),
            backend=backend,
        )

    return fused_recurrent_gated_delta_rule


def _seq_idx(x: torch.Tensor, cu_seqlens) -> torch.Tensor | None:
    """The sequence of each token of a packed row (x [1, D, T], offsets [N + 1]) as causal_conv1d's ``seq_idx``
    [1, T], so the convolution restarts at each sequence; None where nothing is packed."""
    if cu_seqlens is None:
        return None
    T = x.shape[-1]
    if x.shape[0] != 1 or int(cu_seqlens[-1]) != T:
        raise ValueError(
            f"packed sequences (cu_seq_lens_q) need one row of their T = {int(cu_seqlens[-1])} tokens, got x of "
            f"shape {tuple(x.shape)} (a cache's conv state prepended to packed sequences is not defined)"
        )
    positions = torch.arange(T, device=x.device)
    return (positions[:, None] >= cu_seqlens[1:-1].to(x.device)[None, :]).sum(-1, dtype=torch.int64)[None]


def _conv(original, backend):
    def causal_conv1d_fn(hidden_states, weight, bias=None, activation=None, **kwargs):
        """transformers' ``causal_conv1d_fn(x [B, D, T], weight [D, W], bias, activation)`` onto tileport's
        causal_conv1d; packed sequences (the model's ``cu_seq_lens_q``) as ``seq_idx``. Mixed dtypes (a weight
        not in x's dtype) and activations tileport lacks take the original."""
        if (
            activation not in ACTIVATIONS
            or weight.dtype != hidden_states.dtype
            or (bias is not None and bias.dtype != hidden_states.dtype)
        ):
            return original(hidden_states, weight, bias, activation=activation, **kwargs)
        seq_idx = kwargs.get("seq_idx")
        if seq_idx is None:
            seq_idx = _seq_idx(hidden_states, kwargs.get("cu_seq_lens_q", kwargs.get("cu_seqlens")))
        return ops.causal_conv1d(hidden_states, weight, bias, activation=activation, seq_idx=seq_idx, backend=backend)

    return causal_conv1d_fn


def _conv_update(original, backend):
    def causal_conv1d_update(hidden_states, conv_state, weight, bias=None, activation=None, **kwargs):
        """transformers' decode step ``causal_conv1d_update(x [B, D, T], conv_state [B, D, S], weight, bias,
        activation)`` (the state updated in place) onto tileport's; mixed dtypes and other activations take the
        original."""
        if (
            activation not in ACTIVATIONS
            or weight.dtype != hidden_states.dtype
            or conv_state.dtype != hidden_states.dtype
            or (bias is not None and bias.dtype != hidden_states.dtype)
        ):
            return original(hidden_states, conv_state, weight, bias, activation=activation)
        return ops.causal_conv1d_update(hidden_states, conv_state, weight, bias, activation=activation, backend=backend)

    return causal_conv1d_update


# The probes: transformers' function (its torch reference) beside tileport's torch backend on small seeded inputs,
# grouped value heads, a state carried in and out, several chunks.


def _delta_inputs(T: int, gen: torch.Generator):
    B, H, HV, K, V = 2, 2, 4, 8, 6
    q, k = (torch.randn(B, T, H, K, generator=gen) for _ in range(2))
    v = torch.randn(B, T, HV, V, generator=gen)
    g = -torch.nn.functional.softplus(torch.randn(B, T, HV, generator=gen))
    beta = torch.rand(B, T, HV, generator=gen)
    state = torch.randn(B, HV, K, V, generator=gen)
    return q, k, v, g, beta, state


def _same_pair(want, got) -> bool:
    return isinstance(want, tuple) and len(want) == 2 and all(probe.same(w, g, exact=False) for w, g in zip(want, got))


def _check_delta(tp_fn, T: int, extra: dict):
    def check(reference, module) -> str | None:
        q, k, v, g, beta, state = _delta_inputs(T, probe._generator(4))
        kw = dict(initial_state=state, output_final_state=True, use_qk_l2norm_in_kernel=True)
        try:
            with torch.no_grad():
                want = reference(q, k, v, g=g, beta=beta, **extra, **kw)
        except Exception as e:  # noqa: BLE001 - a function that does not take fla's arguments is left, with why
            return f"fails on a probe with fla's arguments: {type(e).__name__}"
        with torch.no_grad():
            got = tp_fn(q, k, v, g=g, beta=beta, **kw, backend="torch")
        return None if _same_pair(want, got) else "its output differs from the gated delta rule on a probe"

    return check


def _activation(module) -> str | None:
    return getattr(module, "activation", "silu")


def _check_conv(reference, module) -> str | None:
    act = _activation(module)
    if act not in ACTIVATIONS:
        return f"activation {act!r}: tileport's causal_conv1d has none, silu"
    gen = probe._generator(5)
    x, w, b = torch.randn(2, 6, 9, generator=gen), torch.randn(6, 4, generator=gen), torch.randn(6, generator=gen)
    try:
        with torch.no_grad():
            want = reference(x, w, b, activation=act)
    except Exception as e:  # noqa: BLE001 - a function that does not take Dao's arguments is left, with why
        return f"fails on a probe of x [B, D, T], weight [D, W]: {type(e).__name__}"
    with torch.no_grad():
        got = ops.causal_conv1d(x, w, b, activation=act, backend="torch")
    return None if probe.same(want, got, exact=False) else "its output differs from a causal conv1d on a probe"


def _check_conv_update(reference, module) -> str | None:
    act = _activation(module)
    if act not in ACTIVATIONS:
        return f"activation {act!r}: tileport's causal_conv1d_update has none, silu"
    if not hasattr(ops, "causal_conv1d_update"):
        return "tileport has no causal_conv1d_update operator"
    gen = probe._generator(6)
    x, state = torch.randn(2, 6, 1, generator=gen), torch.randn(2, 6, 4, generator=gen)
    w, b = torch.randn(6, 4, generator=gen), torch.randn(6, generator=gen)
    want_state, got_state = state.clone(), state.clone()
    try:
        with torch.no_grad():
            want = reference(x, want_state, w, b, activation=act)
    except Exception as e:  # noqa: BLE001 - a function that does not take Dao's arguments is left, with why
        return f"fails on a probe of x [B, D, 1], conv_state [B, D, W]: {type(e).__name__}"
    with torch.no_grad():
        got = ops.causal_conv1d_update(x, got_state, w, b, activation=act, backend="torch")
    if not (probe.same(want, got, exact=False) and probe.same(want_state, got_state, exact=False)):
        return "its output or its conv state differs from a causal conv1d step on a probe"
    return None


KERNELS = (
    Kernel(
        "chunk_gated_delta_rule",
        "chunk_gated_delta_rule",
        "g, beta, states, q/k l2norm, packed sequences",
        _chunk,
        _check_delta(lambda *a, **k: ops.chunk_gated_delta_rule(*a, **k), 10, {"chunk_size": 4}),
    ),
    Kernel(
        "fused_recurrent_gated_delta_rule",
        "fused_recurrent_gated_delta_rule",
        "decode steps; the chunked operator where a gradient is asked",
        _recurrent,
        _check_delta(lambda *a, **k: ops.fused_recurrent_gated_delta_rule(*a, **k), 3, {}),
    ),
    Kernel("causal_conv1d_fn", "causal_conv1d", "prefill, packed sequences as seq_idx", _conv, _check_conv),
    Kernel(
        "causal_conv1d_update", "causal_conv1d_update", "decode, conv state in place", _conv_update, _check_conv_update
    ),
)


def _signature(module: torch.nn.Module) -> bool:
    """Whether ``module`` has a gated DeltaNet layer's parameters: a depthwise ``conv1d``, ``A_log`` and
    ``dt_bias``."""
    conv = getattr(module, "conv1d", None)
    own = dict(module.named_parameters(recurse=False))
    return (
        isinstance(conv, torch.nn.Conv1d)
        and conv.groups == conv.in_channels == conv.out_channels
        and {"A_log", "dt_bias"} <= set(own)
    )


def _wrappers(module: torch.nn.Module) -> dict:
    funcs = module.__dict__.get("_kernel_funcs")
    return funcs if isinstance(funcs, dict) else {}


def _reference(wrapper) -> Callable | None:
    """The function a kernels wrapper calls where nothing routes it elsewhere (transformers' fallback, which picks
    fla or causal-conv1d where installed and on their devices, else its torch function); None where the wrapper is
    not of the form ``kernels`` makes."""
    if not isinstance(wrapper, torch.nn.Module):
        return None
    try:
        return inspect.getclosurevars(type(wrapper).forward).nonlocals.get("func")
    except TypeError:
        return None


# reference function -> {(kernel name, the layer's activation): why}: each function probed once, not once a layer
_VERDICTS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def identify(module: torch.nn.Module) -> list[tuple[Kernel, str | None]]:
    """Each of tileport's kernels ``module`` holds with None (to be replaced) or why it is left; a gated DeltaNet
    layer with none of them attached gives one ``(None, why)``; any other module an empty list."""
    wrappers = _wrappers(module)
    found = [k for k in KERNELS if k.name in wrappers]
    if not found:
        if _signature(module):
            return [
                (
                    None,
                    "gated DeltaNet parameters, but no kernel functions attached (transformers' kernels "
                    "integration is off): its functions are left",
                )
            ]
        return []
    out = []
    for kernel in found:
        func = _reference(wrappers[kernel.name])
        if func is None:
            out.append((kernel, "its kernel wrapper is not the kernels package's (no function to probe)"))
            continue
        reference = inspect.unwrap(func)  # the torch function behind transformers' fallback: the semantics
        verdicts, key = _VERDICTS.setdefault(reference, {}), (kernel.name, _activation(module))
        if key not in verdicts:
            verdicts[key] = kernel.check(reference, module)
        out.append((kernel, verdicts[key]))
    return out


def install(module: torch.nn.Module, kernel: Kernel, backend: str | None) -> Callable[[], None]:
    """``kernel``'s tileport replacement bound as the forward of ``module``'s own wrapper; returns the undo. The
    replacement ignores its ``self``: under torch.compile the routing calls it on the file's global wrapper."""
    wrapper = _wrappers(module)[kernel.name]
    had = "forward" in wrapper.__dict__
    before = wrapper.__dict__.get("forward")
    original = before if had else _reference(wrapper)
    replacement = kernel.make(original, backend)

    def forward(self, *args, **kwargs):
        return replacement(*args, **kwargs)

    forward.__name__ = forward.__qualname__ = replacement.__name__
    wrapper.forward = types.MethodType(forward, wrapper)

    def undo() -> None:
        if had:
            wrapper.forward = before
        else:
            del wrapper.forward

    return undo
