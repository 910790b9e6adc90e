"""A user's TileLang kernel written for GPUs, judged for Ascend (the wheel's ``ascend`` target, Ascend 950) or
built for this CPU (the C target): ``tileport lower --impl MODULE:PRIM_FUNC_OR_JIT --target ascend|cpu``.

The kernel is a ``T.prim_func``, a function that returns one (called with ``--arg NAME=VALUE``), or a
``@tilelang.jit`` function (its ``get_tir`` with those arguments). It is lowered for the target; a failure is
matched against ``causes.TILE_CAUSES``, and the GPU-only constructs its TIR holds (threads per block, register
fragments, warp shuffles, ``T.gemm``, the approximate hardware rsqrt) are named with their Ascend counterparts."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from ..backends.tilelang.targets import ON_CHIP_BUDGET, lower_kernel
from ..external import ImplError, load_callable
from . import causes
from .check import Finding

TARGETS = ("ascend", "cpu")
# a construct in the kernel's TIR -> the cause it names (noted even where the kernel lowers)
_CONSTRUCTS = (
    ("threads", r"tl\.launch_threads\": \[(?!1, 1, 1\])"),
    ("fragment", r"local\.fragment|alloc_fragment"),
    ("warp", r"shfl|warp_shuffle"),
    ("gemm", r"\bgemm"),
    ("rsqrt", r"\brsqrt\b"),
)


@dataclass
class TileVerdict:
    impl: str
    target: str
    lowered: bool
    error: str = ""
    source: str = ""  # the generated source (Ascend C, or C)
    on_chip: int = 0  # UB bytes the Ascend kernel addresses
    findings: list[Finding] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.lowered and not any(f.fails for f in self.findings)


def prim_func(impl: str, given: dict, symbolic: bool = False):
    """The PrimFunc ``impl`` names (module docstring); ImplError where it is none of those. ``symbolic``: a
    ``@tilelang.jit`` size not given is a symbolic one (as ``tileport verify --impl`` builds it for the CPU)."""
    # tilelang and its tvm: seconds to import, kept out of start-up (tilelang first: its own tvm build)
    import tilelang  # noqa: F401
    from tvm.tirx import PrimFunc

    obj, _, _ = load_callable(impl)
    if isinstance(obj, PrimFunc):
        return obj
    if symbolic and hasattr(obj, "get_tir"):  # sizes not given: symbolic, one build for every shape
        from ..backends.tilelang.cpu import foreign  # tilelang: kept out of start-up

        given = foreign.symbolic_sizes(obj, given) | given
    try:
        out = obj.get_tir(**given) if hasattr(obj, "get_tir") else obj(**given)
    except TypeError as exc:
        raise ImplError(f"--impl {impl}: {exc} (give its arguments with --arg NAME=VALUE)") from None
    out = getattr(out, "prim_func", out)
    if not isinstance(out, PrimFunc):
        raise ImplError(f"--impl {impl}: gives a {type(out).__name__}, not a TileLang prim_func")
    return out


def check(impl: str, target: str, given: dict) -> TileVerdict:
    """Lower ``impl``'s kernel for ``target`` (ascend, cpu) and judge it."""
    if target not in TARGETS:
        raise ValueError(f"a TileLang kernel is judged for {' or '.join(TARGETS)}, not {target!r}")
    func = prim_func(impl, given, symbolic=target == "cpu")
    script = func.script()
    v = TileVerdict(impl, target, False)
    try:
        if target == "ascend":
            v.source, v.on_chip = lower_kernel(func, "ascend")
            if v.on_chip > ON_CHIP_BUDGET["ascend"]:
                v.findings.append(
                    Finding.of(
                        causes.BY_KEY["ub-tile"],
                        f"{v.on_chip / 1024:.1f} KB of {ON_CHIP_BUDGET['ascend'] // 1024} KB",
                    )
                )
        else:
            from ..backends.tilelang.cpu import foreign  # tilelang: kept out of start-up

            v.source = foreign.build(func).get_kernel_source()
        v.lowered = True
    except Exception as exc:  # noqa: BLE001 - the compiler's failure is the finding
        v.error = f"{type(exc).__name__}: {' '.join(str(exc).split())[:600]}"
        cause = causes.classify(v.error, causes.TILE_CAUSES)
        v.findings.append(Finding.of(cause, v.error) if cause else Finding.unknown(v.error))
    seen = {f.key for f in v.findings}
    if target == "ascend":
        for key, pattern in _CONSTRUCTS:
            if key not in seen and re.search(pattern, script):
                v.findings.append(Finding.of(causes.BY_KEY[key], "in the kernel's TIR", fails=False))
    return v


def markdown(v: TileVerdict) -> str:
    head = (
        "PASS: it lowers" if v.ok else ("FAIL: it does not lower" if not v.lowered else "FAIL: it lowers over a limit")
    )
    lines = [f"# tileport lower --impl {v.impl} --target {v.target}: {head}", ""]
    if v.on_chip:
        lines.append(f"Unified buffer: {v.on_chip / 1024:.1f} KB addressed.")
    if v.target == "cpu" and v.lowered:
        lines.append(
            f"It builds for this CPU: `tileport verify OP --impl {v.impl}` judges it against OP's contract (its "
            "buffers named as OP's inputs, or `--arg BUFFER=INPUT`; the others are its outputs)."
        )
    lines += ["", "| finding | cause | fix |", "|---|---|---|"]
    lines += [f"| {'fails' if f.fails else 'note'} | {f.what} | {f.fix} |" for f in v.findings] or ["| - | - | - |"]
    return "\n".join(lines) + "\n"


def write(v: TileVerdict, out: Path) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    written = [out / "lower.md"]
    (out / "lower.md").write_text(markdown(v))
    if v.source:
        path = out / ("kernel.cpp" if v.target == "ascend" else "kernel.c")
        path.write_text(v.source)
        written.append(path)
    return written
