"""The prepared device check for an Ascend A2/A3 host (Atlas 800T A2/A3, run by hand; CI never requires it).

On the NPU host, in the environment with triton-ascend (``pip install torch==<its version> torch_npu
'tileport[ascend]'``, CANN's ``set_env.sh`` sourced): every operator's suite on the NPU with ``tileport verify OP
--device npu`` (tileport's Triton kernels through triton-ascend, judged against the float64 golden on the CPU
and the same-dtype torch_npu benchmark), then ``tileport bench OP --device npu`` at the practice's shapes against
torch_npu eager, and a summary an acceptance pull request can carry (summary.md). Everything lands in OUT.

    python scripts/ascend_check.py [--out ascend-check] [--level quick] [--op rms_norm ...] [--dry-run]
"""

from __future__ import annotations

import argparse
import csv
import json
import subprocess
import sys
import time
from pathlib import Path

# The practice's table: (dtype, shape) pairs its acceptance tables time (a norm's token x hidden rows)
SHAPES = (
    ("bf16", "16384x4096"),
    ("bf16", "32768x2048"),
    ("fp16", "1024x512"),
    ("fp32", "4096x4096"),
    ("bf16", "16384x128"),
)


def plan(ops: list[str], level: str, out: Path) -> list[list[str]]:
    """The commands the check runs, in order."""
    cmds = [["tileport", "doctor", "--json"]]
    for op in ops:
        cmds.append(
            [
                "tileport",
                "verify",
                op,
                "--device",
                "npu",
                "--level",
                level,
                "--no-perf",
                "--out",
                str(out / f"{op}-verify"),
            ]
        )
        for dtype, shape in SHAPES:
            cmds.append(
                [
                    "tileport",
                    "bench",
                    op,
                    "--device",
                    "npu",
                    "--threads",
                    "1",
                    "--mode",
                    "fwd",
                    "--mode",
                    "fwdbwd",
                    "--no-compile",
                    "--dtype",
                    dtype,
                    "--shape",
                    shape,
                    "--budget",
                    "0.3",
                    "--csv",
                    str(out / "bench.csv"),
                    "--out",
                    str(out),
                ]
            )
    return cmds


def summary(ops: list[str], out: Path, codes: dict[str, int]) -> str:
    """A markdown summary: each operator's verify verdict and its fwd / fwd+bwd speed against torch_npu eager."""
    lines = [
        "| operator | verify | shape | dtype | mode | triton us | torch_npu eager us | speedup |",
        "|---|---|---|---|---|---|---|---|",
    ]
    rows = list(csv.DictReader(open(out / "bench.csv"))) if (out / "bench.csv").is_file() else []
    for op in ops:
        verdict = {0: "pass", 1: "FAIL"}.get(codes.get(op, -1), "did not run")
        mine = [r for r in rows if r["operator"] == op and r["statistic"] == "min_us"]
        keys = sorted({(r["shape"], r["dtype"], r["mode"]) for r in mine})
        if not keys:
            lines.append(f"| {op} | {verdict} | - | - | - | - | - | - |")
        for shape, dtype, mode in keys:
            t = {
                r["provider"]: float(r["value"])
                for r in mine
                if (r["shape"], r["dtype"], r["mode"]) == (shape, dtype, mode)
            }
            ours, eager = t.get("triton"), t.get("torch-eager")
            speed = f"{eager / ours:.2f}x" if ours and eager else "-"
            lines.append(
                f"| {op} | {verdict} | {shape} | {dtype} | {mode} | {ours or '-'} | {eager or '-'} | {speed} |"
            )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("ascend-check"))
    parser.add_argument("--level", default="quick", choices=["quick", "L0", "L1", "L2"])
    parser.add_argument("--op", action="append", help="an operator (repeatable; default: every one)")
    parser.add_argument("--dry-run", action="store_true", help="print the plan, run nothing")
    args = parser.parse_args(argv)
    from tileport.ops.catalog import specs

    known = list(specs())
    ops = args.op or known
    unknown = [op for op in ops if op not in known]
    if unknown:
        print(f"unknown operator {unknown[0]!r}; operators: {', '.join(known)}", file=sys.stderr)
        return 2
    cmds = plan(ops, args.level, args.out)
    if args.dry_run:
        print("\n".join(" ".join(c) for c in cmds))
        return 0
    from tileport import devices
    from tileport.backends.triton import ascend

    why = devices.npu_ready()
    missing = ascend.missing_for_device()
    if why is not None or missing:
        print(f"not an A2/A3 host ready for the check: {why or ''} {'; '.join(missing)}".strip(), file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    start, codes = time.time(), {}
    with open(args.out / "log.txt", "w") as log:
        for cmd in cmds:
            done = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT)
            if cmd[1] == "doctor":
                continue
            if cmd[1] == "verify":
                codes[cmd[2]] = done.returncode
            print(f"{' '.join(cmd[:3])}: exit code {done.returncode}", flush=True)
    (args.out / "summary.md").write_text(summary(ops, args.out, codes))
    (args.out / "check.json").write_text(
        json.dumps({"seconds": round(time.time() - start), "verify": codes, "triton": ascend.triton_flavour()})
    )
    print((args.out / "summary.md").read_text())
    return 0 if all(c == 0 for c in codes.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
