"""l2norm benchmark spec: tileport backends against the composite users write, eager and torch.compile.

Modes: ``fwd`` (y, rstd), ``bwd`` (dx through autograd, graph built once), ``fwdbwd`` (both). Minimum traffic
counts each tensor once: fwd reads x and writes y and rstd; bwd reads x, rstd, dy and writes dx.
"""

from __future__ import annotations

import math

import torch
import torch._functorch.config  # noqa: F401  (donated_buffer, patched for the bwd mode)

import tileport

EPS = 1e-6
MODES = ("fwd", "bwd", "fwdbwd")
# token count x hidden size of common models (one row per token); head-dim rows as qk-norm applies them
WORKLOADS = {
    "llama3-8b-decode": (32, 4096),
    "llama3-8b-prefill": (4096, 4096),
    "qwen2.5-7b-prefill": (2048, 3584),
    "llama3-70b-decode": (16, 8192),
    "qk-norm-128": (16384, 128),
    "deepseek-v3-prefill": (1024, 7168),
}
SWEEP = [(1, 128), (33, 100), (1024, 512), (256, 4096), (4096, 4096), (16384, 4096)]


def bytes_moved(shape: tuple[int, ...], dtype: torch.dtype, mode: str) -> int:
    n, rows, e = math.prod(shape), math.prod(shape[:-1]), torch.tensor([], dtype=dtype).element_size()
    fwd = 2 * n * e + 4 * rows
    bwd = 3 * n * e + 4 * rows
    return {"fwd": fwd, "bwd": bwd, "fwdbwd": fwd + bwd}[mode]


def _composite(x: torch.Tensor) -> torch.Tensor:
    """The l2norm users write in torch (fp32 math, as fla's reference does)."""
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).sum(-1, keepdim=True) + EPS)).to(x.dtype)


def _autograd(fn, x: torch.Tensor, dy: torch.Tensor, mode: str):
    if mode == "fwd":
        return lambda: fn(x)
    xg = x.detach().requires_grad_(True)
    if mode == "fwdbwd":
        return lambda: torch.autograd.grad(fn(xg), xg, dy)
    # bwd: the graph is built once and each call only runs the backward; retain_graph=True needs AOT autograd's
    # donated buffers off for the torch.compile provider (it compiles on this first call)
    with torch._functorch.config.patch(donated_buffer=False):
        y = fn(xg)
    return lambda: torch.autograd.grad(y, xg, dy, retain_graph=True)


def providers(shape, dtype, mode: str, backends: list[str], compile_baseline: bool = True, device="cpu") -> dict:
    """Callables to time side by side: each tileport backend (and, for fwd, its kernel-only form writing
    into preallocated outputs), torch eager, torch.compile of the same composite."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(shape, generator=g).to(dtype).to(device)
    dy = torch.randn(shape, generator=g).to(dtype).to(device)
    out: dict = {}
    for b in backends:
        if mode == "fwd":
            y, rstd = torch.empty_like(x), torch.empty(shape[:-1], device=device)
            out[f"{b}:kernel"] = lambda b=b, y=y, r=rstd: tileport.l2norm_fwd(x, EPS, backend=b, out=(y, r))
            out[b] = lambda b=b: tileport.l2norm_fwd(x, EPS, backend=b)
        else:
            out[b] = _autograd(lambda t, b=b: tileport.l2norm(t, EPS, backend=b), x, dy, mode)
    out["torch-eager"] = _autograd(_composite, x, dy, mode)
    if compile_baseline:
        torch._dynamo.reset()  # a fresh static-shape compile per shape, never the recompile limit
        out["torch-compile"] = _autograd(torch.compile(_composite, dynamic=False), x, dy, mode)
    return out


def tileport_backends(device_kind: str = "cpu") -> list[str]:
    """The available tileport backends that serve l2norm on that device kind, except the torch reference
    and interpreters (milliseconds per call: not a speed contender)."""
    return [
        b.name for b in tileport.available_backends()
        if b.available and "l2norm" in b.ops and device_kind in b.device_kinds and b.name != "torch" and not b.interpreted
    ]  # fmt: skip
