"""The Triton backend under the CPU interpreter: dual benchmark against the golden, bf16 rounding, limits."""

import pytest
import torch

import tileport
from tileport import BackendUnavailableError
from tileport.backends.registry import REGISTRY
from tileport.precision import assert_dual_benchmark

pytest.importorskip("triton", reason="triton is an optional extra: pip install tileport[triton]")
if not REGISTRY.availability("triton").ok:
    pytest.skip(REGISTRY.availability("triton").reason, allow_module_level=True)


def l2_golden(golden, x, eps=1e-6):
    """(y, rstd) of the float64 golden."""
    g = golden("l2norm", x=x, eps=eps)
    return g["y"], g["rstd"]


def test_reported_as_interpreted_small_shapes_only():
    (info,) = [b for b in tileport.available_backends() if b.name == "triton"]
    assert info.available and info.interpreted and "small shapes only" in info.reason


def test_dispatch_never_picks_the_interpreter():
    assert REGISTRY.resolve("l2norm", torch.device("cpu"), (torch.float32,)).name == "tilelang"


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("shape", [(1, 1), (33, 100), (5, 4097), (2, 65536), (2, 3, 7)])
def test_forward_backward_against_golden(dtype, shape, golden, randn):
    x, dy = randn(*shape, dtype=dtype), randn(*shape, dtype=dtype, seed=1)
    y, rstd = tileport.l2norm_fwd(x, backend="triton")
    yb, rb = tileport.l2norm_fwd(x, backend="torch")
    yg, rg = l2_golden(golden, x)
    assert_dual_benchmark(y, yg, yb, dtype=dtype)
    assert_dual_benchmark(rstd, rg, rb, dtype=torch.float32)
    dx = tileport.l2norm_bwd(x, rstd, dy, backend="triton")
    assert_dual_benchmark(
        dx, golden("l2norm", x=x, dy=dy)["dx"], tileport.l2norm_bwd(x, rb, dy, backend="torch"), dtype=dtype
    )


def test_bf16_rounds_to_nearest_even_like_torch(randn):
    x = randn(64, 100, dtype=torch.bfloat16)
    y, rstd = tileport.l2norm_fwd(x, backend="triton")
    expected = (x.float() * rstd[:, None]).to(torch.bfloat16)  # torch rounds to nearest even
    assert torch.equal(y.view(torch.int16), expected.view(torch.int16))
    z = torch.tensor([[float("nan"), 1.0]], dtype=torch.bfloat16)
    assert torch.isnan(tileport.l2norm_fwd(z, backend="triton")[0]).all()


def test_strided_rows_and_empty_inputs(randn):
    x = randn(16, 256)[:, :100]
    y, _ = tileport.l2norm_fwd(x, backend="triton")
    torch.testing.assert_close(y, tileport.l2norm_fwd(x, backend="torch")[0], rtol=1e-6, atol=1e-7)
    assert tileport.l2norm_fwd(torch.empty(0, 8), backend="triton")[0].shape == (0, 8)


def test_interpreter_refuses_large_shapes_by_name():
    with pytest.raises(
        BackendUnavailableError, match=r"CPU interpreter takes at most 1048576 elements .*shape \(1025, 1024\)"
    ):
        tileport.l2norm_fwd(torch.randn(1025, 1024), backend="triton")


def test_few_programs_under_the_interpreter():
    from tileport.backends.triton.common import INTERPRET_PROGRAMS, blocks

    for M, D in [(1, 1), (37449, 7), (1024, 1024)]:
        block_m, block_d, grid, n = blocks(M, D)
        assert grid[0] == n <= INTERPRET_PROGRAMS and block_m * grid[0] >= M and block_d >= min(D, 4096)


@pytest.mark.parametrize("target", ["ascend-a2", "ascend-a3"])
def test_ascend_tiling_fits_the_unified_buffer_and_the_cores(target):
    """For an A2/A3 chip every kernel's block holds its live fp32 tensors in half the unified buffer, the grid is
    at most the vector-core count, and the programs' row blocks cover every row, for D from 1 to 65536."""
    import importlib

    from tileport.backends.triton import BACKEND, ascend
    from tileport.backends.triton.common import blocks

    chip = ascend.CHIPS[target]
    widths = set()
    for op in BACKEND.dtypes:
        live = getattr(importlib.import_module(f"tileport.backends.triton.{op}"), "LIVE", None)
        if live is None:  # it launches another operator's kernels (add_rms_norm: rms_norm's)
            continue
        for M in (1, 7, 4096, 100_000):
            for D in (1, 3, 64, 100, 4096, 5000, 65536):
                for kind in live:  # a forward-only operator (causal_conv1d_update) declares "fwd" alone
                    with ascend.lowering_for(chip):
                        block_m, block_d, grid, n = blocks(M, D, None, live[kind])
                    assert block_m * block_d * 4 * live[kind] <= chip.ub_bytes // 2
                    assert grid[0] == min(n, chip.vector_cores) and n * block_m >= M and block_d >= min(D, block_d)
                    widths.add(block_d)
    assert len(widths) <= 14  # a bounded set of block widths (powers of two)
    _, _, grid, n = blocks(64, 4096)
    assert grid == (n,)  # outside a lowering: the GPU grid, one program per block
