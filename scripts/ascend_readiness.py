"""Run ``tileport lower --impl`` on the upstream kernels of the operators tileport has (flash-linear-attention's
and Liger-Kernel's, installed from fla-core and liger-kernel) for A2 and A3, as written and by the path each
package takes on an NPU, and write docs/ascend-readiness.md from the results (benchmarks/results/readiness/).

Run it in the triton-ascend environment (.ci/run's second one) with the packages installed without their
dependencies, which would bring upstream triton back:
    pip install --no-deps fla-core liger-kernel einops && python scripts/ascend_readiness.py
Each check runs in a process of its own (a package picks its path once, at import)."""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results" / "readiness"
PAGE = ROOT / "docs" / "ascend-readiness.md"
NORM = ["x=4096x2048:bfloat16", "weight=2048:bfloat16"]
LIGER_NORM = ["X=4096x2048:bfloat16", "W=2048:bfloat16", "eps=1e-6"]
GATE = ["a=2048x5632:bfloat16", "b=2048x5632:bfloat16"]

# (name, package, tileport's operator, the function as a user calls it, its arguments, the Ascend variant's own
# function where the package keeps one apart)
UPSTREAM = [
    (
        "fla l2norm",
        "fla-core",
        "l2norm",
        "fla.modules.norm.l2norm:l2norm",
        ["x=4096x2048:bfloat16"],
        None,
    ),
    (
        "fla rms_norm",
        "fla-core",
        "rms_norm",
        "fla.modules.norm.layernorm:rms_norm",
        [*NORM, "bias=None"],
        None,
    ),
    (
        "fla layer_norm",
        "fla-core",
        "layer_norm",
        "fla.modules.norm.layernorm:layer_norm",
        [*NORM, "bias=2048:bfloat16"],
        None,
    ),
    (
        "fla rms_norm_gated",
        "fla-core",
        "gated_rms_norm",
        "fla.modules.norm.fused_norm_gate:rms_norm_gated",
        [*NORM, "g=4096x2048:bfloat16", "bias=None"],
        None,
    ),
    (
        "fla rotary_embedding",
        "fla-core",
        "rope",
        "fla.modules.rotary.ops:rotary_embedding",
        ["x=2x2048x16x128:bfloat16", "cos=2048x64:bfloat16", "sin=2048x64:bfloat16"],
        None,
    ),
    (
        "Liger rms_norm",
        "liger-kernel",
        "rms_norm",
        "liger_kernel.ops:LigerRMSNormFunction.apply",
        LIGER_NORM,
        "liger_kernel.ops.backends._ascend.ops.rms_norm:LigerRMSNormFunction.apply",
    ),
    (
        "Liger layer_norm",
        "liger-kernel",
        "layer_norm",
        "liger_kernel.ops:LigerLayerNormFunction.apply",
        ["X=4096x2048:bfloat16", "W=2048:bfloat16", "B=2048:bfloat16", "eps=1e-6"],
        "liger_kernel.ops.backends._ascend.ops.layer_norm:LigerLayerNormFunction.apply",
    ),
    (
        "Liger fused_add_rms_norm",
        "liger-kernel",
        "add_rms_norm",
        "liger_kernel.ops:LigerFusedAddRMSNormFunction.apply",
        ["X=4096x2048:bfloat16", "R=4096x2048:bfloat16", "W=2048:bfloat16", "eps=1e-6"],
        "liger_kernel.ops.backends._ascend.ops.fused_add_rms_norm:LigerFusedAddRMSNormFunction.apply",
    ),
    (
        "Liger softmax",
        "liger-kernel",
        "softmax",
        "liger_kernel.ops:LigerSoftmaxFunction.apply",
        ["input_=1024x32000:bfloat16"],
        "liger_kernel.ops.backends._ascend.ops.softmax:LigerSoftmaxFunction.apply",
    ),
    (
        "Liger swiglu",
        "liger-kernel",
        "swiglu",
        "liger_kernel.ops:LigerSiLUMulFunction.apply",
        GATE,
        "liger_kernel.ops.backends._ascend.ops.swiglu:LigerSiLUMulFunction.apply",
    ),
    (
        "Liger geglu",
        "liger-kernel",
        "geglu",
        "liger_kernel.ops:LigerGELUMulFunction.apply",
        GATE,
        "liger_kernel.ops.backends._ascend.ops.geglu:LigerGELUMulFunction.apply",
    ),
    (
        "Liger cross_entropy",
        "liger-kernel",
        "cross_entropy",
        "liger_kernel.ops:LigerCrossEntropyFunction.apply",
        ["_input=4096x32000:bfloat16", "target=4096:int64", "weight=None"],
        "liger_kernel.ops.backends._ascend.ops.cross_entropy:LigerCrossEntropyFunction.apply",
    ),
    (
        "Liger cross_entropy V 128256",
        "liger-kernel",
        "cross_entropy",
        "liger_kernel.ops:LigerCrossEntropyFunction.apply",
        ["_input=1024x128256:bfloat16", "target=1024:int64", "weight=None"],
        "liger_kernel.ops.backends._ascend.ops.cross_entropy:LigerCrossEntropyFunction.apply",
    ),
    (
        "Liger softmax D 65536",
        "liger-kernel",
        "softmax",
        "liger_kernel.ops:LigerSoftmaxFunction.apply",
        ["input_=256x65536:bfloat16"],
        "liger_kernel.ops.backends._ascend.ops.softmax:LigerSoftmaxFunction.apply",
    ),
]
TARGETS = ("ascend-a2", "ascend-a3")


