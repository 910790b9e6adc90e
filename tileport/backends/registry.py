"""Backend protocol, registry and dispatch.

A backend declares the ops, dtypes and device kinds it serves and says whether it can run here
(``available()`` with a reason). Dispatch walks a per-device-kind priority list and takes the first backend
that is available and supports the op and dtype; ``backend=`` or ``$TILEPORT_BACKEND`` forces one, and a
forced backend that cannot serve the call raises :class:`BackendUnavailableError` saying why.

Backends are registered by name with a loader, so importing tileport does not import TileLang (seconds of start-up);
a backend module is imported the first time dispatch asks for it.
"""

from __future__ import annotations

import importlib
import os
import pkgutil
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch

from . import platform

ENV_BACKEND = "TILEPORT_BACKEND"
_ENV_KEY = os.environ.encodekey(ENV_BACKEND) if hasattr(os.environ, "encodekey") else None


def env_backend() -> str | None:
    """``$TILEPORT_BACKEND`` as it is now. Read on every dispatch, through os.environ's own dict where it has one:
    ``os.environ.get`` encodes the key and decodes the value each time, a tenth of a one-row call."""
    data = getattr(os.environ, "_data", None)
    if _ENV_KEY is None or data is None:
        return os.environ.get(ENV_BACKEND)
    value = data.get(_ENV_KEY)
    return None if value is None else os.environ.decodevalue(value)


# Priority per device kind. Names not registered are skipped with a reason.
DISPATCH_ORDER: dict[str, tuple[str, ...]] = {
    platform.CPU: ("tilelang", "torch"),
    platform.CUDA: ("tilelang", "triton", "torch"),
    platform.NPU_ARCH35: ("tilelang", "triton", "torch"),
    platform.NPU_ARCH32: ("triton", "torch"),  # triton-ascend: tilelang-ascend serves no wheel for these chips
}


class BackendUnavailableError(ValueError):
    """No backend can serve this call (or the forced one cannot); the message says why for each candidate."""


@dataclass(frozen=True)
class Availability:
    ok: bool
    reason: str = ""


class Backend(Protocol):
    """What a backend package exposes as ``BACKEND``."""

    name: str
    device_kinds: frozenset[str]
    dtypes: dict[str, frozenset[torch.dtype]]  # op -> dtypes served

    def available(self) -> Availability: ...

    def supports(self, op: str, device_kind: str, dtypes: Sequence[torch.dtype]) -> str | None:
        """None when this backend serves (op, device kind, every dtype of the call); else the reason why not."""
        ...

    def kernels(self, op: str, device_kind: str) -> Any:
        """The op's implementation module for that device kind (``forward`` / ``backward`` functions).
        The ops layer answers empty inputs itself: implementations only see non-empty rows."""
        ...

    def cache_info(self) -> list[dict[str, Any]]: ...


def declared_support(backend: Backend, op: str, device_kind: str, dtypes: Sequence[torch.dtype]) -> str | None:
    """The common part of ``supports``: checks against the declared ops, device kinds and dtypes."""
    if op not in backend.dtypes:
        return f"backend {backend.name!r} has no {op!r} kernel"
    if device_kind not in backend.device_kinds:
        kinds = ", ".join(sorted(backend.device_kinds))
        return f"backend {backend.name!r} does not run on {device_kind!r} devices (it serves: {kinds})"
    for dtype in dtypes:
        if dtype in backend.dtypes[op]:
            continue
        names = ", ".join(sorted(_dtype_name(d) for d in backend.dtypes[op]))
        return f"backend {backend.name!r} does not support {_dtype_name(dtype)} for {op!r} (it supports: {names})"
    return None


def kernel_modules(package_file: str, support: Sequence[str] = ()) -> tuple[str, ...]:
    """The op kernel modules of a backend package, by convention: every module in the folder of
    ``package_file`` (a package's ``__file__``) except private ones and the named support modules. Listed, not
    imported, so a backend declares its ops without importing TileLang or Triton."""
    names = (m.name for m in pkgutil.iter_modules([os.path.dirname(package_file)]))
    return tuple(sorted(n for n in names if not n.startswith("_") and n not in support))


def stub_note(module: Any) -> str | None:
    """What a kernel module's ``STUB`` says, or None for a written module. ``tileport scaffold`` writes every kernel
    module with ``STUB = "TODO(op): ..."`` (deleted once the kernels work): a stub is dispatched to, so that it
    raises its TODO, but is not counted as serving the operator."""
    note = getattr(module, "STUB", None)
    if not note:
        return None
    return note if isinstance(note, str) else f"{getattr(module, '__name__', 'a kernel module')} is a scaffold stub"


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


