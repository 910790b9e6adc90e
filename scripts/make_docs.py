"""Regenerate docs/ops/l2norm.md from a verify run and a benchmark run, and the README's benchmark section
from benchmarks/results/l2norm.md (the tables are never typed by hand).

    python scripts/make_docs.py [--level quick|L0] [--bench-args "..."] [--readme-only]
"""

from __future__ import annotations

import argparse
import re
import shlex
import shutil
from pathlib import Path

from typer.testing import CliRunner

from tileport.cli import app

ROOT = Path(__file__).resolve().parent.parent
OPS = ROOT / "docs" / "ops"
USAGE = """# l2norm

`y = x * rsqrt(sum(x*x, -1) + eps)` over the last dimension, with `rstd` saved for backward
(flash-linear-attention's semantics; the contract is the docstring of `tileport/ops/l2norm.py`).

```python
import tileport

y = tileport.l2norm(x, eps=1e-6)                 # differentiable; torch.compile(fullgraph=True) works
y, rstd = tileport.l2norm_fwd(x, eps=1e-6, output_dtype=None, backend=None, out=None)
dx = tileport.l2norm_bwd(x, rstd, dy)
layer = tileport.L2Norm(eps=1e-6)
```

Backends: `tilelang` (CPU C target here; CUDA and Ascend 950 kernels lowered with `tileport lower`),
`triton` (GPU; CPU interpreter for small shapes), `torch` (the reference and the precision benchmark).
"""


def section(md: str, title: str) -> str:
    """One '## title' section of a generated report (title matched at the start)."""
    m = re.search(rf"^## {re.escape(title)}.*?(?=^## |\Z)", md, flags=re.S | re.M)
    return m.group(0).strip() + "\n" if m else ""


def run(args: list[str]) -> None:
    result = CliRunner().invoke(app, args)
    if result.exit_code != 0:
        raise SystemExit(f"tileport {' '.join(args)} failed:\n{result.output}")


README_START, README_END = "<!-- bench:start -->", "<!-- bench:end -->"


def update_readme() -> None:
    """Put the speed bar of the latest full benchmark (benchmarks/results/l2norm.md) into the README."""
    table = (ROOT / "benchmarks" / "results" / "l2norm.md").read_text()
    header = table.split("\n\n", 2)[1]  # machine, versions, run
    bar = section(table, "The speed bar").split("\n", 1)[1].strip()
    readme = ROOT / "README.md"
    text = readme.read_text()
    start, end = text.index(README_START) + len(README_START), text.index(README_END)
    readme.write_text(text[:start] + f"\n{header}\n\n{bar}\n" + text[end:])
    print(f"updated {readme}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--level", default="quick")
    ap.add_argument("--bench-args", default="--quick --threads 1 --threads 2 --mode fwd --mode fwdbwd")
    ap.add_argument("--readme-only", action="store_true", help="only refresh the README's benchmark section")
    a = ap.parse_args()
    update_readme()
    if a.readme_only:
        return
    evidence, bench = OPS / "l2norm-verify", OPS / "l2norm-bench"
    shutil.rmtree(evidence, ignore_errors=True)
    shutil.rmtree(bench, ignore_errors=True)
    run(["verify", "l2norm", "--level", a.level, "--out", str(evidence)])
    run(["bench", "l2norm", *shlex.split(a.bench_args), "--csv", str(bench / "bench.csv"), "--out", str(bench)])
    report = (evidence / "report.md").read_text()
    parts = [
        USAGE,
        f"## Precision (`tileport verify l2norm --level {a.level}`)\n",
        *(section(report, t).replace("## ", "### ", 1) for t in ("Summary", "The standard's minimum counts", "Dual benchmark", "Approximate rsqrt", "Cross-backend")),
        "Full report: [l2norm-verify/report.md](l2norm-verify/report.md) (`tileport verify` also writes a "
        "self-contained report.html, results.json and results.csv).\n",
        f"## Performance (`tileport bench l2norm {a.bench_args}`)\n",
        (bench / "l2norm.md").read_text().split("\n", 2)[2],
        "![latency fwd](l2norm-bench/l2norm_fwd_latency_t1.png)\n",
        "![bandwidth share fwd](l2norm-bench/l2norm_fwd_bandwidth_share_t1.png)\n",
        "![ratios](l2norm-verify/ratios.png)\n",
        "Regenerate: `python scripts/make_docs.py`.\n",
    ]
    (OPS / "l2norm.md").write_text("\n".join(parts))
    for heavy in ("report.html", "results.json", "results.csv"):  # the docs keep report.md and the PNGs
        (evidence / heavy).unlink(missing_ok=True)
    (bench / "bench.csv").unlink(missing_ok=True)
    print(f"wrote {OPS / 'l2norm.md'}")


if __name__ == "__main__":
    main()
