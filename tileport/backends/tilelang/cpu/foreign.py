"""A user's TileLang kernel (a ``T.prim_func`` or a ``@tilelang.jit`` function, written for GPUs or not) built
for this CPU with the C target and tileport's flags, and called with torch tensors: what ``tileport verify OP
--impl MODULE:KERNEL`` runs.

A ``@tilelang.jit`` function's parameters without a default are the kernel's sizes: each is given as a
``T.dynamic`` of its own name, so one build serves every shape; a kernel that cannot be built with symbolic
sizes (a tile as wide as a row) is built once per shape instead. A ``dtype`` parameter takes the case's dtype.
Outputs are the ``out_idx`` buffers, or else the buffers that are no input; they are allocated NaN-filled (an
element the kernel does not write is caught) with the sizes the inputs bind."""

import inspect
import math
from collections.abc import Callable

import tilelang
import torch
from tilelang import tvm

from ..targets import TL_DTYPE
from . import settings
from .runtime import _tilelang_cache_at, cache_dir


class KernelBuildError(RuntimeError):
    """A kernel that does not take the request or does not build for the C target; the message says which."""


def symbolic_sizes(jit, given: dict) -> dict:
    """{parameter: a ``T.dynamic``-like variable of its name} for each parameter of a ``@tilelang.jit`` function
    without a default that ``given`` does not set: the kernel's sizes, left symbolic (one build, every shape)."""
    params = inspect.signature(jit.func).parameters
    return {p: tvm.tirx.Var(p, "int32") for p, prm in params.items() if prm.default is prm.empty and p not in given}


def build(func, pass_configs=None):
    """``func`` compiled for the C target with tileport's flags and disk cache (its math intrinsics registered
    by ``runtime``'s import)."""
    with _tilelang_cache_at(cache_dir()):
        return tilelang.compile(
            func,
            target="c",
            execution_backend="cython",
            compile_flags=list(settings.compile_flags()),
            pass_configs=pass_configs,
        )


def _buffers(func) -> list[tuple[str, object]]:
    """(name, buffer or None) per parameter of ``func``, in order: a scalar parameter has no buffer."""
    return [
        (func.buffer_map[p].name, func.buffer_map[p]) if p in func.buffer_map else (p.name, None) for p in func.params
    ]


