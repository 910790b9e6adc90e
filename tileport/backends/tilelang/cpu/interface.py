"""The C interface of a CPU kernel, derived from its ``T.prim_func``: the one declaration.

From the prim_func's parameters and the prototype TileLang generates for ``<name>_kernel`` (read from the
lowered source, so no assumption about TileLang's parameter order or about which unused parameters it drops),
this module writes the driver ``<name>_drive`` and the ctypes launcher that calls it by name:
``kernel(x=x, y=y, rstd=rstd, eps=eps)``, with pointers, sizes, strides and the thread count filled in. A name
missing or unknown, or a tensor of the wrong shape or dtype, raises instead of passing a pointer in the wrong slot.

Two kinds of kernel:
- row-wise (``rowwise.py``): buffers of shape (M, D), (M,), (D,) or (2, D), their roles read from the shape;
  the driver hands each thread ranges of rows.
- grid kernels (``pairs.py``), whose prim_func sets the attribute ``tileport.grid`` to the names of the
  dimensions whose product is the work (tokens: ("B", "T")): every buffer is an N-D tensor with its sizes and
  strides (``T.StridedTensor``, unit stride in the last dimension; tables, float or integer), the kernel takes
  the range of work items it runs as scalars ``first`` and ``count``, and a buffer with an int32 scalar
  ``has_<name>`` is optional (None: a null pointer, the flag 0, zero strides, and 0 for any size no given
  tensor binds). The other scalars are the caller's.
"""

from __future__ import annotations

import ctypes
import re
from dataclasses import dataclass

import torch

ROWS, PER_ROW, BROADCAST, PARTIAL, SCALAR = "rows", "per_row", "broadcast", "partial", "scalar"
STRIDED, RANGE, FLAG = "strided", "range", "flag"  # a grid kernel's N-D tensors, its work range, optional flags
PARTIAL_BLOCK_ROWS = 32  # rows per partial of a reduced gradient: fixed, so the sum is the same for any threads
GRID = "tileport.grid"  # the prim_func attribute naming a grid kernel's work dimensions
FIRST, COUNT = "first", "count"  # a grid kernel's scalars: the work items [first, first + count) it runs
MAX_SIZE = 2**31 - 1  # sizes are int32 in the generated kernel

_CTYPE = {"float32": "float", "float64": "double", "uint16": "uint16_t", "int32": "int32_t", "int64": "int64_t"}
_CTYPES = {"float": ctypes.c_float, "double": ctypes.c_double, "int32_t": ctypes.c_int32, "int64_t": ctypes.c_int64}
_STORAGE_DTYPES = {"float32": {torch.float32}, "float64": {torch.float64}, "uint16": {torch.float16, torch.bfloat16}}
_INDEX_DTYPES = {"int32": {torch.int32}, "int64": {torch.int64}}  # integer buffers (grid kernels)


@dataclass(frozen=True)
class Arg:
    name: str
    role: str
    dtype: str  # TileLang dtype (storage dtype for buffers)
    sizes: tuple = ()  # a strided tensor's sizes and strides: dimension names or ints
    strides: tuple = ()
    optional: bool = False  # a strided tensor that may be None (it has a ``has_<name>`` flag)

    @property
    def ctype(self) -> str:
        return _CTYPE[self.dtype]

    @property
    def torch_dtypes(self) -> set:
        return (_STORAGE_DTYPES | _INDEX_DTYPES)[self.dtype]


def _names(exprs, buffer: str = "") -> tuple:
    """Each size or stride as its variable's name or an int (a grid kernel's tensors are ``T.StridedTensor``s)."""
    out = []
    for e in exprs:
        if getattr(e, "name", None):
            out.append(e.name)
        elif hasattr(e, "value"):
            out.append(int(e.value))
        else:
            raise ValueError(f"{buffer}: sizes and strides are names or ints (T.StridedTensor), got {e}")
    return tuple(out)