def slug(name: str) -> str:
    return name.lower().replace(" ", "-")


def run(name: str, variant: str, impl: str, args: list[str], target: str, env: dict) -> dict:
    """One check in its own process: its lower.json (the IR files are left behind), or the refusal (exit 2) and
    its message."""
    with tempfile.TemporaryDirectory(prefix="tileport-readiness-") as tmp:
        out = Path(tmp)
        cmd = [
            sys.executable,
            "-m",
            "tileport.cli",
            "lower",
            "--impl",
            impl,
            "--target",
            target,
            "--out",
            str(out),
        ]
        for a in args:
            cmd += ["--arg", a]
        p = subprocess.run(
            cmd,
            check=False,
            capture_output=True,
            text=True,
            env=os.environ | env,
            cwd=ROOT,
        )
        result = {
            "name": name,
            "variant": variant,
            "impl": impl,
            "target": target,
            "exit": p.returncode,
        }
        if (out / "lower.json").is_file() and p.returncode in (0, 1):
            result |= {"report": json.loads((out / "lower.json").read_text())}
        else:
            result["refused"] = " ".join((p.stderr or p.stdout).split())[-600:]
    (RESULTS / f"{slug(name)}-{variant}-{target}.json").write_text(json.dumps(result, indent=1))
    return result


def checks(only: list[str]) -> list[dict]:
    RESULTS.mkdir(parents=True, exist_ok=True)
    done = []
    for name, package, _op, impl, args, ascend_impl in UPSTREAM:
        if only and not any(o in slug(name) for o in only):
            continue
        for target in TARGETS:
            if package == "fla-core":  # fla dispatches to its Ascend variant on an NPU; the switch turns that off
                done.append(
                    run(
                        name,
                        "as-written",
                        impl,
                        args,
                        target,
                        {"FLA_DISABLE_BACKEND_DISPATCH": "1"},
                    )
                )
                done.append(run(name, "on-npu", impl, args, target, {}))
            else:  # Liger swaps its ops for its Ascend ones at import on an NPU (where they import)
                done.append(run(name, "on-npu", impl, args, target, {}))
                done.append(run(name, "ascend-variant", ascend_impl, args, target, {}))
            print(
                f"{name} {target}: " + ", ".join(f"{d['variant']} exit {d['exit']}" for d in done[-2:]),
                flush=True,
            )
    return done


