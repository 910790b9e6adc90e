"""A/B of the CPU kernels of two source trees, kernel-only (preallocated outputs), side by side.

    python scripts/ab_kernels.py BASE_TREE [--op OP ...] [--shape 1024x512 ...] [--dtype bf16 ...] [--rounds 4]
                                 [--mode fwd|bwd]

BASE_TREE is a checkout of the previous kernels (``git worktree add /tmp/base HEAD~1``); this tree is the new.
Each round runs one process per tree (its own kernel cache), alternating which goes first; a process times
every (op, shape, dtype) forward (its outputs preallocated where the operator takes ``out=``; or with ``--mode bwd`` the
backward through autograd, the graph built once, as
the bench's bwd mode) with ``tileport.bench.timing.interleave`` beside a copy of the same bytes.
The table gives the min over rounds and new / base as a time ratio (< 1 is faster). Name the machine with it.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

CHILD = r"""
import json, sys, torch
torch.set_num_threads(1)
from tileport.bench.timing import interleave
from tileport.dtypes import parse
from tileport.ops.catalog import specs
from tileport.providers.timed import in_mode
out = {}
mode = sys.argv[3]
for op, shape, dtype in json.loads(sys.argv[1]):
    spec = specs()[op]
    dims = tuple(int(s) for s in shape.split("x"))
    inputs = spec.example(dims, parse(dtype), "cpu", torch.Generator().manual_seed(0))
    x = next(v for v in inputs.values() if isinstance(v, torch.Tensor)); y = torch.empty_like(x)
    if mode == "fwd":
        outs = tuple(o.clone() for o in spec.forward(**inputs, backend="tilelang"))
        kernel = lambda: spec.forward(**inputs, backend="tilelang", out=outs)
        try:
            kernel()
        except TypeError:  # an operator without the preallocated-output form: its call allocates them
            kernel = lambda: spec.forward(**inputs, backend="tilelang")
    else:
        grads = [t.name for t in spec.inputs if isinstance(inputs.get(t.name), torch.Tensor)]
        dy = torch.randn(dims, generator=torch.Generator().manual_seed(1)).to(x.dtype)
        kernel = in_mode(lambda **kw: spec.function(**kw, backend="tilelang"), inputs, dy, "bwd", grads)
    t = interleave({"kernel": kernel, "copy": lambda: y.copy_(x)}, float(sys.argv[2]))
    out[f"{op} {dtype} {shape}"] = {k: v.min_us for k, v in t.items()}
print(json.dumps(out))
"""


def run_tree(tree: Path, groups: list, budget: float, cache: str, mode: str = "fwd") -> dict:
    # run in the tree: `python -c` puts the working directory first on sys.path, ahead of PYTHONPATH
    env = dict(os.environ, PYTHONPATH=str(tree), TILEPORT_CACHE_DIR=cache)
    res = subprocess.run(
        [sys.executable, "-c", CHILD, json.dumps(groups), str(budget), mode],
        env=env,
        cwd=tree,
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(res.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("base", type=Path)
    ap.add_argument("--op", action="append", default=None)
    ap.add_argument("--shape", action="append", default=None)
    ap.add_argument("--dtype", action="append", default=None)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--budget", type=float, default=0.3)
    ap.add_argument("--mode", choices=("fwd", "bwd"), default="fwd")
    a = ap.parse_args()
    groups = [
        (op, s, d)
        for op in a.op or ["l2norm", "rms_norm"]
        for s in a.shape or ["1024x512", "256x4096", "4096x128", "16384x32"]
        for d in a.dtype or ["fp32", "bf16"]
    ]
    best: dict[str, dict[str, dict[str, float]]] = {"base": {}, "new": {}}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(a.rounds):
            order = [("base", a.base), ("new", ROOT)] if r % 2 == 0 else [("new", ROOT), ("base", a.base)]
            for side, tree in order:
                for key, t in run_tree(tree, groups, a.budget, f"{tmp}/{side}", a.mode).items():
                    cur = best[side].setdefault(key, {})
                    for k, v in t.items():
                        cur[k] = min(cur.get(k, v), v)
    print("| op dtype shape | base us | new us | new / base | copy us |\n|---|---|---|---|---|")
    for key in best["new"]:
        b, n = best["base"][key]["kernel"], best["new"][key]["kernel"]
        print(
            f"| {key} | {b:.1f} | {n:.1f} | {n / b:.2f} | "
            f"{min(best['base'][key]['copy'], best['new'][key]['copy']):.1f} |"
        )


if __name__ == "__main__":
    main()
