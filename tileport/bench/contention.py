"""Competing processes for a benchmark run (``tileport bench --busy N``): N processes that keep a core each
busy while the groups are timed, so the figures show how the kernels degrade when the machine is shared
(a training job's data loader, another test run) instead of only on an idle machine."""

from __future__ import annotations

import contextlib
import subprocess
import sys

SPIN = "while True:\n    pass\n"


@contextlib.contextmanager
def busy(n: int):
    """Keep ``n`` processes spinning for the duration of the block; they are ended on the way out."""
    if n < 0:
        raise ValueError(f"--busy takes a count of competing processes >= 0, not {n}")
    procs = [subprocess.Popen([sys.executable, "-c", SPIN], stdin=subprocess.DEVNULL) for _ in range(n)]
    try:
        yield procs
    finally:
        for p in procs:
            p.kill()
        for p in procs:
            p.wait()


def label(n: int) -> str:
    """What the rows' machine field adds for a run with ``n`` competing processes."""
    return f"; {n} competing busy process{'es' if n != 1 else ''}" if n else ""
