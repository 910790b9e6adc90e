"""A user's Triton kernels judged for an A2/A3 chip: captured under the stand-in, each distinct launch compiled
by triton-ascend, its failure matched to a known cause, its figures against the chip's limits."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from ..backends.triton import ascend, lowering
from . import capture as cap
from . import causes, dispatch, limits, standin


@dataclass
class Finding:
    key: str  # a causes.CAUSES key, or "unknown"
    what: str
    fix: str
    fails: bool
    detail: str = ""  # the figures or the compiler's message behind it

    @classmethod
    def of(cls, cause: causes.Cause, detail: str = "", fails: bool | None = None) -> Finding:
        """The finding of a known cause (``fails``: its own verdict unless given)."""
        return cls(cause.key, cause.what, cause.fix, cause.fails if fails is None else fails, detail)

    @classmethod
    def unknown(cls, message: str) -> Finding:
        """A compiler message no known cause matches: reported as it stands, never guessed."""
        what = "unknown: no cause in tileport's table matches the compiler's error"
        return cls(
            "unknown",
            what,
            "read the message; if its cause is known, add it to tileport/readiness/causes.py",
            True,
            message,
        )


@dataclass
class KernelVerdict:
    kernel: str  # module.name
    constants: dict
    options: list[dict]  # the launch options of every configuration compiled as this one (num_warps, ...)
    grid: tuple
    programs: int
    lowered: bool
    stage: str = ""  # where it stopped ("ttir", "linalg"), "" if it lowered
    error: str = ""
    limits: limits.Limits | None = None
    findings: list[Finding] = field(default_factory=list)
    files: dict[str, str] = field(default_factory=dict)  # stage -> text (ttir, ttadapter)
    binary: str = ""

    @property
    def ok(self) -> bool:
        return self.lowered and not any(f.fails for f in self.findings)


@dataclass
class Readiness:
    target: str
    chip: ascend.Chip
    impl: str
    triton_ascend: str | None
    path: list[str]  # what the package asked about the device (the stand-in answered)
    capture: cap.Capture
    kernels: list[KernelVerdict] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """Every kernel lowers within the limits, and neither the call nor its backward raised (a kernel not
        reached is not vouched for)."""
        stopped = self.capture.error or self.capture.backward.startswith("stopped")
        return bool(self.kernels) and all(k.ok for k in self.kernels) and not stopped


def _finding(key: str, detail: str = "") -> Finding:
    return Finding.of(causes.BY_KEY[key], detail)


def _compile_finding(done: lowering.Lowered) -> Finding:
    """The cause of a failed compile, matched on the compiler's error itself (``done.message``)."""
    if re.search(r"\bNone\b|NoneType", done.message):  # a value that is None: a stub's, where the kernel calls one
        stubs = dispatch.called_stubs(done.launch.kernel, dispatch.mapped(done.chip.arch))
        if stubs:  # named in the finding: the failing line is where the None arrived, not the call
            stub = causes.BY_KEY["libdevice-stub"]
            return Finding(stub.key, f"{', '.join(stubs)}: {stub.what}", stub.fix, True, done.error)
    ttir = done.files.get("ttir", "")
    found = causes.classify(done.message) or (causes.BY_KEY["inline-asm"] if "inline_asm" in ttir else None)
    return Finding.unknown(done.error) if found is None else Finding.of(found, done.error, fails=True)


def _judge(launch: lowering.Launch, options: list[dict], chip: ascend.Chip) -> KernelVerdict:
    done = lowering.compile_launch(launch, chip, strict=False)
    v = KernelVerdict(
        launch.where,
        launch.constants,
        options,
        launch.grid,
        launch.programs,
        done.lowered,
        done.stage,
        done.error,
        files=dict(done.files),
        binary=done.binary,
    )
    if not done.lowered:
        v.findings.append(_compile_finding(done))
        return v
    if "inline_asm" in done.files.get("ttir", ""):  # carried into the Linalg IR; CANN's compiler refuses it
        v.findings.append(_finding("inline-asm", "tt.elementwise_inline_asm in the TTIR"))
    v.limits = limits.measure(launch.programs, done.files["ttadapter"], chip, launch.shapes, launch.signature)
    for key in v.limits.findings():
        v.findings.append(_finding(key, _detail(key, v.limits)))
    if len({tuple(sorted(o.items())) for o in options}) > 1:
        v.findings.append(
            _finding(
                "num-warps",
                f"{len(options)} configurations: "
                + "; ".join(", ".join(f"{k}={val}" for k, val in sorted(o.items())) for o in options),
            )
        )
    return v


def _detail(key: str, lim: limits.Limits) -> str:
    if key in ("grid", "cores"):
        return f"{lim.programs} programs, {lim.cores} vector cores (limit {limits.MAX_PROGRAMS})"
    if key in ("ub", "double-buffer"):
        return (
            f"tiles {lim.ub_bytes / 1024:.1f} KB of {lim.ub_budget // 1024} KB (largest {lim.largest}, "
            f"{lim.largest.bytes / 1024:.1f} KB)"
        )
    if key == "tail":
        rows = ", ".join(f"{n} rows of {b} bytes" for n, b in lim.unaligned_rows.items())
        block = (
            f"block's last dimension {lim.tail_bytes} bytes" if lim.tail_bytes and lim.tail_bytes % limits.ALIGN else ""
        )
        return "; ".join(x for x in (block, rows) if x)
    return ""


def _grouped(
    launches: list[lowering.Launch],
) -> list[tuple[lowering.Launch, list[dict]]]:
    """Distinct launches (what compiles once), each with the launch options of every launch compiled as it."""
    out: dict[tuple, tuple[lowering.Launch, list[dict]]] = {}
    for launch in launches:
        _first, opts = out.setdefault(launch.compiled_as, (launch, []))
        if launch.options not in opts:
            opts.append(launch.options)
    return list(out.values())


def check(
    impl: str, target: str, given: dict[str, object], spec=None, examples: list[dict] | None = None, problem=None
) -> Readiness:
    """The user's function at ``impl`` captured for ``target`` (ascend-a2, ascend-a3) and every kernel judged;
    ValueError where triton-ascend is not installed or the target is unknown."""
    if target not in ascend.CHIPS:
        raise ValueError(f"unknown Ascend target {target!r}; choose from {', '.join(ascend.CHIPS)}")
    version = ascend.triton_ascend_version()
    if version is None:
        raise ValueError(
            f"--target {target} lowers through triton-ascend, which is not installed here: {ascend.INSTALL}"
        )
    chip = ascend.CHIPS[target]
    with standin.standing_in(chip) as path:
        captured = cap.capture(impl, given, spec, examples, problem)
    result = Readiness(target, chip, impl, version, path.asked, captured)
    result.kernels = [_judge(launch, options, chip) for launch, options in _grouped(captured.launches)]
    return result
