"""l2norm forward: TileLang CPU kernel vs torch eager vs torch.compile, side by side in one run.

Prints min and median microseconds and GB/s (bytes = read x + write y) per shape, dtype and thread count,
interleaving the providers so machine noise hits them alike. "kernel" times write into a preallocated y
(no page faults); "tileport" is the public call, allocation included. Also the copy bandwidth of the same
bytes (torch copy_), the machine's roofline for this traffic.

    python benchmarks/bench_l2norm.py [--quick] [--csv out.csv]
"""

from __future__ import annotations

import argparse
import csv
import statistics
import time

import torch

import tileport
from tileport.backends.tilelang.cpu import l2norm as tl_kernels

SHAPES = [(1, 128), (33, 100), (1024, 512), (256, 4096), (4096, 4096), (16384, 4096)]
DTYPES = [torch.float32, torch.float16, torch.bfloat16]
EPS = 1e-6


def eager(x):
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).sum(-1, keepdim=True) + EPS)).to(x.dtype)



def kernel_only(x, y, rstd):
    """The compiled TileLang kernel into preallocated outputs: no allocation, no Python-side checks."""
    tl_kernels.launch_forward(x, y, rstd, EPS)


def measure(providers, budget_s):
    """Interleaved rounds: each round times every provider once; stops at the time budget."""
    times = {name: [] for name in providers}
    for fn in providers.values():
        fn()
    start = time.perf_counter()
    rounds = 0
    while rounds < 5 or (time.perf_counter() - start < budget_s and rounds < 2000):
        for name, fn in providers.items():
            t0 = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t0)
        rounds += 1
    return times


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="skip the two large shapes, shorter budgets")
    ap.add_argument("--csv", help="also write the rows to this CSV file")
    ap.add_argument("--threads", type=int, nargs="*", default=[1, 2])
    args = ap.parse_args()
    shapes = SHAPES[:4] if args.quick else SHAPES
    rows = []
    print(f"torch {torch.__version__}, tileport {tileport.__version__}")
    header = f"{'threads':>7} {'dtype':>9} {'shape':>11} {'provider':>13} {'min us':>10} {'med us':>10} {'GB/s':>7} {'vs eager':>8}"
    print(header)
    for threads in args.threads:
        torch.set_num_threads(threads)
        for dtype in DTYPES:
            for shape in shapes:
                x = torch.randn(shape).to(dtype)
                y = torch.empty_like(x)
                rstd = torch.empty(shape[0])
                copy_dst = torch.empty_like(x)
                torch._dynamo.reset()  # a fresh static-shape compile per shape, never the recompile limit
                compiled = torch.compile(eager, dynamic=False)
                providers = {
                    "kernel": lambda: kernel_only(x, y, rstd),
                    "tileport": lambda: tileport.l2norm(x),
                    "torch-eager": lambda: eager(x),
                    "torch-compile": lambda: compiled(x),
                    "copy": lambda: copy_dst.copy_(x),
                }
                budget = 0.3 if args.quick else (0.6 if x.numel() < 1 << 22 else 2.0)
                times = measure(providers, budget)
                nbytes = 2 * x.numel() * x.element_size()
                eager_min = min(times["torch-eager"])
                for name, ts in times.items():
                    tmin, tmed = min(ts), statistics.median(ts)
                    row = dict(
                        threads=threads, dtype=str(dtype).removeprefix("torch."), shape="x".join(map(str, shape)),
                        provider=name, min_us=tmin * 1e6, median_us=tmed * 1e6, gbps=nbytes / tmin / 1e9,
                        speedup_vs_eager=eager_min / tmin,
                    )  # fmt: skip
                    rows.append(row)
                    print(
                        f"{threads:>7} {row['dtype']:>9} {row['shape']:>11} {name:>13} {row['min_us']:>10.1f} "
                        f"{row['median_us']:>10.1f} {row['gbps']:>7.1f} {row['speedup_vs_eager']:>8.2f}"
                    )
    if args.csv:
        with open(args.csv, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(rows[0]))
            w.writeheader()
            w.writerows(rows)


if __name__ == "__main__":
    main()
