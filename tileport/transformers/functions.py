"""The globals a module's forward calls, looked up through its decorators (``functools.wraps`` wrappers)."""

from __future__ import annotations

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
        if getattr(fn, "__code__", None) is not None and name in fn.__code__.co_names and name in fn.__globals__:
            return fn.__globals__[name]
        fn = getattr(fn, "__wrapped__", None)
    raise LookupError(name)
