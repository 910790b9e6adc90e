"""A module's forward with some of the globals it calls replaced, for that module alone.

transformers' attention forwards call their file's ``apply_rotary_pos_emb`` as a module global; replacing the
global would change every model of that family in the process. Instead the forward is rebuilt with a copy of its
globals holding the replacement, through its decorators (``functools.wraps`` wrappers whose closure holds the
function they wrap are rebuilt around the new inner function), and bound to the one module instance.
"""

from __future__ import annotations

import types
from collections.abc import Callable


def calls(fn: Callable, name: str) -> bool:
    """Whether ``fn`` (or a function it wraps) looks ``name`` up as a global."""
    while fn is not None:
        code = getattr(fn, "__code__", None)
        if code is not None and name in code.co_names and name in fn.__globals__:
            return True
        fn = getattr(fn, "__wrapped__", None)
    return False


def global_of(fn: Callable, name: str):
    """The global ``name`` as ``fn`` (or the function it wraps) sees it."""
    while fn is not None:
        if (
            getattr(fn, "__code__", None) is not None
            and name in fn.__code__.co_names
            and name in fn.__globals__
        ):
            return fn.__globals__[name]
        fn = getattr(fn, "__wrapped__", None)
    raise LookupError(name)


def with_globals(fn: Callable, replacements: dict[str, object]) -> Callable:
    """A copy of ``fn`` whose innermost function that uses a replaced name sees ``replacements`` in its globals;
    each wrapper above it is rebuilt with the new inner function in its closure."""
    inner = getattr(fn, "__wrapped__", None)
    uses = any(n in fn.__code__.co_names for n in replacements)
    if inner is not None and not uses:
        new_inner = with_globals(inner, replacements)
        cells = fn.__closure__ or ()
        if not any(c.cell_contents is inner for c in cells):
            raise TypeError(
                f"{fn.__qualname__} wraps {inner.__qualname__} without holding it in its closure"
            )
        closure = tuple(
            types.CellType(new_inner) if c.cell_contents is inner else c for c in cells
        )
        copy = types.FunctionType(
            fn.__code__, fn.__globals__, fn.__name__, fn.__defaults__, closure
        )
        copy.__wrapped__ = new_inner
    else:
        scope = dict(fn.__globals__)
        scope.update(replacements)
        copy = types.FunctionType(
            fn.__code__, scope, fn.__name__, fn.__defaults__, fn.__closure__
        )
    copy.__kwdefaults__ = fn.__kwdefaults__
    copy.__dict__.update({k: v for k, v in fn.__dict__.items() if k != "__wrapped__"})
    copy.__qualname__, copy.__doc__, copy.__module__ = (
        fn.__qualname__,
        fn.__doc__,
        fn.__module__,
    )
    return copy
