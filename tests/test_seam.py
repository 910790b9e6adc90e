"""The operator seam: operators are found through their specs; the generic layers never name one, and every
spec'd operator is served by each backend that has a kernel module for it."""

import re
from pathlib import Path

import pytest

import tileport
from tileport.ops.catalog import get, specs

ROOT = Path(tileport.__file__).resolve().parent
GENERIC = [
    "cli.py",
    "lower.py",
    "dtypes.py",
    "ops/spec.py",
    "verify",
    "bench",
    "report",
    "cases/generate.py",
    "cases/schema.py",
    "cases/__init__.py",
    "precision",
    "backends/registry.py",
    "backends/torch/__init__.py",
    "backends/triton/__init__.py",
    "backends/triton/common.py",
    "backends/tilelang/__init__.py",
    "backends/tilelang/targets.py",
    "backends/tilelang/cache.py",
    "backends/tilelang/cpu/runtime.py",
    "backends/tilelang/cpu/interface.py",
    "backends/tilelang/cpu/rowwise.py",
    "../scripts/make_docs.py",
    "../scripts/gpu_check.sh",
    "scaffold",
    "ops/interface",
    "backends/tilelang/cpu/norm_stats.py",
    "doctor",
    "external.py",
    "reference.py",
    "cases/atk.py",
    "readiness",
]


def _files():
    for entry in GENERIC:
        path = ROOT / entry
        yield from (sorted(path.rglob("*.py")) if path.is_dir() else [path])


def test_specs_are_discovered_by_convention():
    assert set(specs()) >= {"l2norm", "layer_norm", "log_softmax", "rms_norm", "softmax"}
    for name, spec in specs().items():
        assert spec.name == name and spec.function.__module__ == f"tileport.ops.{name}"
    with pytest.raises(ValueError, match=f"unknown operator 'no_such_op'; available: {', '.join(sorted(specs()))}$"):
        get("no_such_op")


@pytest.mark.parametrize("path", list(_files()), ids=lambda p: str(p.relative_to(ROOT.parent)))
def test_generic_layers_name_no_operator(path):
    names = "|".join(re.escape(n) for n in specs())
    hits = [
        f"{i}: {line.strip()}"
        for i, line in enumerate(path.read_text().splitlines(), 1)
        if re.search(rf"\b({names})\b", line, flags=re.I)
    ]
    assert hits == [], f"{path} names an operator"


def test_backends_register_every_operator_with_a_kernel_module():
    infos = {b.name: b for b in tileport.available_backends()}
    for name, spec in specs().items():
        name = spec.kernel_op  # a composed operator is served by the kernels it runs on
        assert name in infos["torch"].ops and name in infos["tilelang"].ops
        for kind in ("cpu", "cuda", "npu-arch35"):
            assert kind in tileport.backends.REGISTRY.load("tilelang").targets(name), (name, kind)
