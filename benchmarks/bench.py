"""Benchmark script: the same as ``tileport bench OP`` (tileport backends vs torch eager, torch's fused op and
torch.compile, interleaved, with the copy-bandwidth roofline), for running from a checkout.

    python benchmarks/bench.py OP [tileport bench options, e.g. --quick --threads 1 --dtype fp16]
"""

import sys

from tileport.cli import app

if __name__ == "__main__":
    app(["bench", *sys.argv[1:]])
