"""The libdevice dispatch stubs a Triton kernel calls. ``triton.language.extra.libdevice`` holds stubs (``def
rsqrt(arg0): ...``) that the compiler swaps for the backend's own libdevice through the backend's module map;
triton-ascend's map is empty, so a stub runs as written, returns None, and the compiler fails later on that
None, at a line that names no libdevice (Liger-Kernel imports ``rsqrt`` so where it sees no NPU). The stubs are
found by resolving the kernel's calls through its globals, its JIT callees' too, never in the compiler's text."""

from __future__ import annotations

import ast
import builtins
import inspect
import textwrap

STUBS = "triton.language.extra.libdevice"


def mapped(arch: str) -> set[str]:
    """The modules the NPU backend swaps for its own at compile time (its module map's keys)."""
    # triton (triton-ascend here): optional, kept out of start-up
    from triton.backends.compiler import GPUTarget
    from triton.compiler.compiler import make_backend

    return set(make_backend(GPUTarget("npu", arch, 0)).get_module_map())


def _resolve(node: ast.AST, scope: dict) -> object:
    """What a call's callee (a name or a chain of attributes) is in the function's globals, or None."""
    if isinstance(node, ast.Name):
        return scope.get(node.id, getattr(builtins, node.id, None))
    if isinstance(node, ast.Attribute):
        base = _resolve(node.value, scope)
        return None if base is None else getattr(base, node.attr, None)
    return None


def called_stubs(kernel, swapped: set[str] = frozenset()) -> list[str]:
    """``callee (triton.language.extra.libdevice.fn)`` for each stub ``kernel`` (a JITFunction) or a JIT function
    it calls reaches, in source order, unless the backend swaps the stubs' module (``swapped``: ``mapped``)."""
    if STUBS in swapped:
        return []
    found: list[str] = []
    walked: set[int] = set()

    def walk(jit) -> None:
        if id(jit) in walked:
            return
        walked.add(id(jit))
        scope = jit.fn.__globals__
        tree = ast.parse(textwrap.dedent(inspect.getsource(jit.fn)))  # a JITFunction's, or the interpreter's
        calls = sorted((n for n in ast.walk(tree) if isinstance(n, ast.Call)), key=lambda n: (n.lineno, n.col_offset))
        for node in calls:
            callee = _resolve(node.func, scope)
            if getattr(callee, "__module__", None) == STUBS:
                name = f"{ast.unparse(node.func)} ({STUBS}.{callee.__name__})"
                if name not in found:
                    found.append(name)
            elif inspect.isfunction(getattr(callee, "fn", None)):  # a JIT function it calls
                walk(callee)

    walk(kernel)
    return found
