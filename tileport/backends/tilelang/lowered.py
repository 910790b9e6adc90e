"""Device lowerings kept on disk: a kernel's generated source and on-chip bytes, keyed by its prim_func's
TVMScript, the target, TileLang's version and the code that measures the bytes (``targets.py``). An Ascend lowering
takes up to a minute (the auto-scheduler's search), and the same kernel is lowered again by ``tileport lower``, the
budget checks and each process of a run; a changed kernel is a new key, never a stale hit. What the lowering
printed (TVM's warnings, a data race it reports) is kept with it and printed again on a hit."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import sys
import tempfile
from pathlib import Path

from .cpu.settings import cache_root
from .targets import OnChip, lower_kernel

_MEASURE = hashlib.sha256(Path(__file__).with_name("targets.py").read_bytes()).hexdigest()[:16]


def folder(tilelang_version: str) -> Path:
    return cache_root() / f"tilelang-{tilelang_version}" / "lowered"


def lower(func, target) -> tuple[str, OnChip]:
    """``targets.lower_kernel(func, target)``, from the disk cache where this very kernel was lowered before."""
    # tilelang: seconds to import, kept out of start-up
    import tilelang

    text = "\0".join((_MEASURE, json.dumps(target, sort_keys=True), func.script()))
    path = folder(tilelang.__version__) / f"{hashlib.sha256(text.encode()).hexdigest()}.json"
    try:
        found = json.loads(path.read_text())
        _replay(found["printed"])
        return found["source"], OnChip(found["used"], found["cube"])
    except (OSError, ValueError, KeyError):
        pass
    with _printed() as printed:
        source, used = lower_kernel(func, target)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile("w", dir=path.parent, suffix=".tmp", delete=False) as f:
            json.dump({"source": source, "used": int(used), "cube": used.cube, "printed": printed[0]}, f)
        os.replace(f.name, path)  # whole or absent: two processes lowering the same kernel both write a full file
    except OSError:  # a read-only or full cache folder: the lowering stands, it is not kept
        pass
    return source, used


def _replay(text: str) -> None:
    if text:
        sys.stderr.write(text)
        sys.stderr.flush()


@contextlib.contextmanager
def _printed():
    """What the process writes to its stdout and stderr meanwhile (sys.stdout and sys.stderr, and the file
    descriptors: TVM's C++ logging), in ``[0]`` once done, and then written to stderr as it would have appeared."""
    box = [""]
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    with tempfile.TemporaryFile() as tmp, os.fdopen(os.dup(tmp.fileno()), "w") as text:
        os.dup2(tmp.fileno(), 1)
        os.dup2(tmp.fileno(), 2)
        try:
            with contextlib.redirect_stdout(text), contextlib.redirect_stderr(text):  # Python's own writes
                yield box
        finally:
            text.flush()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            os.close(saved[0])
            os.close(saved[1])
            tmp.seek(0)
            box[0] = tmp.read().decode(errors="replace")
            _replay(box[0])
