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

import importlib.util
import os
import sys
import threading
import types
import warnings
from collections.abc import Callable
from dataclasses import dataclass

from ...backends.registry import REGISTRY
from .. import spec as s
from . import files, runtime
from .declared import general
from .layout import DeclarationError, layout

__all__ = ["Api", "DeclarationError", "derive"]


@dataclass(frozen=True)
class Api:
    """An operator's derived interface."""

    op: str
    function: Callable  # differentiable; returns the rows outputs (one tensor, or a tuple)
    forward: Callable  # every output, without autograd; ``out=`` where the spec has ``kernel_out``
    backward: Callable | None  # the backward's results from what the forward saved and the output gradients
    # (None: a forward-only operator)
    source: str  # the generated module's text (``<package>/_interface.py``)
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
        cls = type(
            name,
            (self.namespace["_Module"],),
            {"__doc__": doc or f"``{self.op}`` as a module.", "__module__": self.function.__module__},
        )
        cls.__qualname__ = name
        return cls


_DERIVED: dict[str, Api] = {}
_LOCK = threading.Lock()
public_names = files.public_names


def derive(spec: s.OpSpec, module: str | None = None) -> Api:
    """The interface of ``spec``'s operator, imported on the first call and the same object after (custom ops
    are registered once per process). ``module``: the ``__module__`` its functions report (default
    ``tileport.ops.<name>``). DeclarationError when the declaration is inconsistent."""
    found = _DERIVED.get(spec.name)  # no lock once built: torch.compile traces this lookup
    if found is not None:
        return found
    with _LOCK:
        found = _DERIVED.get(spec.name)
        if found is None:
            found = _DERIVED[spec.name] = _build(spec, module or files.home(spec))
        return found


s.derive_with(derive)


def _load(spec: s.OpSpec, name: str) -> tuple[types.ModuleType, str]:
    """The generated module: ``<package>/_interface.py`` where it is what the spec generates now, else the text
    written under the cache folder (a plugin's, or a spec changed since ``tileport generate``: warned)."""
    source = files.text(spec)  # also checks the declaration: DeclarationError before anything is imported
    path = files.package_file(spec)
    current = path is not None and path.exists() and path.read_text() == source
    if not current:
        if path is not None and path.exists():
            warnings.warn(
                f"{path} is not what {spec.name}'s spec generates now: run `tileport generate {spec.name}`",
                stacklevel=4,
            )
        path = files.cache_file(spec, source)
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_text(source)
            os.replace(tmp, path)
    runtime.DERIVING[spec.name] = spec
    found = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(found)
    # A real module holds the code (torch.compile's guards look globals up through sys.modules by __name__).
    sys.modules[name] = mod
    try:
        found.loader.exec_module(mod)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    return mod, source  # the file holds this text (the package's is equal to it, the cache's is named by it)


def _build(spec: s.OpSpec, module: str) -> Api:
    if spec.kernels:  # an operator outside tileport: its backend modules, by backend (and device kind)
        REGISTRY.register_kernels(spec.name, spec.kernels, spec.dtypes)
    names = public_names(spec.name)
    mod, source = _load(spec, f"{module}._interface")
    ns = mod.__dict__
    returns = general(spec).returns if spec.general else layout(spec).returns
    defaults = {
        "function": f"Differentiable {spec.name}: {spec.math} (the contract: ``{module}``).",
        "forward": f"The outputs of {spec.name} ({', '.join(t.name for t in spec.outputs)}), without autograd.",
        "backward": f"The gradients of {spec.name} ({', '.join(returns)}) from what the forward saved.",
    }
    for form, name in names.items():
        fn = ns.get(name)
        if fn is None:  # a forward-only operator's backward
            continue
        fn.__module__, fn.__qualname__ = module, name
        fn.__doc__ = spec.docs.get(form, defaults[form])
    return Api(spec.name, ns[names["function"]], ns[names["forward"]], ns.get(names["backward"]), source, ns)