def _grid_args(func) -> tuple[Arg, ...]:
    """A grid kernel's arguments: strided tensors, its range, optional flags and the caller's scalars."""
    buffers = {func.buffer_map[p].name for p in func.params if p in func.buffer_map}
    args = []
    for p in func.params:
        buf = func.buffer_map.get(p)
        if buf is not None:
            strides = _names(buf.strides, buf.name)
            if len(strides) != len(buf.shape) or strides[-1] != 1:
                raise ValueError(f"{buf.name}: a grid kernel's tensors have unit stride in their last dimension")
            optional = any(q.name == f"has_{buf.name}" for q in func.params)
            args.append(Arg(buf.name, STRIDED, str(buf.dtype), _names(buf.shape, buf.name), strides, optional))
        elif p.name in (FIRST, COUNT):
            args.append(Arg(p.name, RANGE, str(p.dtype)))
        elif p.name.startswith("has_") and p.name[4:] in buffers:
            args.append(Arg(p.name, FLAG, str(p.dtype)))
        else:
            args.append(Arg(p.name, SCALAR, str(p.dtype)))
    return tuple(args)


def pass_configs(func) -> dict:
    """TileLang pass settings of a kernel: a grid kernel computes its own indices (table rows chosen by
    position, strided tensors) and guards them itself, so TileLang's bounds guards, which would skip the
    accesses it cannot prove in range, are off; row-wise kernels keep the defaults."""
    return {"tl.disable_safe_memory_legalize": True} if GRID in func.attrs else {}


def _role(shape) -> str:
    names = tuple(getattr(s, "name", None) or int(s) for s in shape)
    roles = {("M", "D"): ROWS, ("M",): PER_ROW, ("D",): BROADCAST, (2, "D"): PARTIAL}
    if names not in roles:
        raise ValueError(
            f"unsupported buffer shape {names}: use rows (M, D), per_row (M,), vector (D,) or partial (2, D)"
        )
    return roles[names]


