"""Lower an operator's Triton kernels for Ascend A2/A3 without the device (``tileport lower OP --target
ascend-a2``): the launches its forward and backward make are captured on small CPU tensors (nothing runs), and
each kernel is compiled by triton-ascend for the chip: TTIR, then Linalg IR (``ttadapter``), then the NPU binary
where CANN's bishengir-compile is present.
"""

from __future__ import annotations

import contextlib
import inspect
import io
import os
import re
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import torch

from ..registry import REGISTRY
from . import BACKEND, ascend

_TYPES = {
    torch.float32: "fp32",
    torch.float16: "fp16",
    torch.bfloat16: "bf16",
    torch.float64: "fp64",
    torch.uint16: "u16",
    torch.int16: "i16",
    torch.int32: "i32",
    torch.int64: "i64",
    torch.uint8: "u8",
    torch.int8: "i8",
    torch.bool: "i1",
}


class LoweringError(RuntimeError):
    """A kernel triton-ascend does not lower (the message names the kernel, the chip and the stage)."""


@dataclass
class Launch:
    kernel: object  # the JITFunction
    signature: dict[str, str]
    constants: dict[str, object]
    grid: tuple
    options: dict[str, object] = field(default_factory=dict)  # launch options that are no parameter (num_warps, ...)
    shapes: dict[str, tuple] = field(default_factory=dict)  # a tensor argument's shape

    @property
    def compiled_as(self) -> tuple:
        """What Triton compiles a launch by: its kernel, constexprs and signature (launches equal in it share one
        compiled kernel)."""
        return (
            self.module,
            self.name,
            tuple(sorted(self.constants.items(), key=str)),
            tuple(sorted(self.signature.items())),
        )

    @property
    def programs(self) -> int:
        n = 1
        for g in self.grid:
            n *= int(g)
        return n

    @property
    def name(self) -> str:
        return self.kernel.fn.__name__ if hasattr(self.kernel, "fn") else str(self.kernel)

    @property
    def module(self) -> str:
        return self.kernel.fn.__module__ if hasattr(self.kernel, "fn") else ""

    @property
    def where(self) -> str:
        """module.name, or file.py:name for a kernel of a file imported by path."""
        fn = getattr(self.kernel, "fn", None)
        if fn is not None and self.module.startswith("tileport_file_"):
            return f"{Path(fn.__code__.co_filename).name}:{self.name}"
        return f"{self.module}.{self.name}"


@dataclass
class Lowered:
    launch: Launch
    chip: ascend.Chip
    files: dict[str, str] = field(default_factory=dict)  # stage (ttir, ttadapter) -> its text
    binary: str = ""  # why there is no NPU binary, or its size
    npubin: bytes | None = None  # the NPU binary, where CANN built one
    stage: str = ""  # where it stopped short of the Linalg IR: "ttir" (the front end) or "linalg"; "" if it lowered
    error: str = ""  # the compiler's error there and the source line it stopped at (one line)
    message: str = ""  # the compiler's error itself, without the source lines it quotes: what causes match on

    @property
    def lowered(self) -> bool:
        return "ttadapter" in self.files


def _type(v) -> str:
    if isinstance(v, torch.Tensor):
        return "*" + _TYPES[v.dtype]
    if isinstance(v, bool):
        return "i1"
    if isinstance(v, int):
        return "i32" if -(2**31) <= v < 2**31 else "i64"
    if isinstance(v, float):
        return "fp32"
    raise LoweringError(f"an argument of type {type(v).__name__} has no Triton signature type")


def _launch(kernel, args: tuple, kwargs: dict, grid) -> Launch:
    """A launch as Triton would compile it: non-constexpr parameters typed (None is a constexpr, as Triton
    specializes it), constexprs by value (their defaults where not given), other keywords as options."""
    values = dict(zip(kernel.arg_names, args)) | kwargs
    defaults = {n: p.default for n, p in inspect.signature(kernel.fn).parameters.items() if p.default is not p.empty}
    sig, consts, shapes = {}, {}, {}
    for p in kernel.params:
        v = values[p.name] if p.name in values else defaults.get(p.name)
        if p.is_constexpr or v is None:
            consts[p.name] = v
        else:
            sig[p.name] = _type(v)
        if isinstance(v, torch.Tensor):
            shapes[p.name] = tuple(v.shape)
    options = {k: v for k, v in kwargs.items() if k not in sig and k not in consts}
    meta = {k: v for k, v in values.items() if not isinstance(v, torch.Tensor)} | consts
    return Launch(kernel, sig, consts, tuple(grid(meta) if callable(grid) else grid), options, shapes)


