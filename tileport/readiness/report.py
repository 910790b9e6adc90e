"""lower.md and lower.json of a readiness check: one row per kernel and configuration, the verdict first."""

from __future__ import annotations

import json
from pathlib import Path

from .check import Readiness


def _config(k) -> str:
    return ", ".join(f"{n}={v}" for n, v in k.constants.items() if v is not None) or "-"


def _verdict(k) -> str:
    if not k.lowered:
        return f"**does not lower** ({k.stage})"
    return "lowers" if k.ok else "**lowers, over a limit**"


def headline(r: Readiness) -> str:
    bad = [k for k in r.kernels if not k.ok]
    if not bad and r.kernels and (r.capture.error or r.capture.backward.startswith("stopped")):
        which = f"the call raised ({r.capture.error})" if r.capture.error else f"the backward {r.capture.backward}"
        return f"FAIL: {len(r.kernels)} kernels lower, but {which}: the kernels after it were not reached"
    return (
        "PASS: every kernel lowers within the chip's limits"
        if r.ok
        else f"FAIL: {len(bad)} of {len(r.kernels)} kernels do not lower or exceed a limit"
        if r.kernels
        else "FAIL: the function launched no Triton kernel"
    )


def summary(r: Readiness) -> list[str]:
    """The terminal's lines: the verdict, the path, then one line per kernel, the compiler's error where it does
    not lower, and its causes."""
    lines = [
        f"{headline(r)} ({r.chip.name}, {r.chip.vector_cores} vector cores)",
        "path: " + ("NPU (the package asked: " + "; ".join(r.path) + ")" if r.path else "generic (no NPU asked for)"),
    ]
    if r.capture.error:
        lines.append(f"the function raised: {r.capture.error}")
    for k in r.kernels:
        lines.append(
            f"{'ok  ' if k.ok else 'FAIL'} {k.kernel} [{_config(k)}] grid {k.programs}: {_verdict(k).replace('**', '')}"
        )
        if k.error:  # the compiler's error, quoted: an unknown cause is read from it
            lines.append(f"     error: {k.error}")
        lines += [f"     {'' if f.fails else 'note: '}{f.what}\n       fix: {f.fix}" for f in k.findings]
    return lines


def markdown(r: Readiness) -> str:
    lines = [
        f"# tileport lower --impl {r.impl} --target {r.target}: {headline(r)}",
        "",
        (
            f"{r.chip.name} ({r.chip.arch}): {r.chip.vector_cores} vector cores, {r.chip.ub_bytes // 1024} KB unified "
            f"buffer; triton-ascend {r.triton_ascend}."
        ),
        "",
        "Path: "
        + (
            "the package asked for the NPU (" + "; ".join(r.path) + ") and the stand-in answered as the chip: "
            "it took its NPU path."
            if r.path
            else "the package never asked for an NPU: it took its generic path."
        ),
        "",
        "Arguments: "
        + (", ".join(f"{n}={v}" for n, v in r.capture.arguments.items()) or "none")
        + (f"; backward: {r.capture.backward}" if r.capture.backward else "; no backward (no autograd graph)"),
    ]
    if r.capture.error:
        lines += [
            "",
            f"The function raised after its launches so far: {r.capture.error}",
        ]
    lines += [
        "",
        "| kernel | constexprs | grid (programs / cores) | tiles (KB of UB) | verdict | cause -> fix |",
        "|---|---|---|---|---|---|",
    ]
    for k in r.kernels:
        ub = f"{k.limits.ub_bytes / 1024:.1f} / {k.limits.ub_budget // 1024}" if k.limits else "-"
        causes = (
            "<br>".join(
                f"{'' if f.fails else '(note) '}{f.what} -> {f.fix}" + (f" [{f.detail}]" if f.detail else "")
                for f in k.findings
            )
            or "-"
        )
        lines.append(
            f"| `{k.kernel}` | {_config(k)} | {k.programs} / {r.chip.vector_cores} | {ub} | {_verdict(k)} | {causes} |"
        )
    return "\n".join(lines) + "\n"


def as_json(r: Readiness) -> dict:
    return {
        "impl": r.impl,
        "target": r.target,
        "chip": r.chip.name,
        "arch": r.chip.arch,
        "vector_cores": r.chip.vector_cores,
        "ub_bytes": r.chip.ub_bytes,
        "triton_ascend": r.triton_ascend,
        "ok": r.ok,
        "path": r.path,
        "arguments": r.capture.arguments,
        "backward": r.capture.backward,
        "error": r.capture.error,
        "kernels": [
            {
                "kernel": k.kernel,
                "constants": {
                    n: repr(v) if not isinstance(v, (int, float, str, bool, type(None))) else v
                    for n, v in k.constants.items()
                },
                "options": k.options,
                "grid": list(k.grid),
                "programs": k.programs,
                "lowered": k.lowered,
                "stage": k.stage,
                "error": k.error,
                "ok": k.ok,
                "binary": k.binary,
                "ub_bytes": k.limits.ub_bytes if k.limits else None,
                "largest_tile": str(k.limits.largest) if k.limits and k.limits.largest else None,
                "findings": [
                    {"cause": f.key, "what": f.what, "fix": f.fix, "fails": f.fails, "detail": f.detail}
                    for f in k.findings
                ],
            }
            for k in r.kernels
        ],
    }


def write(r: Readiness, out: Path) -> list[Path]:
    """lower.md, lower.json and each kernel's TTIR and Linalg IR under ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for i, k in enumerate(r.kernels):
        for stage, text in k.files.items():
            path = out / f"{i:02d}_{k.kernel.replace(':', '.').rsplit('.', 1)[-1].strip('_')}.{stage}"
            path.write_text(text)
            written.append(path)
    (out / "lower.md").write_text(markdown(r))
    (out / "lower.json").write_text(json.dumps(as_json(r), indent=1, default=str))
    return [out / "lower.md", out / "lower.json", *written]
