"""The TileLang CPU kernel cache: one compile per (D, dtypes), M symbolic, disk reuse across processes."""

import json
import os
import subprocess
import sys

import torch

import tileport
from tileport.backends.tilelang.cpu.runtime import RowKernelSpec, Param


def _entry(op):
    return next((r for r in tileport.kernel_cache_info() if r["op"] == op and r["backend"] == "tilelang"), None)


def test_many_row_counts_one_compile():
    D = 173  # a width no other test uses
    key = str((D, torch.float16, torch.float16))
    tileport.l2norm_fwd(torch.randn(1, D).half())
    before = _entry("l2norm_fwd")
    assert key in before["keys"]
    gen = torch.Generator().manual_seed(0)
    rows = torch.randint(1, 3000, (1000,), generator=gen).tolist()  # issue 4's bar: 1000 calls, random M
    for m in rows:
        x = torch.randn(m, D).half()
        y, _ = tileport.l2norm_fwd(x)
        assert y.shape == (m, D)
    after = _entry("l2norm_fwd")
    assert after["kernels"] == before["kernels"], "a new row count triggered a compile"
    assert after["compile_seconds"] == before["compile_seconds"]
    assert after["hits"] >= before["hits"] + len(rows)
    assert after["keys"].count(key) == 1


def test_prototype_matches_generated_source():
    tileport.l2norm_fwd(torch.randn(2, 40))
    from tileport.backends.tilelang.cpu.runtime import CACHE

    launcher = next(v for (op, k), v in CACHE._kernels.items() if op == "l2norm_fwd" and k[0] == 40)
    src = launcher.source()
    assert launcher.spec.prototype() + " {" in src  # the definition TileLang generated
    assert "#pragma omp parallel" in src and "l2norm_fwd_drive" in src


def test_spec_prototype_order():
    spec = RowKernelSpec(
        "k", 8, matrices=(Param("x", "float"), Param("dy", "uint16_t")), vectors=(Param("rstd", "float"),),
        scalars=(Param("eps", "float"), Param("alpha", "float")),
    )  # fmt: skip
    assert spec.prototype() == (
        "int32_t k_kernel(uint16_t* dy, float* rstd, float* x, int32_t M, float alpha, float eps)"
    )


_CHILD = r"""
import json, torch, tileport
tileport.l2norm_fwd(torch.randn(3, 211))
tileport.l2norm_bwd(torch.randn(3, 211), torch.ones(3), torch.randn(3, 211))
print(json.dumps(tileport.kernel_cache_info()))
"""


def _cache_files(root):
    out = {}
    for dirpath, _, files in os.walk(root):
        for f in files:
            p = os.path.join(dirpath, f)
            out[p] = os.stat(p).st_mtime_ns
    return out


def test_second_process_reuses_the_disk_cache(tmp_path):
    env = dict(os.environ, TILEPORT_CACHE_DIR=str(tmp_path))
    env.pop("TILEPORT_BACKEND", None)

    def run():
        out = subprocess.run([sys.executable, "-c", _CHILD], env=env, capture_output=True, text=True, check=True)
        return json.loads(out.stdout.strip().splitlines()[-1])

    run()
    files = _cache_files(tmp_path)
    assert any(p.endswith(".so") for p in files), "nothing was written to the kernel cache"
    assert str(tmp_path / "tilelang-") in next(iter(files)), "cache is not kept per TileLang version"
    run()
    assert _cache_files(tmp_path) == files, "the second process compiled instead of loading from disk"