@contextlib.contextmanager
def recording():
    """Inside the block, Triton launches are recorded (as ``Launch``), not run."""
    # triton: optional (tileport[triton]), kept out of start-up
    from triton.runtime import jit

    launches: list[Launch] = []

    def record(self, *args, grid=None, warmup=False, **kwargs):
        launches.append(_launch(self, args, kwargs, grid))

    run = jit.JITFunction.run
    jit.JITFunction.run = record
    try:
        yield launches
    finally:
        jit.JITFunction.run = run


@contextlib.contextmanager
def capturing(chip: ascend.Chip):
    """Inside the block, Triton launches are recorded (as ``Launch``), not run, and tiled for ``chip``; the
    registry hands out the Triton kernels whatever the tensors' device (they are CPU tensors here)."""

    kernels = REGISTRY.kernels
    REGISTRY.kernels = lambda op, device, dtypes, backend=None: BACKEND.kernels(op)  # type: ignore[method-assign]
    try:
        with recording() as launches, ascend.lowering_for(chip):
            yield launches
    finally:
        REGISTRY.kernels = kernels  # type: ignore[method-assign]


def _output_grads(spec, inputs: dict, gen: torch.Generator) -> dict:
    """The gradients a backward takes by its outputs' names (``d<output>``, where it takes no row-wise ``dy``),
    drawn in the shapes the forward gives (captured: nothing runs)."""
    bwd = spec.backward
    if bwd is None or "dy" in bwd.tensors:
        return {}
    outs = spec.run(inputs, "triton", False)
    return {
        f"d{name}": torch.randn(t.shape, generator=gen).to(t.dtype)
        for name, t in outs.items()
        if f"d{name}" in bwd.tensors and isinstance(t, torch.Tensor)
    }


def _own_examples(op: str, dtype: torch.dtype, dim: int, gen: torch.Generator) -> list[dict] | None:
    """The inputs an operator's kernel module gives for its lowering (``lowering_examples(dtype, dim, generator)``,
    in the spec's names: an operator whose inputs are no rows of ``dim`` columns), or None."""
    try:
        module = BACKEND.kernels(op)
    except ImportError:
        return None
    own = getattr(module, "lowering_examples", None)
    return None if own is None else own(dtype, dim, gen)


def launches(spec, chip: ascend.Chip, dtype: torch.dtype, dim: int, rows: int = 256) -> list[Launch]:
    """The kernels an operator's forward and backward launch (``spec``: its ``ops`` spec, given by the caller
    above the backends) for rows of ``dim`` columns, or on the kernel module's own examples at ``dim`` (one per
    kernel and constants)."""
    gen = torch.Generator().manual_seed(0)
    examples = _own_examples(spec.name, dtype, dim, gen)
    if examples is None:
        examples = [spec.example((rows, dim), dtype, "cpu", gen)]
        examples[0]["dy"] = torch.randn((rows, dim), generator=gen).to(dtype)
    with capturing(chip) as found:
        for inputs in examples:
            inputs |= _output_grads(spec, inputs, gen)
            spec.run(inputs, "triton", True)
    return distinct(found)


def distinct(found: list[Launch]) -> list[Launch]:
    """One launch per kernel, constexprs and signature (what Triton compiles once), in order of first launch."""
    unique: dict[tuple, Launch] = {}
    for launch in found:
        unique.setdefault(launch.compiled_as, launch)
    return list(unique.values())


def _one_line(text: str, limit: int = 600) -> str:
    return " ".join(str(text).split())[:limit]