@dataclass
class _Entry:
    module: str | None
    instance: Backend | None = None
    error: str | None = None


@dataclass
class Registry:
    entries: dict[str, _Entry] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)
    # resolve() answers per (op, device, dtypes, forced name): availability does not change within a process
    memo: dict[tuple, Backend] = field(default_factory=dict)
    # operators from outside tileport: op -> ({"backend" or "backend:kind": module}, dtypes)
    plugin: dict[str, tuple[dict[str, str], tuple]] = field(default_factory=dict)

    def register_kernels(self, op: str, modules: dict[str, str], dtypes) -> None:
        """Serve ``op`` (an operator outside tileport) with these kernel modules: ``{"torch": "pkg.ref",
        "tilelang": "pkg.cpu", "tilelang:cuda": "pkg.cuda"}``. A bare backend name serves every device kind the
        backend runs on, but for tilelang, whose device kinds are separate dialects: the CPU only."""
        self.plugin[op] = (dict(modules), tuple(dtypes))
        self.memo.clear()

    def plugin_module(self, name: str, op: str, device_kind: str) -> str | None:
        """The module serving plugin operator ``op`` on backend ``name`` for a device kind, or None."""
        modules = self.plugin[op][0]
        bare = modules.get(name) if name != "tilelang" or device_kind == platform.CPU else None
        return modules.get(f"{name}:{device_kind}", bare)

    def stub(self, name: str, op: str) -> str | None:
        """The STUB note of ``op``'s kernel module on backend ``name`` (the module its listed ops count: the CPU's
        where it runs on the CPU; every module a plugin names for it), or None: written, or not importable here."""
        backend = self.load(name)
        if backend is None:
            return None
        try:
            if op in self.plugin:
                notes = [
                    stub_note(importlib.import_module(m))
                    for k, m in self.plugin[op][0].items()
                    if k.split(":")[0] == name
                ]
                return notes[0] if notes and all(notes) else None
            kind = platform.CPU if platform.CPU in backend.device_kinds else sorted(backend.device_kinds)[0]
            return stub_note(backend.kernels(op, kind))
        except Exception:  # noqa: BLE001 - a module that does not import here is not known to be a stub
            return None

    def register(self, name: str, backend: str | Backend) -> None:
        """Register ``name``: a module path exposing ``BACKEND`` (imported lazily) or a backend object."""
        if isinstance(backend, str):
            self.entries[name] = _Entry(backend)
        else:
            self.entries[name] = _Entry(None, backend)
        self.memo.clear()

    def names(self) -> list[str]:
        return list(self.entries)

    def load(self, name: str) -> Backend | None:
        """The backend object, importing its package on first use; None when the import failed."""
        entry = self._entry(name)
        with self.lock:
            if entry.instance is None and entry.error is None:
                try:
                    entry.instance = importlib.import_module(entry.module).BACKEND
                except Exception as exc:  # a broken optional dependency must not break tileport
                    entry.error = f"import of {entry.module} failed: {type(exc).__name__}: {exc}"
        return entry.instance

    def loaded(self) -> list[Backend]:
        return [e.instance for e in self.entries.values() if e.instance is not None]

    def availability(self, name: str) -> Availability:
        backend = self.load(name)
        if backend is None:
            return Availability(False, self._entry(name).error or "not loaded")
        return backend.available()

    def _entry(self, name: str) -> _Entry:
        try:
            return self.entries[name]
        except KeyError:
            known = ", ".join(self.entries)
            raise BackendUnavailableError(f"unknown backend {name!r}; known backends: {known}") from None

    def rejection(self, name: str, op: str, device_kind: str, dtypes: Sequence[torch.dtype]) -> str | None:
        """None when backend ``name`` can serve the call now, else why not."""
        if name not in self.entries:
            return f"backend {name!r} is not registered"
        avail = self.availability(name)
        if not avail.ok:
            return f"backend {name!r} is unavailable: {avail.reason}"
        backend = self.load(name)
        if op in self.plugin:  # an operator outside tileport: the modules and dtypes its spec names
            if self.plugin_module(name, op, device_kind) is None or device_kind not in backend.device_kinds:
                return (
                    f"backend {name!r} has no {op!r} kernel for {device_kind!r} (its package names: "
                    f"{', '.join(self.plugin[op][0])})"
                )
            bad = [d for d in dtypes if d not in self.plugin[op][1] and not (name == "torch" and d == torch.float64)]
            return f"backend {name!r} does not support {_dtype_name(bad[0])} for {op!r}" if bad else None
        return backend.supports(op, device_kind, dtypes)  # type: ignore[union-attr]

    def resolve(
        self,
        op: str,
        device: torch.device,
        dtypes: Sequence[torch.dtype],
        backend: str | None = None,
        npu_name: Callable[[int | None], str] | None = None,
    ) -> Backend:
        """Pick the backend for ``op`` on tensors of ``device`` with ``dtypes`` (inputs and outputs).

        ``backend`` (or ``$TILEPORT_BACKEND`` when it is None) forces a backend by name.
        """
        key = (op, device, tuple(dtypes), backend, env_backend(), npu_name)
        found = self.memo.get(key)
        if found is None:
            found = self.memo[key] = self._resolve(op, device, dtypes, backend, npu_name)
        return found

    def kernels(self, op: str, device: torch.device, dtypes: Sequence[torch.dtype], backend: str | None = None):
        """The implementation module of ``op`` on the backend ``resolve`` picks (memoized likewise)."""
        key = ("kernels", op, device, tuple(dtypes), backend, env_backend())
        found = self.memo.get(key)
        if found is None:
            chosen, kind = self.resolve(op, device, dtypes, backend), platform.device_kind(device)
            if op in self.plugin:
                found = importlib.import_module(self.plugin_module(chosen.name, op, kind))
            else:
                found = chosen.kernels(op, kind)
            self.memo[key] = found
        return found

    def _resolve(self, op, device, dtypes, backend, npu_name) -> Backend:
        kind = platform.device_kind(device, npu_name) if npu_name else platform.device_kind(device)
        forced = backend if backend is not None else (env_backend() or None)
        if forced is not None:
            if not isinstance(forced, str):
                raise TypeError(f"backend must be a string naming a backend, got {type(forced).__name__}")
            self._entry(forced)  # unknown names raise with the list of known ones
            why = self.rejection(forced, op, kind, dtypes)
            if why is not None:
                source = "backend=" if backend is not None else f"${ENV_BACKEND}="
                raise BackendUnavailableError(f"{op}: forced {source}{forced!r} cannot run: {why}")
            return self.load(forced)  # type: ignore[return-value]
        order = DISPATCH_ORDER.get(kind)
        if order is None:
            raise BackendUnavailableError(
                f"{op}: no backend serves tensors on device {str(device)!r} "
                f"(device kinds served: {', '.join(DISPATCH_ORDER)})"
            )
        reasons = []
        for name in order:
            why = self.rejection(name, op, kind, dtypes)
            if why is None:
                return self.load(name)  # type: ignore[return-value]
            reasons.append(why)
        raise BackendUnavailableError(
            f"{op}: no available backend for {'/'.join(_dtype_name(d) for d in dtypes)} on {str(device)!r}: "
            + "; ".join(reasons)
        )


