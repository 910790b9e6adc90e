"""GPU correctness check (run by gpu_check.sh on a machine with an NVIDIA GPU): the TileLang CUDA and Triton
l2norm, forward and backward, against the float64 golden and the same-dtype torch composite on the GPU."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

import tileport
from tileport.precision import compare

SHAPES = [(1, 1), (33, 100), (1024, 4096), (7, 4097), (4, 65536), (2, 3, 128)]
DTYPES = [torch.float32, torch.float16, torch.bfloat16]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--out", type=Path, default=Path("gpu-check"))
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    if not torch.cuda.is_available():
        print("no CUDA device: this check needs an NVIDIA GPU")
        return 2
    rows, failed = [], 0
    for backend in ("tilelang", "triton"):
        for dtype in DTYPES:
            for shape in SHAPES:
                g = torch.Generator().manual_seed(0)
                xc, dyc = torch.randn(shape, generator=g), torch.randn(shape, generator=g)
                x, dy = xc.to(dtype).cuda(), dyc.to(dtype).cuda()
                row = {"backend": backend, "dtype": str(dtype), "shape": list(shape)}
                try:
                    t0 = time.perf_counter()
                    y, r = tileport.l2norm_fwd(x, backend=backend)
                    dx = tileport.l2norm_bwd(x, r, dy, backend=backend)
                    torch.cuda.synchronize()
                    row["first_call_s"] = time.perf_counter() - t0
                    yb, rb = tileport.l2norm_fwd(x, backend="torch")
                    dxb = tileport.l2norm_bwd(x, rb, dy, backend="torch")
                    x64, dy64 = x.double().cpu(), dy.double().cpu()
                    yg, rg = tileport.l2norm_fwd(x64, backend="torch")
                    dxg = tileport.l2norm_bwd(x64, rg, dy64, backend="torch")
                    verdicts = {
                        "y": compare(y.cpu(), yg, yb.cpu(), dtype=dtype),
                        "rstd": compare(r.cpu(), rg, rb.cpu(), dtype=torch.float32),
                        "dx": compare(dx.cpu(), dxg, dxb.cpu(), dtype=dtype),
                    }
                    row |= {k: {"passed": v.passed, "ratios": v.ratios, "failures": v.failures} for k, v in verdicts.items()}
                    ok = all(v.passed for v in verdicts.values())
                except Exception as exc:  # a kernel that fails to build or run is a finding, not a crash
                    row["error"] = f"{type(exc).__name__}: {exc}"
                    ok = False
                failed += not ok
                rows.append(row)
                print(f"{'ok  ' if ok else 'FAIL'} {backend:8} {str(dtype):15} {shape} {row.get('error', '')}", flush=True)
    (args.out / "correctness.json").write_text(json.dumps({"device": torch.cuda.get_device_name(), "rows": rows}, indent=1))
    print(f"{failed} of {len(rows)} checks failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
