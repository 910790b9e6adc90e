"""What the doctor reads from the machine, behind one object so tests can fake any part of it."""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import os
import platform as _platform
import re
import shutil
import subprocess
import sys
import sysconfig
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from ..ops.catalog import broken_plugins, origin, specs


def _run(cmd: list[str]) -> str | None:
    """stdout+stderr of a short command, or None when it cannot run."""
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    return (p.stdout + p.stderr) if p.returncode == 0 else None


def _glibc() -> str | None:
    try:
        return os.confstr("CS_GNU_LIBC_VERSION").split()[-1]  # "glibc 2.36"
    except (ValueError, OSError, AttributeError, IndexError):
        return None


def _libstdcxx() -> Path | None:
    out = _run(["/sbin/ldconfig", "-p"]) or _run(["ldconfig", "-p"]) or ""
    m = re.search(r"libstdc\+\+\.so\.6 \(libc6,x86-64\) => (\S+)", out) or re.search(
        r"libstdc\+\+\.so\.6 .*=> (\S+)", out
    )
    if m:
        return Path(m.group(1))
    for d in ("/usr/lib/x86_64-linux-gnu", "/usr/lib64", "/usr/lib/aarch64-linux-gnu", "/usr/lib"):
        p = Path(d) / "libstdc++.so.6"
        if p.exists():
            return p
    return None


def _glibcxx_versions(path: Path | None) -> set[str]:
    if path is None:
        return set()
    try:
        data = Path(os.path.realpath(path)).read_bytes()
    except OSError:
        return set()
    return {m.decode() for m in re.findall(rb"GLIBCXX_3\.4\.\d+", data)}


def _plugins() -> tuple[dict, dict]:

    return {n: origin(n) for n in specs() if origin(n) != "tileport"}, broken_plugins()


def _can_import(name: str) -> bool:
    return importlib.util.find_spec(name) is not None


def _dist_version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


@dataclass
class Probe:
    """Accessors of the environment; each a plain callable or value, replaced wholesale in tests."""

    python_version: tuple[int, int, int] = tuple(sys.version_info[:3])  # type: ignore[assignment]
    python_include: Path = field(default_factory=lambda: Path(sysconfig.get_paths()["include"]))
    which: Callable[[str], str | None] = shutil.which
    run: Callable[[list[str]], str | None] = _run
    glibc: Callable[[], str | None] = _glibc
    libstdcxx: Callable[[], Path | None] = _libstdcxx
    glibcxx_versions: Callable[[Path | None], set[str]] = _glibcxx_versions
    can_import: Callable[[str], bool] = _can_import
    dist_version: Callable[[str], str | None] = _dist_version  # an installed distribution's version, or None
    import_module: Callable[[str], object] = importlib.import_module
    environ: dict = field(default_factory=lambda: dict(os.environ))
    plugins: Callable[[], tuple[dict, dict]] = lambda: _plugins()  # noqa: E731  ({operator: package}, {entry: why})
    machine: str = _platform.machine()
