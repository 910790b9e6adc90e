"""The rotary function an attention module calls (transformers' ``apply_rotary_pos_emb``), found by the global
its forward looks up and confirmed by what it computes (GPT-NeoX halves over q, k [B, H, T, D] with cos, sin
[B or 1, T, R]; partial rotary where R < D), replaced by tileport's rope for the patched modules alone.

The forward reads the function as its file's global (transformers' kernel hub, where installed, makes that global
a router of its own). While any model of that file is patched, the global is a dispatcher: tileport's rope inside
a patched attention module's call (its instance forward sets a context variable, as the kernel hub's routing
does), the function that was there everywhere else; the last ``unpatch`` puts the global back. While torch.compile
traces, the route is a plain attribute (dynamo traces no ``ContextVar``, as the ``kernels`` package's routing
knows), so the patched model compiles without a break. Where q, k, cos and sin are not of one dtype (OLMo-hybrid's
fp32 cos and sin beside 16-bit q and k: the product in fp32, rounded once), the original computes it: tileport's
rope takes one dtype.
"""

from __future__ import annotations

import contextvars
import inspect
import sys
import weakref
from collections.abc import Callable

import torch

from .. import ops
from . import probe

NAME = "apply_rotary_pos_emb"
_OFF = object()


class _Route:
    """The backend a patched attention module routes the global to, or ``_OFF``: a context variable in eager code
    (threads and tasks apart); an attribute while torch.compile traces (each ``ContextVar.get``/``set`` was a graph
    break around every patched attention), whose changes the compiled code replays."""

    def __init__(self) -> None:
        self._var: contextvars.ContextVar = contextvars.ContextVar("tileport_rotary", default=_OFF)
        self.traced = _OFF

    def get(self):
        return self.traced if torch.compiler.is_compiling() else self._var.get()

    def set(self, value):
        if torch.compiler.is_compiling():
            before, self.traced = self.traced, value
            return before
        return self._var.set(value)

    def reset(self, token) -> None:
        if torch.compiler.is_compiling():
            self.traced = token
        else:
            self._var.reset(token)


_ACTIVE = _Route()
_INSTALLED: dict[str, list] = {}  # module name -> [the original global, patched modules counted]


def _dispatcher(original: Callable) -> Callable:
    """The global while patched: tileport's rope where a patched module runs, else ``original``."""
    try:
        params = list(inspect.signature(original).parameters)
    except (TypeError, ValueError):
        params = ["q", "k", "cos", "sin", "unsqueeze_dim"]
    at = params.index("unsqueeze_dim") - 4 if "unsqueeze_dim" in params else None

    def apply_rotary_pos_emb(q, k, cos, sin, *args, **kwargs):
        backend = _ACTIVE.get()
        if backend is _OFF or not q.dtype == k.dtype == cos.dtype == sin.dtype:
            return original(q, k, cos, sin, *args, **kwargs)
        unsqueeze_dim = kwargs.get("unsqueeze_dim", args[at] if at is not None and len(args) > at else 1)
        return ops.apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=unsqueeze_dim, backend=backend)

    apply_rotary_pos_emb.__tileport_original__ = original
    return apply_rotary_pos_emb


def install(module_name: str, owner: torch.nn.Module) -> Callable[[], None]:
    """The dispatcher in ``module_name``'s globals, counted once per patched attention module ``owner`` (and
    released when ``owner`` is unpatched or collected); the undo."""
    home = sys.modules[module_name]
    entry = _INSTALLED.get(module_name)
    if entry is None:
        original = getattr(home, NAME)
        entry = _INSTALLED[module_name] = [original, 0]
        setattr(home, NAME, _dispatcher(original))
    entry[1] += 1

    def release(entry=entry) -> None:
        entry[1] -= 1
        if entry[1] == 0 and _INSTALLED.get(module_name) is entry:
            setattr(home, NAME, entry[0])
            del _INSTALLED[module_name]

    return weakref.finalize(owner, release)  # called by unpatch, or when the module is collected


def routed_forward(cls_forward: Callable, backend: str | None) -> Callable:
    """An attention module's forward under which the dispatcher takes tileport's rope (``backend``)."""

    def forward(self, *args, **kwargs):
        token = _ACTIVE.set(backend)
        try:
            return cls_forward(self, *args, **kwargs)
        finally:
            _ACTIVE.reset(token)

    return forward


def original(fn: Callable) -> Callable:
    """The function behind a dispatcher (``fn`` itself where it is none)."""
    return getattr(fn, "__tileport_original__", fn)


def _inputs(rotary: int, dtype: torch.dtype, gen: torch.Generator):
    b, h, hk, t, d = 2, 4, 2, 5, 16
    q = torch.randn(b, h, t, d, generator=gen).to(dtype)
    k = torch.randn(b, hk, t, d, generator=gen).to(dtype)
    inv = 1.0 / (10000 ** (torch.arange(0, rotary, 2, dtype=torch.float64) / rotary))
    ang = torch.arange(t, dtype=torch.float64)[:, None] * inv[None, :]
    emb = torch.cat((ang, ang), -1)[None].expand(b, t, rotary)
    return q, k, emb.cos().to(dtype), emb.sin().to(dtype)


def identify(fn: Callable) -> str | None:
    """None where ``fn`` computes transformers' rotary embedding (full and, where it takes it, partial), else why
    not."""
    fn = original(fn)
    gen = probe._generator(2)
    for rotary in (16, 8):
        q, k, cos, sin = _inputs(rotary, torch.float32, gen)
        try:
            with torch.no_grad():
                want = fn(q, k, cos, sin)
        except Exception:  # noqa: BLE001 - a form it does not take (partial rotary) is not asked of it
            if rotary == 16:
                return "it fails on q, k [B, H, T, D] with cos, sin [B, T, D]"
            continue
        with torch.no_grad():
            got = ops.apply_rotary_pos_emb(q, k, cos, sin, backend="torch")
        if not (
            isinstance(want, tuple) and len(want) == 2 and all(probe.same(w, g, exact=False) for w, g in zip(want, got))
        ):
            return f"its output differs from the GPT-NeoX rotary (rotary dim {rotary} of 16)"
    return None