REGISTRY = Registry()
REGISTRY.register("tilelang", "tileport.backends.tilelang")
REGISTRY.register("torch", "tileport.backends.torch")
REGISTRY.register("triton", "tileport.backends.triton")


@dataclass(frozen=True)
class BackendInfo:
    name: str
    available: bool
    reason: str
    device_kinds: tuple[str, ...]
    ops: tuple[str, ...]  # the ops it has a kernel module for (stubs included)
    interpreted: bool = False  # runs through an interpreter here (slow: small shapes and few cases only)
    stubs: tuple[str, ...] = ()  # of ops, those whose module is a scaffold stub: not support (checked where available)

    @property
    def serves(self) -> tuple[str, ...]:
        """The ops it supports: those with a kernel module that is not a stub."""
        return tuple(op for op in self.ops if op not in self.stubs)


def available_backends(registry: Registry = REGISTRY) -> list[BackendInfo]:
    """Every registered backend, whether it can run here, and why not."""
    infos = []
    for name in registry.names():
        avail = registry.availability(name)
        b = registry.load(name)
        ops = (
            tuple(
                sorted(
                    set(b.dtypes)
                    | {op for op, (mods, _) in registry.plugin.items() if any(k.split(":")[0] == name for k in mods)}
                )
            )
            if b
            else ()
        )
        infos.append(
            BackendInfo(
                name=name,
                available=avail.ok,
                reason=avail.reason,
                device_kinds=tuple(sorted(b.device_kinds)) if b else (),
                ops=ops,
                interpreted=bool(avail.ok and getattr(b, "interpreted", False)),
                # only where it is available: its modules import what it needs (importing Triton early would fix its
                # mode)
                stubs=tuple(op for op in ops if registry.stub(name, op)) if avail.ok else (),
            )
        )
    return infos


def kernel_cache_info(registry: Registry = REGISTRY) -> list[dict[str, Any]]:
    """Per op and backend: compiled kernels, cache hits, compile seconds (backends loaded so far)."""
    rows: list[dict[str, Any]] = []
    for b in registry.loaded():
        rows.extend(b.cache_info())
    return rows