@dataclass(frozen=True)
class Interface:
    """A kernel's arguments in declaration order and the generated ``<name>_kernel`` prototype."""

    name: str
    args: tuple[Arg, ...]
    prototype: tuple[tuple[str, str], ...]  # (C type, name) in the generated kernel's order
    grid: tuple[str, ...] = ()  # a grid kernel's work dimensions (empty: a row-wise kernel)

    @classmethod
    def of(cls, func, kernel_source: str) -> "Interface":
        name = str(func.attrs["global_symbol"])
        grid = tuple(str(g) for g in func.attrs[GRID]) if GRID in func.attrs else ()
        args = []
        if grid:
            args = list(_grid_args(func))
            missing = [g for g in grid if g not in {d for a in args for d in a.sizes}]
            if missing or {FIRST, COUNT} - {a.name for a in args if a.role == RANGE}:
                raise ValueError(f"{name}: a grid kernel takes scalars first and count and tensors sized by {grid}")
        for p in func.params if not grid else ():
            buf = func.buffer_map.get(p)
            if buf is None:
                args.append(Arg(p.name, SCALAR, str(p.dtype)))
            else:
                args.append(Arg(buf.name, _role(buf.shape), str(buf.dtype)))
        m = re.search(rf"int32_t {re.escape(name)}_kernel\(([^)]*)\);", kernel_source)
        if m is None:
            raise RuntimeError(f"no declaration of {name}_kernel in the generated source")
        proto = tuple(tuple(p.strip().rsplit(" ", 1)) for p in m.group(1).split(","))
        return cls(name, tuple(args), proto, grid)  # type: ignore[arg-type]

    def dims(self) -> list[str]:
        """A grid kernel's size names, in order of first appearance."""
        return list(dict.fromkeys(d for a in self.args if a.role == STRIDED for d in a.sizes if isinstance(d, str)))

    def stride_names(self) -> list[str]:
        return [s for a in self.args if a.role == STRIDED for s in a.strides if isinstance(s, str)]

    def driver_params(self) -> list[tuple[str, type]]:
        """(C declaration, ctypes type) of the driver's parameters, in call order."""
        if self.grid:
            return self._grid_driver_params()
        out: list[tuple[str, type]] = []
        for a in self.args:
            if a.role == SCALAR:
                continue
            out.append((f"{a.ctype}* {a.name}", ctypes.c_void_p))
            if a.role == ROWS:
                out.append((f"int64_t ld_{a.name}", ctypes.c_int64))
            if a.role == PARTIAL:
                out.append((f"float* part_{a.name}", ctypes.c_void_p))
        out += [("int64_t M", ctypes.c_int64), ("int64_t D", ctypes.c_int64)]
        out += [(f"{a.ctype} {a.name}", _CTYPES[a.ctype]) for a in self.args if a.role == SCALAR]
        out.append(("int32_t nthreads", ctypes.c_int32))
        return out

    def _call(self, row: str, rows: str, block: str) -> str:
        roles = {a.name: a.role for a in self.args}
        args = []
        for _, pname in self.prototype:
            role = roles.get(pname)
            if role == ROWS:
                args.append(f"{pname} + {row} * ld_{pname}")
            elif role == PER_ROW:
                args.append(f"{pname} + {row}")
            elif role == PARTIAL:
                args.append(f"part_{pname} + {block} * 2 * D")
            elif pname == "M":
                args.append(f"(int32_t)({rows})")
            elif pname == "D":
                args.append("(int32_t)D")
            else:  # broadcast vectors and scalars pass through
                args.append(pname)
        return f"{self.name}_kernel({', '.join(args)});"

    def _grid_driver_params(self) -> list[tuple[str, type]]:
        out: list[tuple[str, type]] = [
            (f"{a.ctype}* {a.name}", ctypes.c_void_p) for a in self.args if a.role == STRIDED
        ]
        out += [(f"int64_t {n}", ctypes.c_int64) for n in self.dims() + self.stride_names()]
        out += [(f"{a.ctype} {a.name}", _CTYPES[a.ctype]) for a in self.args if a.role in (SCALAR, FLAG)]
        out.append(("int32_t nthreads", ctypes.c_int32))
        return out

    def _grid_driver(self, decl: str) -> str:
        dims = set(self.dims())
        args = []
        for ctype, pname in self.prototype:
            if pname == FIRST:
                args.append(f"({ctype})lo")
            elif pname == COUNT:
                args.append(f"({ctype})(hi - lo)")
            elif pname in dims:
                args.append(f"({ctype}){pname}")
            else:  # tensors, strides, flags and scalars pass through
                args.append(pname)
        work = " * ".join(f"(int64_t){g}" for g in self.grid)
        return f"""{decl}
extern "C" int32_t {self.name}_drive({", ".join(d for d, _ in self.driver_params())}) {{
  // The work items (the product of {", ".join(self.grid)}) are cut into even ranges that threads claim.
  tp_parallel_ranges(nthreads, {work}, [&](int64_t lo, int64_t hi) {{
    if (hi > lo) {self.name}_kernel({", ".join(args)});
  }});
  tp_store_fence();
  return 0;
}}
"""

    def driver(self) -> str:
        """The kernel's declaration and its driver over chunks of rows or work items (C source for the prelude)."""
        decl = f'extern "C" int32_t {self.name}_kernel({", ".join(f"{t} {n}" for t, n in self.prototype)});'
        if self.grid:
            return self._grid_driver(decl)
        params = ", ".join(d for d, _ in self.driver_params())
        rows = [a.name for a in self.args if a.role == ROWS]
        contiguous = " && ".join(f"ld_{n} == D" for n in rows) or "true"
        partials = [a.name for a in self.args if a.role == PARTIAL]
        # tp_parallel_ranges (threads.h) runs even ranges of rows or blocks; one thread runs them inline.
        if not partials:
            body = f"""
  // Rows are cut into even chunks that threads claim; strided rows (ld != D) go to the kernel one at a time.
  tp_parallel_ranges(nthreads, M, [&](int64_t lo, int64_t hi) {{
    if (contiguous) {{
      if (hi > lo) {self._call("lo", "hi - lo", "0")}
    }} else {{
      for (int64_t r = lo; r < hi; ++r) {self._call("r", "1", "0")}
    }}
  }});"""
        else:
            zero = " ".join(f"memset(part_{p} + b * 2 * D, 0, 2 * D * sizeof(float));" for p in partials)
            reduce = " ".join(f"tp_reduce_partials(part_{p}, nb, D, {p}, nthreads);" for p in partials)
            body = f"""
  // Fixed blocks of {PARTIAL_BLOCK_ROWS} rows, each with its own partial (a compensated sum and its
  // compensation) of the reduced outputs, split among threads; the partials are then summed in a fixed
  // order: the same bits for any thread count.
  const int64_t nb = (M + {PARTIAL_BLOCK_ROWS} - 1) / {PARTIAL_BLOCK_ROWS};
  auto block = [&](int64_t b) {{
    const int64_t lo = b * {PARTIAL_BLOCK_ROWS}, hi = lo + {PARTIAL_BLOCK_ROWS} < M ? lo + {PARTIAL_BLOCK_ROWS} : M;
    {zero}
    if (contiguous) {{
      {self._call("lo", "hi - lo", "b")}
    }} else {{
      for (int64_t r = lo; r < hi; ++r) {self._call("r", "1", "b")}
    }}
  }};
  tp_parallel_ranges(nthreads, nb, [&](int64_t lo, int64_t hi) {{
    for (int64_t b = lo; b < hi; ++b) block(b);
  }});
  {reduce}"""
        return f"""{decl}
extern "C" int32_t {self.name}_drive({params}) {{
  const bool contiguous = {contiguous};{body}
  tp_store_fence();  // streamed stores, where a kernel uses them, are ordered before the return
  return 0;
}}
"""


