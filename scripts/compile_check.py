"""The bench's torch.compile provider against a plain harness, side by side (issue 30 asks that both agree).

    python scripts/compile_check.py [--op OP ...] [--shape 1024x512 ...] [--dtype bf16 ...] [--budget 2]

The bench builds its baseline in ``tileport.bench.providers``: ``torch.compile(spec.composite, dynamic=False)``
after a dynamo reset, the gradients through ``torch.autograd.grad`` with respect to every tensor input. The
plain harness is what a user writes: the same composite compiled once per shape, leaves with
``requires_grad``, ``y.backward(dy)`` and the grads set to None between calls. Both, the tileport public call
and eager are timed in the same interleaved rounds (``bench.timing.interleave``), 1 thread, so the ratios
``tileport / compile`` of the two harnesses compare on equal terms. Name the machine with the table.
"""

from __future__ import annotations

import argparse

import torch

from tileport.bench.environment import machine
from tileport.bench.providers import providers
from tileport.bench.timing import interleave
from tileport.dtypes import name as dtype_name, parse
from tileport.ops.spec import specs


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
    bench = providers(spec, shape, dtype, mode, ["tilelang"])  # resets dynamo, compiles its own provider
    g = torch.Generator().manual_seed(0)  # the bench's inputs: same seed, same draw order
    inputs = spec.example(shape, dtype, "cpu", g)
    dy = torch.randn(shape, generator=g).to(dtype)
    grads = [t.name for t in spec.inputs if isinstance(inputs.get(t.name), torch.Tensor)]
    timed = {
        "tileport": bench["tilelang"],
        "bench-compile": bench["torch-compile"],
        "plain-compile": plain(torch.compile(spec.composite, dynamic=False), inputs, dy, mode, grads),
        "bench-eager": bench["torch-eager"],
        "plain-eager": plain(spec.composite, inputs, dy, mode, grads),
    }
    return {k: v.min_us for k, v in interleave(timed, budget, min_rounds=20).items()}


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
    print("| op | mode | dtype | shape | tileport | bench compile | plain compile | bench eager | plain eager "
          "| x bench compile | x plain compile |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for op in a.op or sorted(specs()):
        for mode in a.mode:
            for dt in a.dtype:
                for s in a.shape:
                    shape = tuple(int(v) for v in s.split("x"))
                    t = check(op, shape, parse(dt), mode, a.budget)
                    print(f"| {op} | {mode} | {dtype_name(parse(dt))} | {s} | {t['tileport']:.1f} | "
                          f"{t['bench-compile']:.1f} | {t['plain-compile']:.1f} | {t['bench-eager']:.1f} | "
                          f"{t['plain-eager']:.1f} | {t['bench-compile'] / t['tileport']:.2f} | "
                          f"{t['plain-compile'] / t['tileport']:.2f} |", flush=True)


if __name__ == "__main__":
    main()