def _cell(r: dict) -> str:
    if "report" not in r:
        why = r["refused"].split("does not import: ")[-1].split("Error: ")[-1]
        return "**does not import**: " + why[:160].replace("|", "/")
    rep = r["report"]
    if not rep["kernels"]:
        return "**no Triton launch** " + (rep.get("error") or "")
    if rep["backward"].startswith("stopped"):
        return (
            f"**backward raised**: {rep['backward'].removeprefix('stopped: ')[:160]} (forward: "
            f"{len(rep['kernels'])} kernels lower)"
        )
    bad = [k for k in rep["kernels"] if not k["ok"]]
    notes = sorted({f["cause"] for k in rep["kernels"] for f in k["findings"] if not f["fails"]})
    head = (
        f"**{len(bad)} of {len(rep['kernels'])} fail**: "
        + "; ".join(sorted({f["cause"] for k in bad for f in k["findings"] if f["fails"]}))
        if bad
        else f"lowers ({len(rep['kernels'])} kernels)"
    )
    return head + (f"; notes: {', '.join(notes)}" if notes else "")


def _kernels(r: dict) -> str:
    if "report" not in r:
        return "-"
    names = {k["kernel"].removeprefix("fla.modules.").removeprefix("liger_kernel.ops.") for k in r["report"]["kernels"]}
    grids = {
        k["kernel"].removeprefix("fla.modules.").removeprefix("liger_kernel.ops."): k["programs"]
        for k in r["report"]["kernels"]
    }
    return "<br>".join(f"`{n}` (grid {grids[n]})" for n in sorted(names))


def page(results: list[dict]) -> str:
    by = {(r["name"], r["variant"], r["target"]): r for r in results}
    versions = {p: importlib.metadata.version(p) for p in ("fla-core", "liger-kernel", "triton-ascend")}
    lines = [
        "# Ascend readiness of the upstream kernels",
        "",
        (
            "`tileport lower --impl` on flash-linear-attention's and Liger-Kernel's kernels for the operators tileport "
            "has, "
            f"without an NPU (fla-core {versions['fla-core']}, liger-kernel {versions['liger-kernel']}, triton-ascend "
            f"{versions['triton-ascend']}; regenerate with `python scripts/ascend_readiness.py` in the triton-ascend "
            "environment). "
            "Each kernel is captured from the call a user makes, compiled to Linalg IR for the chip and judged against "
            "its limits "
            "(the grid against 65535 programs and the vector cores, the tiles against the 192 KB unified buffer, "
            "32-byte tails). "
            "*As written*: the GPU kernels on the chip; *on an NPU*: the path the package takes when it finds one (the "
            "stand-in "
            "answers as the chip); *Ascend variant*: the package's own Ascend copy called directly. The raw reports: "
            "`benchmarks/results/readiness/`."
        ),
        "",
        "| upstream | variant | A2 (Ascend 910B3) | A3 (Ascend 910_9391) | kernels captured (A2) |",
        "|---|---|---|---|---|",
    ]
    for name, *_ in UPSTREAM:
        for variant in ("as-written", "on-npu", "ascend-variant"):
            a2, a3 = (
                by.get((name, variant, "ascend-a2")),
                by.get((name, variant, "ascend-a3")),
            )
            if a2 is None:
                continue
            label = {
                "as-written": "as written",
                "on-npu": "on an NPU",
                "ascend-variant": "Ascend variant",
            }[variant]
            lines.append(f"| {name} | {label} | {_cell(a2)} | {_cell(a3) if a3 else '-'} | {_kernels(a2)} |")
    notes = ROOT / "docs" / "notes" / "ascend-readiness.md"
    if notes.is_file():
        lines += ["", notes.read_text().strip()]
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "only",
        nargs="*",
        help="run only the upstream kernels whose name contains one of these",
    )
    ap.add_argument(
        "--page-only",
        action="store_true",
        help="rewrite the page from the results already there",
    )
    opts = ap.parse_args()
    if not opts.page_only:
        checks(opts.only)
    results = [json.loads(p.read_text()) for p in sorted(RESULTS.glob("*.json"))]
    PAGE.write_text(page(results))
    print(f"wrote {PAGE}")


if __name__ == "__main__":
    main()