# the shape a caller's tensor has for each role (a partial is handed over as its reduced (D,) result)
_SHAPES = {ROWS: ("M", "D"), PER_ROW: ("M",), BROADCAST: ("D",), PARTIAL: ("D",)}
# the check that a tensor of that role (its shape already checked) has unit-stride rows: a rows tensor's
# strides are read once (``_s_<name>``, also its row stride); a vector of the checked length is unit-stride
# exactly when it is contiguous, the cheapest question to ask torch (the launcher is on every call's path)
_UNIT = {
    ROWS: "_s_{a}[1] != 1 and D > 1",
    PER_ROW: "not {a}.is_contiguous()",
    BROADCAST: "not {a}.is_contiguous()",
    PARTIAL: "not {a}.is_contiguous()",
}


def launcher(lib, iface: Interface, source: str = ""):
    """A Python function calling the kernel's driver with keyword arguments named as in the prim_func.

    Generated once per kernel (as dataclasses generates ``__init__``): straight-line code that checks each
    tensor's shape, dtype and unit stride and passes pointers, row strides, M, D, scalars and the thread count
    in the driver's order; Python itself rejects a missing or unknown name. Its cost over the bare ctypes
    call matters for one-row calls (docs/notes/measurements.md). Attributes: ``iface``, ``lib``, ``source()``.
    """
    fn = getattr(lib, f"{iface.name}_drive")
    fn.argtypes = [t for _, t in iface.driver_params()]
    fn.restype = ctypes.c_int32
    if iface.grid:
        return _grid_launcher(fn, lib, iface, source)
    tensors = [a for a in iface.args if a.role != SCALAR]
    first = next(a.name for a in tensors if a.role == ROWS)
    ns = {"_c": fn, "_empty": torch.empty, "_f32": torch.float32, "_refuse": _refuser(iface)}
    body = [f"if {first}.dim() != 2:", f"    _refuse({first}={first})", f"M, D = {first}.shape"]
    checks = []
    body += [f"_s_{a.name} = {a.name}.stride()" for a in tensors if a.role == ROWS]
    for a in tensors:
        ns[f"_dt_{a.name}"] = tuple(_STORAGE_DTYPES[a.dtype])
        shape = (
            "" if a.name == first else f"{a.name}.shape != ({', '.join(_SHAPES[a.role])},) or "
        )  # M, D come from the first
        checks.append(f"{shape}{a.name}.dtype not in _dt_{a.name} or ({_UNIT[a.role].format(a=a.name)})")
    body.append(f"if {' or '.join(f'({c})' for c in checks)}:")
    body.append(f"    _refuse({', '.join(f'{a.name}={a.name}' for a in tensors)})")
    call = []
    for a in tensors:
        call.append(f"{a.name}.data_ptr()")
        if a.role == ROWS:
            call.append(f"(_s_{a.name}[0] if M > 1 else D)")
        if a.role == PARTIAL:  # one fp32 partial per block of rows, alive until the call returns
            body.append(f"_p_{a.name} = _empty((max(-(-M // {PARTIAL_BLOCK_ROWS}), 1), 2, D), dtype=_f32)")
            call.append(f"_p_{a.name}.data_ptr()")
    call += ["M", "D"] + [a.name for a in iface.args if a.role == SCALAR] + ["nthreads"]
    body.append(f"_c({', '.join(call)})")
    params = ", ".join(a.name for a in iface.args)
    src = f"def {iface.name}(nthreads=1, *, {params}):\n" + "".join(f"    {line}\n" for line in body)
    exec(compile(src, f"<tileport launcher {iface.name}>", "exec"), ns)  # noqa: S102 (generated from the declaration)
    launch = ns[iface.name]
    launch.iface, launch.lib, launch.source, launch.python_source = iface, lib, (lambda: source), src
    return launch


