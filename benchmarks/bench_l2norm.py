"""l2norm benchmark script: the same as ``tileport bench l2norm`` (TileLang vs torch eager vs torch.compile,
interleaved, with the copy-bandwidth roofline), for running from a checkout.

    python benchmarks/bench_l2norm.py [tileport bench options, e.g. --quick --threads 1 --dtype fp16]
"""

import sys

from tileport.cli import app

if __name__ == "__main__":
    app(["bench", "l2norm", *sys.argv[1:]])
