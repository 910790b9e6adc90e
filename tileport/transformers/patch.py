"""``patch(model)``: tileport's operators put into an instantiated transformers model, found by structure and
confirmed by probes (``norms``, ``rotary``, ``mlp``, ``linear_attention``, ``loss``); ``unpatch(model)`` puts back
what was there.

A site is replaced on the module instance (its ``forward`` bound on the instance), never on its class: other
models in the process, and other instances of the same class, compute as they did (the rotary global is a
dispatcher while a model of its file is patched: ``rotary``). Parameters and buffers are untouched, so the state
dict's keys and values are the same before and after.
"""

from __future__ import annotations

import types
import weakref
from collections.abc import Callable

import torch

from . import functions, linear_attention, loss, mlp, norms, rotary
from .report import PatchReport, Site

LOSSES = ("fused_linear", "cross_entropy", None)
_UNDO: weakref.WeakKeyDictionary[torch.nn.Module, list[Callable[[], None]]] = weakref.WeakKeyDictionary()


def _bind(module: torch.nn.Module, fn: Callable) -> Callable[[], None]:
    """``module.forward = fn`` on the instance; returns the undo."""
    had = "forward" in module.__dict__
    before = module.__dict__.get("forward")
    module.forward = types.MethodType(fn, module)

    def undo() -> None:
        if had:
            module.forward = before
        else:
            del module.forward

    return undo


def _name(obj) -> str:
    return getattr(obj, "__qualname__", type(obj).__qualname__)


def patch(
    model: torch.nn.Module,
    *,
    rms_norm: bool = True,
    rope: bool = True,
    mlp: bool = True,
    linear_attention: bool = True,
    loss: str | None = "fused_linear",
    backend: str | None = None,
    dry_run: bool = False,
) -> PatchReport:
    """Replace the RMSNorms, the rotary function, the gated MLPs, the gated DeltaNet layers' kernel functions (the
    chunked and recurrent gated delta rule, the causal convolution and its decode step) and the causal-LM loss of
    ``model`` by tileport's operators (each switch turns one kind off; ``loss`` "fused_linear", "cross_entropy" or
    None). Returns what was replaced and what was left and why; ``dry_run`` only reports. A model already patched is
    unpatched first."""
    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"patch takes a torch.nn.Module (a transformers model), got {type(model).__name__}")
    if loss not in LOSSES:
        raise ValueError(f"loss must be one of {', '.join(map(repr, LOSSES))}, got {loss!r}")
    if model in _UNDO and not dry_run:
        unpatch(model)
    report, undo = PatchReport(), []
    want = {
        "rms_norm": rms_norm,
        "rope": rope,
        "mlp": mlp,
        "linear_attention": linear_attention,
        "loss": loss is not None,
    }
    for path, module in model.named_modules():
        for _kind, site in _sites(module, path, want, loss, backend):
            if isinstance(site, Site):
                report.left.append(site)
                continue
            found, operator, detail, apply = site
            report.replaced.append(Site(path, found, operator, detail))
            if not dry_run:
                undo.append(apply())
    if undo:
        _UNDO[model] = undo
    return report


def _site(kind: str, path: str, cls: str, form, apply):
    """A probed site: left with why (``form`` a string), or replaced by ``form``'s operator through ``apply``."""
    if isinstance(form, str):
        return kind, Site(path, cls, kind, form)
    return kind, (cls, form.operator, form.describe(), apply)


def _sites(module, path, want, loss_mode, backend):
    """(kind, Site left) or (kind, (found, operator, detail, apply)) for each site ``module`` is."""
    cls = type(module).__qualname__
    if want["rms_norm"] and norms.candidate(module) is None:
        form = norms.identify(module)
        yield _site(
            "rms_norm",
            path,
            cls,
            form,
            lambda: _bind(module, norms.forward_for(module, form, backend)),
        )
    if want["mlp"] and mlp.candidate(module) is None:
        form = mlp.identify(module)
        yield _site(
            "mlp",
            path,
            cls,
            form,
            lambda: _bind(module, mlp.forward_for(form, backend)),
        )
    if want["linear_attention"]:
        yield from _linear_attention(module, path, cls, backend)
    if want["rope"] and functions.calls(type(module).forward, rotary.NAME):
        fn = functions.global_of(type(module).forward, rotary.NAME)
        why = rotary.identify(fn)
        if why is not None:
            yield "rope", Site(path, cls, "rope", f"{_name(fn)}: {why}")
        else:
            home = _home(type(module).forward)
            yield (
                "rope",
                (
                    f"{cls} -> {home}.{rotary.NAME}",
                    "rope",
                    "GPT-NeoX halves",
                    lambda: _rope(module, home, backend),
                ),
            )
    if want["loss"]:
        why = loss.candidate(module)
        if why is None:
            yield (
                "loss",
                (
                    cls,
                    "fused_linear_cross_entropy" if loss_mode == "fused_linear" else "cross_entropy",
                    "labels shifted, ignore_index -100",
                    lambda: _bind(module, loss.forward_for(module, loss_mode, backend)),
                ),
            )
        elif why != "not a causal LM":
            yield "loss", Site(path, cls, "loss", why)


def _linear_attention(module, path, cls, backend):
    """A gated DeltaNet layer's kernel functions, each replaced on this layer (``linear_attention.install``) or
    left with why."""
    for kernel, why in linear_attention.identify(module):
        if kernel is None:
            yield "linear_attention", Site(path, cls, "gated DeltaNet", why)
        elif why is not None:
            yield "linear_attention", Site(path, f"{cls}.{kernel.name}", kernel.operator, why)
        else:
            yield (
                "linear_attention",
                (
                    f"{cls} -> {kernel.name}",
                    kernel.operator,
                    kernel.detail,
                    lambda kernel=kernel: linear_attention.install(module, kernel, backend),
                ),
            )


def _home(forward) -> str:
    """The module whose global ``apply_rotary_pos_emb`` the forward (or the function it wraps) reads."""
    while forward is not None:
        if rotary.NAME in getattr(forward, "__code__", types.SimpleNamespace(co_names=())).co_names:
            return forward.__globals__["__name__"]
        forward = getattr(forward, "__wrapped__", None)
    raise LookupError(rotary.NAME)


def _rope(module, home: str, backend) -> Callable[[], None]:
    undo_global = rotary.install(home, module)
    undo_forward = _bind(module, rotary.routed_forward(type(module).forward, backend))

    def undo() -> None:
        undo_forward()
        undo_global()

    return undo


def unpatch(model: torch.nn.Module) -> bool:
    """Put back every module's own forward as ``patch`` found it; False where ``model`` was not patched."""
    undo = _UNDO.pop(model, None)
    if undo is None:
        return False
    for step in reversed(undo):
        step()
    return True


def patched(model: torch.nn.Module) -> bool:
    return model in _UNDO
