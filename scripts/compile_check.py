"""The bench's torch.compile comparison against a plain harness, side by side (issue 30 asks that both agree).

    python scripts/compile_check.py [--op OP ...] [--shape 1024x512 ...] [--dtype bf16 ...] [--budget 2]

Per group, two timings of the tileport public call against ``torch.compile(spec.composite, dynamic=False)``:
- as ``tileport bench`` times them: its own providers (``tileport.bench.providers``: gradients through
  ``torch.autograd.grad``), interleaved with eager and the copy of the same bytes in the same rounds;
- plain, as a user times them: leaves with ``requires_grad``, ``.backward(dy)`` with the grads reset, and
  only the two contenders in the rounds.
The ratios (compile time / tileport time, > 1: tileport faster) are what the speed bar judges. 1 thread. Name
the machine with the table.
"""

from __future__ import annotations

import argparse

import torch

from tileport.bench.environment import machine
from tileport.bench.providers import group_inputs, providers
from tileport.bench.roofline import copy_provider
from tileport.bench.timing import interleave
from tileport.dtypes import name as dtype_name
from tileport.dtypes import parse
from tileport.ops.catalog import specs
from tileport.providers import Backend


def plain(fn, inputs: dict, dy: torch.Tensor, mode: str, grads: list[str]):
    """``fn(**inputs)`` as a user times it: the forward alone, or forward then ``.backward`` (grads reset)."""
    if mode == "fwd":
        return lambda: fn(**inputs)
    args = dict(inputs)
    for k in grads:
        args[k] = inputs[k].detach().requires_grad_(True)
    leaves = [args[k] for k in grads]

    def step():
        for t in leaves:
            t.grad = None
        out = fn(**args)
        outs = tuple(out) if isinstance(out, (tuple, list)) else (out,)
        torch.autograd.backward(outs, (dy,) * len(outs))

    return step


def check(op: str, shape, dtype, mode: str, budget: float) -> dict[str, float]:
    spec = specs()[op]
    bench, _ = providers(spec, shape, dtype, mode, [Backend("tilelang")])  # resets dynamo, compiles its own provider
    bench["copy"] = copy_provider(spec.bytes_moved(shape, dtype, mode) // 2)
    timed = interleave(
        {k: bench[k] for k in ("tilelang", "torch-compile", "torch-eager", "copy")}, budget, min_rounds=20
    )
    inputs, dy, grads = group_inputs(spec, shape, dtype)  # the bench's own tensors
    alone = interleave(
        {
            "tilelang": plain(lambda **kw: spec.function(**kw, backend="tilelang"), inputs, dy, mode, grads),
            "torch-compile": plain(torch.compile(spec.composite, dynamic=False), inputs, dy, mode, grads),
        },
        budget,
        min_rounds=20,
    )
    return {"bench " + k: v.min_us for k, v in timed.items()} | {"plain " + k: v.min_us for k, v in alone.items()}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--op", nargs="*", default=None)
    p.add_argument("--shape", nargs="*", default=["1024x512", "256x4096"])
    p.add_argument("--dtype", nargs="*", default=["bf16", "fp32"])
    p.add_argument("--mode", nargs="*", default=["fwd", "fwdbwd"])
    p.add_argument("--budget", type=float, default=2.0)
    a = p.parse_args()
    torch.set_num_threads(1)
    print(f"{machine()}, 1 thread, torch {torch.__version__}; min us over interleaved rounds\n")
    print(
        "| op | mode | dtype | shape | bench: tileport | compile | x compile | plain: tileport | compile | x compile |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for op in a.op or sorted(specs()):
        for mode in a.mode:
            for dt in a.dtype:
                for s in a.shape:
                    shape = tuple(int(v) for v in s.split("x"))
                    t = check(op, shape, parse(dt), mode, a.budget)
                    bt, bc, pt, pc = (t[f"{h} {k}"] for h in ("bench", "plain") for k in ("tilelang", "torch-compile"))
                    print(
                        f"| {op} | {mode} | {dtype_name(parse(dt))} | {s} | {bt:.1f} | {bc:.1f} | {bc / bt:.2f} "
                        f"| {pt:.1f} | {pc:.1f} | {pc / pt:.2f} |",
                        flush=True,
                    )


if __name__ == "__main__":
    main()
