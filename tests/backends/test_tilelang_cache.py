"""The TileLang CPU kernel cache: one compile per dtype combination (M and D are runtime values), disk reuse
across processes, one disk folder per CPU model and target ISA."""

import json
import os
import platform
import subprocess
import sys

import pytest
import torch

import tileport
from tileport.backends.tilelang.cpu import settings


def _entry(op):
    return next((r for r in tileport.kernel_cache_info() if r["op"] == op and r["backend"] == "tilelang"), None)


def test_many_row_counts_and_widths_one_compile():
    key = str(("x=float16", "y=float16"))
    tileport.l2norm_fwd(torch.randn(1, 173).half())
    before = _entry("l2norm_fwd")
    assert key in before["keys"]
    gen = torch.Generator().manual_seed(0)
    rows = torch.randint(1, 3000, (1000,), generator=gen).tolist()  # issue 4's bar: 1000 calls, random M
    widths = torch.randint(1, 700, (1000,), generator=gen).tolist()  # issue 10: and random D
    for m, d in zip(rows, widths):
        x = torch.randn(m, d).half()
        y, _ = tileport.l2norm_fwd(x)
        assert y.shape == (m, d)
    after = _entry("l2norm_fwd")
    assert after["kernels"] == before["kernels"], "a new row count or width triggered a compile"
    assert after["compile_seconds"] == before["compile_seconds"]
    assert after["hits"] >= before["hits"] + len(rows)
    assert after["keys"].count(key) == 1


@pytest.mark.skipif(platform.machine() != "x86_64", reason="x86-64 -march levels")
def test_cache_folder_is_per_cpu_and_target_isa(tmp_path):
    env = {"TILEPORT_CACHE_DIR": str(tmp_path)}
    native = settings.cache_dir("0.1.15", env)
    avx2 = settings.cache_dir("0.1.15", dict(env, TILEPORT_CPU_ARCH="x86-64-v3"))
    sse2 = settings.cache_dir("0.1.15", dict(env, TILEPORT_CPU_ARCH="x86-64"))
    assert len({native, avx2, sse2}) == 3, "two target ISAs would share compiled binaries"
    assert native.parent == tmp_path / "tilelang-0.1.15"
    assert "__AVX2__" in settings.isa(dict(TILEPORT_CPU_ARCH="x86-64-v3")).macros
    assert "__AVX2__" not in settings.isa(dict(TILEPORT_CPU_ARCH="x86-64")).macros


_CHILD = r"""
import json, torch, tileport
tileport.l2norm_fwd(torch.randn(3, 211))
tileport.l2norm_bwd(torch.randn(3, 99), torch.ones(3), torch.randn(3, 99))
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
