"""A public call at one and at two threads while other processes keep cores busy: how tileport's CPU kernels
degrade on a shared machine (issue 37: within 2x of the one-thread call), and torch eager's composite beside
them. Prints the CPU model; interleaves the providers in rounds.

    python scripts/oversubscribed.py [--op rms_norm] [--shape 1024x64] [--busy 1] [--rounds 300]
"""

from __future__ import annotations

import argparse
import time

import torch

import tileport
from tileport.bench import contention
from tileport.bench.environment import machine


def _step(op, inputs, dy, backend):
    leaves = [t for t in inputs.values() if isinstance(t, torch.Tensor) and t.requires_grad]

    def call():
        y = getattr(tileport, op)(**inputs, backend=backend)
        torch.autograd.grad(y, leaves, dy)

    return call


def _times(fns: dict, rounds: int) -> dict:
    out = {k: [] for k in fns}
    for fn in fns.values():
        for _ in range(10):
            fn()
    for _ in range(rounds):
        for k, fn in fns.items():
            t0 = time.perf_counter()
            fn()
            out[k].append(time.perf_counter() - t0)
    return {k: sorted(v) for k, v in out.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--op", default="rms_norm")
    ap.add_argument("--shape", default="1024x64")
    ap.add_argument("--busy", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=300)
    a = ap.parse_args()
    shape = tuple(int(s) for s in a.shape.split("x"))
    g = torch.Generator().manual_seed(0)
    x = torch.randn(shape, generator=g).requires_grad_(True)
    inputs = {"x": x}
    if a.op in ("rms_norm", "layer_norm"):
        inputs["weight"] = torch.ones(shape[-1]).requires_grad_(True)
    dy = torch.randn(shape, generator=g)
    print(f"{machine()}; {a.op} fwd+bwd {a.shape} float32, {a.busy} competing busy process(es), {a.rounds} rounds")
    with contention.busy(a.busy):
        for label, fns in (
            ("tileport alone", {"tileport": _step(a.op, inputs, dy, None)}),
            (
                "interleaved with torch eager",
                {"tileport": _step(a.op, inputs, dy, None), "torch-eager": _step(a.op, inputs, dy, "torch")},
            ),
        ):
            for threads in (1, 2):
                torch.set_num_threads(threads)
                for name, ts in _times(fns, a.rounds).items():
                    n = len(ts)
                    print(
                        f"{label:30s} {threads} thread(s) {name:12s} min {ts[0] * 1e3:8.3f} ms  median "
                        f"{ts[n // 2] * 1e3:8.3f} ms  "
                        f"p90 {ts[int(n * 0.9)] * 1e3:8.3f} ms"
                    )


if __name__ == "__main__":
    main()