def _refuser(iface: Interface):
    def refuse(**tensors):
        first = next(a.name for a in iface.args if a.role == ROWS)
        if tensors[first].dim() != 2:
            raise ValueError(
                f"{iface.name}: {first} must be a rows tensor (M, D), got shape {tuple(tensors[first].shape)}"
            )
        M, D = tensors[first].shape
        for a in iface.args:
            t = tensors.get(a.name)
            if t is None:
                continue
            want = tuple({"M": M, "D": D}[s] for s in _SHAPES[a.role])
            unit = t.dim() == 0 or t.stride(-1) == 1 or t.shape[-1] <= 1
            if tuple(t.shape) != want or t.dtype not in _STORAGE_DTYPES[a.dtype] or not unit:
                raise ValueError(
                    f"{iface.name}: {a.name} must be a {a.role} tensor of shape {want} with unit-stride "
                    f"rows and dtype {sorted(map(str, _STORAGE_DTYPES[a.dtype]))}, got {tuple(t.shape)} {t.dtype}"
                )

    return refuse


def _grid_launcher(fn, lib, iface: Interface, source: str):
    """The launcher of a grid kernel, generated as straight-line code like ``launcher``'s: per tensor its rank,
    dtype and unit last stride, its sizes bound to the names they declare (the first tensor giving a size binds
    it, the others must agree), its strides read; an optional tensor may be None."""
    ns = {"_c": fn, "_refuse": _grid_refuser(iface), "_MAX": MAX_SIZE}
    tensors = [a for a in iface.args if a.role == STRIDED]
    first_by = {d: next(a for a in tensors if d in a.sizes) for d in iface.dims()}
    body = [f"_d_{d} = None" for d, a in first_by.items() if a.optional]  # may stay unbound: 0 at the end
    bound: set[str] = set()  # sizes surely bound at this point (by a required tensor)
    for a in tensors:
        n, rank = a.name, len(a.sizes)
        ns[f"_dt_{n}"] = tuple(a.torch_dtypes)
        # shape and strides read once each (a torch.Size and a tuple: indexing them costs no call into torch)
        unit = f"(_st_{n}[{rank - 1}] != 1 and _sh_{n}[{rank - 1}] > 1)"
        lines = [f"_sh_{n}, _st_{n} = {n}.shape, {n}.stride()"]
        lines += [f"if len(_sh_{n}) != {rank} or {n}.dtype not in _dt_{n} or {unit}:", f"    _refuse({n}={n})"]
        for i, d in enumerate(a.sizes):
            if isinstance(d, int) or d in bound:
                lines += [f"if _sh_{n}[{i}] != {d if isinstance(d, int) else '_d_' + d}:", f"    _refuse({n}={n})"]
            elif first_by[d].optional:  # None until some tensor gives it
                lines += [f"if _d_{d} is None:", f"    _d_{d} = _sh_{n}[{i}]"]
                lines += [f"elif _sh_{n}[{i}] != _d_{d}:", f"    _refuse({n}={n})"]
            else:  # a required tensor is the first to give it
                lines.append(f"_d_{d} = _sh_{n}[{i}]")
        stride_vars = [(s, i) for i, s in enumerate(a.strides) if isinstance(s, str)]
        lines += [f"_p_{n} = {n}.data_ptr()"] + [f"_s_{s} = _st_{n}[{i}]" for s, i in stride_vars]
        if a.optional:
            body += [f"if {n} is None:", f"    _p_{n} = has_{n} = 0"] + [f"    _s_{s} = 0" for s, _ in stride_vars]
            body += ["else:", f"    has_{n} = 1"] + [f"    {line}" for line in lines]
        else:
            body += [f"if {n} is None:", f"    _refuse({n}={n})"] + lines
            bound |= {d for d in a.sizes if isinstance(d, str)}
    body += [f"_d_{d} = 0 if _d_{d} is None else _d_{d}" for d, a in first_by.items() if a.optional and d not in bound]
    dims = [f"_d_{d}" for d in iface.dims()]
    body += [f"if {' or '.join(f'{d} > _MAX' for d in dims)}:", f"    _refuse(sizes=({', '.join(dims)},))"]
    call = [f"_p_{a.name}" for a in tensors] + dims + [f"_s_{s}" for s in iface.stride_names()]
    call += [a.name for a in iface.args if a.role in (SCALAR, FLAG)] + ["nthreads"]
    body.append(f"_c({', '.join(call)})")
    params = ", ".join(a.name for a in iface.args if a.role in (STRIDED, SCALAR))
    src = f"def {iface.name}(nthreads=1, *, {params}):\n" + "".join(f"    {line}\n" for line in body)
    exec(compile(src, f"<tileport launcher {iface.name}>", "exec"), ns)  # noqa: S102 (generated from the declaration)
    launch = ns[iface.name]
    launch.iface, launch.lib, launch.source, launch.python_source = iface, lib, (lambda: source), src
    return launch


def _grid_refuser(iface: Interface):
    def refuse(**given):
        if "sizes" in given:
            raise ValueError(f"{iface.name}: sizes {dict(zip(iface.dims(), given['sizes']))} exceed {MAX_SIZE}")
        ((name, t),) = given.items()
        a = next(a for a in iface.args if a.name == name)
        shape = str(tuple(a.sizes)).replace("'", "")
        want = (
            f"a tensor of shape {shape} with unit stride in its last dimension and dtype "
            f"{sorted(map(str, a.torch_dtypes))}"
        )
        if t is None:
            raise ValueError(f"{iface.name}: {name} must be {want}, got None")
        raise ValueError(
            f"{iface.name}: {name} must be {want} (sizes agreeing with the other tensors'), "
            f"got {tuple(t.shape)} {t.dtype} strides {tuple(t.stride())}"
        )

    return refuse
