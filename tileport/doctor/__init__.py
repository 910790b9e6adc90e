"""``tileport doctor``: check the environment a port needs and say how to fix what is missing.

The environment was the biggest obstacle of the practice this project grew from (glibc too old for the
tilelang-ascend wheels, libstdc++ without GLIBCXX_3.4.32, no Python.h, torch autoloading torch_npu without
CANN, TileLang building at -O0). Each check is in ``checks.py``; the machine is read through ``Probe``.
"""

from __future__ import annotations

from .checks import CHECKS, Finding
from .probe import Probe


def run_checks(probe: Probe | None = None) -> list[Finding]:
    probe = probe or Probe()
    out = []
    for check in CHECKS:
        try:
            out.append(check(probe))
        except Exception as exc:  # a check must never take the doctor down; say what broke
            out.append(Finding(check.__name__, "warn", f"the check itself failed: {type(exc).__name__}: {exc}"))
    return out


def default_backend_runs(findings: list[Finding]) -> bool:
    return not any(f.status == "fail" for f in findings)