def compiler_error(exc: BaseException) -> tuple[str, str]:
    """(the compiler's error itself, where it stopped) of a failed compile, each one line. Triton's
    CompilationError prints up to 12 source lines above the failing one, comments and all, before its error; a
    failure inside a called JIT function is chained (``__cause__``) under one per call. The error is taken from
    the innermost of them, never from the text it quotes: a comment mentioning float64 is no fp64 math."""

    def quotes(e) -> bool:  # triton's CompilationError by its fields (src, node, error_message)
        return e is not None and all(hasattr(e, a) for a in ("src", "node", "error_message"))

    if not quotes(exc):
        return f"{type(exc).__name__}: {_one_line(exc)}", ""
    while quotes(exc.__cause__):
        exc = exc.__cause__
    cause = exc.__cause__
    if cause is not None:  # a builtin's own exception, raised through the CompilationError
        message = f"{type(cause).__name__}: {_one_line(cause)}"
    else:  # the error's repr (ValueError("...")), read back as "ValueError: ...", or the code generator's words
        text = _one_line(exc.error_message or "no message")
        raised = re.fullmatch(r"(\w+)\((['\"])(.*)\2\)", text)
        message = f"{raised[1]}: {raised[3]}" if raised else f"{type(exc).__name__}: {text}"
    lineno = getattr(exc.node, "lineno", None)
    lines = (exc.src or "").split("\n")
    if lineno is None or not 0 < lineno <= len(lines):
        return message, ""
    return message, f"at {lineno}:{getattr(exc.node, 'col_offset', 0)}: {_one_line(lines[lineno - 1], 200)}"


def compile_launch(launch: Launch, chip: ascend.Chip, strict: bool = True) -> Lowered:
    """TTIR and Linalg IR of one captured launch for ``chip`` (and the NPU binary with CANN); where triton-ascend
    stops before the Linalg IR, LoweringError (``strict``) or the result with its ``stage`` and ``error``."""
    # triton: optional (tileport[triton]), kept out of start-up
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    out = Lowered(launch, chip)
    with tempfile.TemporaryDirectory(prefix="tileport-ascend-") as cache:
        before = os.environ.get("TRITON_CACHE_DIR")
        os.environ["TRITON_CACHE_DIR"] = cache  # a fresh cache: its files are this compile's
        error = None
        try:
            with contextlib.redirect_stdout(io.StringIO()):  # triton-ascend prints its search for CANN's compiler
                compiled = triton.compile(
                    ASTSource(fn=launch.kernel, signature=launch.signature, constants=launch.constants),
                    target=GPUTarget("npu", chip.arch, 0),
                )
            out.npubin = compiled.asm.get("npubin")
            out.binary = f"NPU binary built ({len(out.npubin or b'')} bytes)"
        except Exception as exc:  # noqa: BLE001 - judged below by the stages that were written
            error = exc
        finally:
            if before is None:
                os.environ.pop("TRITON_CACHE_DIR", None)
            else:
                os.environ["TRITON_CACHE_DIR"] = before
        for path in Path(cache).rglob("*"):
            if path.suffix in (".ttir", ".ttadapter") and path.is_file():
                out.files[path.suffix[1:]] = path.read_text()
    if "ttadapter" not in out.files:
        out.message, where = compiler_error(error) if error else ("no Linalg IR written", "")
        out.stage = "linalg" if "ttir" in out.files else "ttir"
        out.error = out.message + (f" ({where})" if where else "")
        if not strict:
            return out
        raise LoweringError(f"{launch.module}.{launch.name} does not lower for {chip.arch}: {out.error}")
    if error is not None:
        out.binary = (
            "no NPU binary: CANN's bishengir-compile is not set up (source <ascend-toolkit>/set_env.sh)"
            if ascend.bishengir() is None
            else f"no NPU binary: {compiler_error(error)[0][:300]}"
        )
    return out


def lower(spec, target: str, dtype: torch.dtype, dim: int) -> list[Lowered]:
    """Every Triton kernel of an operator (its spec) lowered for ``target`` (ascend-a2, ascend-a3) at ``dim``
    columns; ValueError naming what is missing (triton-ascend, the target)."""
    if target not in ascend.CHIPS:
        raise ValueError(f"unknown Ascend target {target!r}; choose from {', '.join(ascend.CHIPS)}")
    if ascend.triton_ascend_version() is None:
        raise ValueError(
            f"--target {target} lowers through triton-ascend, which is not installed here: {ascend.INSTALL}"
        )
    chip = ascend.CHIPS[target]
    return [compile_launch(launch, chip) for launch in launches(spec, chip, dtype, dim)]