class Kernel:
    """The built kernel behind a Python signature of its inputs (buffers and scalars that are no output)."""

    def __init__(self, obj, is_input: Callable[[str], bool], build_args: dict):
        self.jit = obj if type(obj).__name__ == "JITImpl" else None
        self._layouts: dict = {}
        self.build_args = dict(build_args)
        self.sizes: list[str] = []  # the @jit parameters that are the kernel's sizes
        self.takes_dtype = False
        if self.jit is not None:
            params = inspect.signature(self.jit.func).parameters
            unknown = set(build_args) - set(params)
            if unknown:
                raise KernelBuildError(f"the kernel has no parameter {sorted(unknown)[0]!r} (--arg NAME=VALUE)")
            self.sizes = list(symbolic_sizes(self.jit, build_args))
            self.takes_dtype = "dtype" in params and "dtype" not in build_args
            func = self._layout(torch.float32)
            out_idx = self.jit.out_idx
        else:
            if build_args:
                raise KernelBuildError(f"a prim_func takes no build arguments (--arg {next(iter(build_args))}=...)")
            func, out_idx = obj, None
        self.params = _buffers(func)
        n = len(self.params)
        outs = [i % n for i in ([out_idx] if isinstance(out_idx, int) else out_idx or ())]
        if not outs:
            outs = [i for i, (name, b) in enumerate(self.params) if b is not None and not is_input(name)]
        if not outs:
            raise KernelBuildError("no parameter of the kernel is an output (give the jit out_idx)")
        self.outputs = outs
        self.inputs = [name for i, (name, _) in enumerate(self.params) if i not in outs]
        self.func = obj if self.jit is None else None
        self.built: dict[tuple, object] = {}  # build key -> (the compiled kernel, its prim_func), or its error
        self.__signature__ = inspect.Signature(
            [inspect.Parameter(name, inspect.Parameter.POSITIONAL_OR_KEYWORD) for name in self.inputs]
        )
        self.__name__ = getattr(getattr(self.jit, "func", None), "__name__", None) or str(func.attrs["global_symbol"])

    def _layout(self, dtype: torch.dtype):
        """The prim_func with symbolic sizes (what the parameters are and how their extents read), once per
        dtype."""
        if dtype not in self._layouts:
            self._layouts[dtype] = self._tir(dtype, symbolic_sizes(self.jit, self.build_args))
        return self._layouts[dtype]

    def _tir(self, dtype: torch.dtype, sizes: dict):
        args = dict(self.build_args) | sizes
        if self.takes_dtype:
            args["dtype"] = TL_DTYPE.get(dtype, str(dtype).removeprefix("torch."))
        return self.jit.get_tir(**args)

    def _build(self, key: tuple, make: Callable[[], object]):
        found = self.built.get(key)
        if found is None:
            try:
                func = make()
                found = (build(func, getattr(self.jit, "pass_configs", None)), func)
            except Exception as exc:  # noqa: BLE001 - kept: every case of this build reports it, built once
                why = " ".join(str(exc).split())[:300]
                hint = (
                    " (the C target prints no bfloat16: verify with --dtype fp32 or fp16)" if "bfloat16" in why else ""
                )
                found = KernelBuildError(f"does not build for the C target: {type(exc).__name__}: {why}{hint}")
            self.built[key] = found
        if isinstance(found, Exception):
            raise found
        return found

    def _compiled(self, dtype: torch.dtype, shapes: dict[str, tuple]):
        """The compiled kernel and its prim_func for a call: symbolic sizes where they build, else these."""
        if self.jit is None:
            return self._build(("func",), lambda: self.func)
        if not self.sizes:
            return self._build((dtype,), lambda: self._tir(dtype, {}))
        try:
            return self._build((dtype, "symbolic"), lambda: self._layout(dtype))
        except KernelBuildError:
            values = self._size_values(shapes)
            return self._build((dtype, *values.items()), lambda: self._tir(dtype, values))

    def _size_values(self, shapes: dict[str, tuple]) -> dict[str, int]:
        """Each size parameter's value, read where a symbolic build puts it in an input's shape."""
        found = {}
        for name, b in _buffers(self._layout(torch.float32)):
            for dim, extent in zip(shapes.get(name, ()), b.shape if b is not None else ()):
                if isinstance(extent, tvm.tirx.Var) and extent.name in self.sizes:
                    found.setdefault(extent.name, dim)
        missing = [p for p in self.sizes if p not in found]
        if missing:
            raise KernelBuildError(f"size {missing[0]!r} is no input's dimension: give it with --arg {missing[0]}=N")
        return found

    def __call__(self, **given):
        tensors = {n: v for n, v in given.items() if isinstance(v, torch.Tensor)}
        if not tensors:
            raise KernelBuildError("the kernel was given no tensor")
        dtype = next(iter(tensors.values())).dtype
        views = {n: self._view(n, t) for n, t in tensors.items()}
        kernel, func = self._compiled(dtype, {n: tuple(v.shape) for n, v in views.items()})
        bufs = _buffers(func)
        binding = {}  # a symbolic extent -> the size an input gives it
        for name, b in bufs:
            for extent, dim in zip(b.shape if b is not None else (), views[name].shape if name in views else ()):
                if isinstance(extent, tvm.tirx.Var) and not any(extent.same_as(v) for v in binding):
                    binding[extent] = tvm.tirx.IntImm(extent.dtype, dim)
        args, outs = [], []
        for i, (name, b) in enumerate(bufs):
            if i in self.outputs:
                shape = [_evaluate(e, binding, name) for e in b.shape]
                out = torch.full(shape, float("nan"), dtype=_torch_dtype(b.dtype))
                outs.append(out)
                args.append(out)
            elif b is not None:
                v = views[name]
                if v.dtype != _torch_dtype(b.dtype):
                    raise KernelBuildError(f"{name} is declared {b.dtype}; the case gives {v.dtype}")
                args.append(v)
            else:
                args.append(given[name])
        try:
            kernel(*args)
        except ValueError as exc:  # TileLang's check of a static shape or dtype
            raise KernelBuildError(f"the kernel refuses the call: {exc}") from None
        return tuple(outs) if len(outs) > 1 else outs[0]

    def _view(self, name: str, t: torch.Tensor) -> torch.Tensor:
        """``t`` dense, as the kernel's buffer ``name`` has it: leading dimensions folded into one for a 2-D
        buffer, flat for a 1-D one."""
        b = dict(_buffers(self.func if self.func is not None else self._layout(t.dtype)))[name]
        t = t.contiguous()
        if b is None or t.ndim == len(b.shape):
            return t
        if len(b.shape) == 2:
            return t.reshape(math.prod(t.shape[:-1]), t.shape[-1] if t.ndim else 1)
        if len(b.shape) == 1:
            return t.reshape(-1)
        raise KernelBuildError(f"{name} is {len(b.shape)}-D in the kernel; the case gives a {t.ndim}-D tensor")


def _torch_dtype(dtype) -> torch.dtype:
    return getattr(torch, str(dtype))


def _evaluate(extent, binding: dict, name: str) -> int:
    """An output's declared extent with the sizes the inputs bound put in."""
    value = tvm.arith.Analyzer().simplify(tvm.tirx.stmt_functor.substitute(extent, binding))
    if not isinstance(value, tvm.tirx.IntImm):
        raise KernelBuildError(f"output {name}'s extent {extent} is bound by no input")
    return int(value.value)
