"""An operator's interface layer, derived from its :class:`~tileport.ops.spec.OpSpec` once.

From the declaration (inputs with roles, attributes with kinds and defaults, dtype options, outputs, the
backward's tensors and results) it writes: the checks of every role and kind, the empty-input answers,
flattening rows to 2-D (and the reduced dimension last, for a ``dim`` attribute) and back, dispatch through
the registry, the custom ops ``tileport::<op>_fwd`` / ``_bwd`` with their fake implementations, the eager path
that skips the custom-op overhead, the autograd Function, and the public forms: ``<op>`` (differentiable),
``<op>_fwd`` (with ``out=`` where the spec says ``kernel_out``), ``<op>_bwd`` and a ``torch.nn.Module``.

An operator writes what is its own: the contract docstring, the declaration, the checks no role expresses
(kinds cover eps, finite reals, choices with aliases, dims, bools, ints, dtypes), and its math per backend,
each backend module giving ``forward(<rows as (M, D)>, <vectors>, <attrs>, <options>, out=None)`` and
``backward(<the backward's tensors>, <its attrs>, <its given attrs>)`` for non-empty rows.

This, with ``tileport.ops.spec``, is the surface plugins build on: ``derive``, :class:`Api` and the
declaration types. See ``docs/interface.md``.
"""

from __future__ import annotations

import linecache
import sys
import threading
import types
from dataclasses import dataclass
from typing import Callable

import torch

from ...backends.registry import REGISTRY
from .. import _checks
from .. import spec as s
from . import codegen, runtime
from .layout import DeclarationError, layout

__all__ = ["Api", "DeclarationError", "derive"]


@dataclass(frozen=True)
class Api:
    """An operator's derived interface."""

    op: str
    function: Callable  # differentiable; returns the rows outputs (one tensor, or a tuple)
    forward: Callable  # every output, without autograd; ``out=`` where the spec has ``kernel_out``
    backward: Callable  # the backward's results from what the forward saved and the output gradients
    source: str  # the generated code, for reading (tracebacks show its lines)
    namespace: dict

    @property
    def forward_tuple(self) -> Callable:
        """``forward`` with its result always a tuple (``forward`` itself where it returns several)."""
        return self.namespace["_forward_tuple"]

    def run(self, inputs: dict, backend: str | None, backward: bool) -> dict:
        """verify's executor (the spec's ``run`` unless it gives its own)."""
        return runtime.derived_run(self.namespace["SPEC"], self, inputs, backend, backward)

    def module(self, name: str, doc: str = "") -> type:
        """The ``torch.nn.Module`` form, named ``name``: the vector inputs its parameters (``hidden_size``
        elements), the attributes and options its constructor's arguments, ``forward`` taking the rows inputs."""
        cls = type(name, (self.namespace["_Module"],), {"__doc__": doc or f"``{self.op}`` as a module.", "__module__": self.function.__module__})
        cls.__qualname__ = name
        return cls


_DERIVED: dict[str, Api] = {}
_LOCK = threading.Lock()


def public_names(op: str) -> dict[str, str]:
    return {"function": op, "forward": f"{op}_fwd", "backward": f"{op}_bwd"}


def derive(spec: s.OpSpec, module: str | None = None) -> Api:
    """The interface of ``spec``'s operator, built on the first call and the same object after (custom ops
    are registered once per process). ``module``: the ``__module__`` its functions report (default
    ``tileport.ops.<name>``). DeclarationError when the declaration is inconsistent."""
    found = _DERIVED.get(spec.name)  # no lock once built: torch.compile traces this lookup
    if found is not None:
        return found
    with _LOCK:
        found = _DERIVED.get(spec.name)
        if found is None:
            found = _DERIVED[spec.name] = _build(spec, module or _home(spec))
        return found


def _home(spec: s.OpSpec) -> str:
    """The package the operator's public names live in: ``tileport.ops.<name>``, or a plugin's package (the
    one holding the module that declares its spec)."""
    declared = getattr(spec.composite, "__module__", "") or ""
    if declared.startswith("tileport.ops.") or not declared:
        return f"tileport.ops.{spec.name}"
    return declared.rsplit(".", 1)[0] if "." in declared else declared


def _build(spec: s.OpSpec, module: str) -> Api:
    if spec.kernels:  # an operator outside tileport: its backend modules, by backend (and device kind)
        REGISTRY.register_kernels(spec.name, spec.kernels, spec.dtypes)
    names = public_names(spec.name)
    src = codegen.source(spec, names)
    filename = f"<tileport interface of {spec.name}>"
    linecache.cache[filename] = (len(src), None, src.splitlines(keepends=True), filename)
    # A real module holds the code (torch.compile's guards look globals up through sys.modules by __name__).
    mod = types.ModuleType(f"{module}._interface", f"The interface of {spec.name}, derived from its spec.")
    mod.__file__ = filename
    sys.modules[mod.__name__] = mod
    ns = mod.__dict__
    ns.update({"torch": torch, "REGISTRY": REGISTRY, "OP": spec.name, "SPEC": spec, "_c": _checks, "_rt": runtime,
               "_TO_GRADS": spec.backward.to_grads if spec.backward else None})  # fmt: skip
    for a in spec.attrs + spec.options:
        ns[f"_DEFAULT_{a.name}"] = a.default
        ns[f"_CHOICES_{a.name}"] = tuple(a.choices)
        ns[f"_ALIASES_{a.name}"] = tuple(a.aliases)
    for t in spec.inputs:
        ns[f"_DEFAULT_{t.name}"] = None
    lay = layout(spec)
    for n in lay.bwd_tensors:
        ns[f"_DEFAULT_{n}"] = None
    ns["_DEFAULT_backend"] = ns["_DEFAULT_out"] = None
    for k in [k for k in ns if k.startswith("_DEFAULT_")]:
        ns["_BWD" + k] = ns[k]
    for n in lay.bwd_given:
        ns[f"_BWD_DEFAULT_{n}"] = None  # the backward's given attributes: not given unless passed
    exec(compile(src, filename, "exec"), ns)
    if len(spec.outputs) > 1:  # the forward returns a tuple itself
        ns["_forward_tuple"] = ns[names["forward"]]
    defaults = {
        "function": f"Differentiable {spec.name}: {spec.math} (the contract: ``{module}``).",
        "forward": f"The outputs of {spec.name} ({', '.join(t.name for t in spec.outputs)}), without autograd.",
        "backward": f"The gradients of {spec.name} ({', '.join(lay.returns)}) from what the forward saved.",
    }
    for form, name in names.items():
        fn = ns[name]
        fn.__module__, fn.__qualname__ = module, name
        fn.__doc__ = spec.docs.get(form, defaults[form])
    return Api(spec.name, ns[names["function"]], ns[names["forward"]], ns[names["backward"]], src, ns)
