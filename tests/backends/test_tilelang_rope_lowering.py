"""rope's TileLang kernels for CUDA (sm_90) and Ascend arch35 lower here without a device, for every dtype, a few
head dims and a partial rotary dim (one kernel per width bucket and pair chunk: tokens, heads, D, R and the
table's rows are runtime values); the CUDA source builds a cubin where nvcc is present. The launchers' host side
(table rows, layouts, k None or empty) runs with the compiled kernel stood in by torch."""

import shutil

import pytest
import torch

from tileport.backends.registry import REGISTRY


@pytest.fixture(scope="module")
def backend():
    if not REGISTRY.availability("tilelang").ok:
        pytest.skip(REGISTRY.availability("tilelang").reason)
    return REGISTRY.load("tilelang")


def body(src: str) -> str:
    """The kernels' code, past the headers."""
    return src[src.index("__global__") :]


# every dtype; full rotary at 64 and 128, and D = 80 with R = 64 (a pass-through tail); halves and GPT-J pairs
CASES = [(torch.float16, 64, None, False), (torch.bfloat16, 128, None, True), (torch.float32, 80, 64, False)]


@pytest.mark.parametrize("dtype,dim,rotary_dim,interleaved", CASES)
def test_cuda_lowering(backend, dtype, dim, rotary_dim, interleaved):
    options = {"interleaved": interleaved} | ({"rotary_dim": rotary_dim} if rotary_dim else {})
    src = backend.device_sources("rope", "cuda", dtype, dim, **options)
    assert set(src) == {"rope_fwd", "rope_bwd"}
    for name, s in src.items():
        assert 'extern "C" __global__ void __launch_bounds__' in s and f"{name}_kernel(" in s
        assert "int D, int HK, int HQ, int N, int RH, int TR" in s  # one kernel for any shape in the bucket
        k = body(s)
        assert k.count("__fmul_rn") >= 8 and "fma" not in k  # q's and k's four products, each rounded
        assert "__shared__" in k  # cos and sin once per token, for every head
    assert "-0x1p+0f" in body(src["rope_bwd"]) and "-0x1p+0f" not in body(src["rope_fwd"])  # the conjugate


def test_cuda_interleaved_is_its_own_kernel_and_width_buckets_share_one(backend):
    from tileport.backends.tilelang.cuda import rope
    from tileport.backends.tilelang.targets import cuda_target, lower_source

    def fwd(dim, **kw):
        return lower_source(rope.lowered(torch.float16, dim, **kw)["rope_fwd"], cuda_target())

    halves = fwd(100)
    assert fwd(128) == halves  # D and R are runtime values: one kernel per width bucket
    assert fwd(100, interleaved=True) != halves
    assert fwd(100, rotary_dim=32) != halves  # a narrower pair chunk for a partial rotary dim


def test_lowered_checks_the_rotary_dim(backend):
    from tileport.backends.tilelang.ascend import rope as ascend_rope
    from tileport.backends.tilelang.cuda import rope as cuda_rope

    for module in (cuda_rope, ascend_rope):
        for bad in (-2, 63, 130):
            with pytest.raises(ValueError, match=r"rotary_dim must be even and in \[0, 128\]"):
                module.lowered(torch.float16, 128, rotary_dim=bad)
    with pytest.raises(ValueError, match="take no option 'rsqrt'"):
        backend.device_sources("rope", "cuda", torch.float16, 64, rsqrt="approx")


@pytest.mark.parametrize("dtype,dim,rotary_dim,interleaved", CASES)
def test_ascend_lowering(backend, dtype, dim, rotary_dim, interleaved, capfd):
    options = {"interleaved": interleaved} | ({"rotary_dim": rotary_dim} if rotary_dim else {})
    kernels = backend.device_kernels("rope", "ascend", dtype, dim, **options)
    out, err = capfd.readouterr()
    assert "ThreadSync" not in out + err, "lowering reports a data race: " + (out + err)[-400:]
    assert set(kernels) == {"rope_fwd", "rope_bwd"}
    for name, (s, used) in kernels.items():
        assert f"{name}_kernel(" in s and "int32_t D, int32_t H, int32_t N, int32_t RH, int32_t TR" in s
        assert "asc_copy_gm2ub_align" in s and "asc_copy_ub2gm_align" in s and "asc_vf_call" in s  # GM <-> UB, SIMT
        assert "version_counter" in s  # the head blocks double-buffered (T.Pipelined)
        assert "POS[" in s and 0 < used <= 96 * 1024
    assert "-0x1p+0f" in kernels["rope_bwd"][0] and "-0x1p+0f" not in kernels["rope_fwd"][0]


@pytest.mark.slow
@pytest.mark.parametrize("target", ["cuda", "ascend"])
def test_long_heads_lower_in_chunks_within_the_on_chip_budget(backend, target):
    """D = R = 65536 in fp32: the widest tiles, the pairs and the pass-through walked in chunks."""
    from tileport.backends.tilelang.targets import ON_CHIP_BUDGET

    kernels = backend.device_kernels("rope", target, torch.float32, 65536, only=("rope_fwd",))
    src, used = kernels["rope_fwd"]
    assert 0 < used <= ON_CHIP_BUDGET[target]
    assert "for (int32_t k = 0;" in src if target == "ascend" else "for (int k = 0;" in src  # the pair chunks


@pytest.mark.slow
def test_lower_writes_sources_and_cubins(tmp_path, backend):
    if shutil.which("nvcc") is None:
        pytest.skip("nvcc not on PATH: the cubin step needs the CUDA toolkit")
    from tileport.lower import lower

    result = lower("rope", "cuda", torch.bfloat16, 80, tmp_path)
    names = sorted(p.rsplit("/", 1)[1] for p in result.binaries)
    assert names == ["rope_bwd_bfloat16_D80.cubin", "rope_fwd_bfloat16_D80.cubin"]
    assert all((tmp_path / n).read_bytes()[:4] == b"\x7fELF" for n in names)


# The launchers' host side, the compiled kernel stood in by torch (no device here).


def _rotate(x, cos, sin, rows, interleaved, conjugate):
    """[N, H, D] rotated by the table rows (int32 [N], -1 or T_ro off the table), as the kernels compute."""
    half = cos.shape[1]
    ok = (rows >= 0) & (rows < cos.shape[0])
    idx = rows.long().clamp(0, max(cos.shape[0] - 1, 0))
    c = torch.where(ok[:, None], cos.float()[idx], 0.0)[:, None, :] if cos.shape[0] else torch.zeros(len(rows), 1, half)
    s = torch.where(ok[:, None], sin.float()[idx], 0.0)[:, None, :] if cos.shape[0] else torch.zeros(len(rows), 1, half)
    s = -s if conjugate else s
    out = x.clone()
    a, b = (slice(0, 2 * half, 2), slice(1, 2 * half, 2)) if interleaved else (slice(0, half), slice(half, 2 * half))
    x1, x2 = x[..., a].float(), x[..., b].float()
    out[..., a] = (x1 * c - x2 * s).to(x.dtype)
    out[..., b] = (x2 * c + x1 * s).to(x.dtype)
    return out


class _Stand:
    """RUNNER.kernel's stand-in: records the kernel asked for, returns torch doing its work."""

    def __init__(self, target):
        self.target, self.asked = target, []

    def kernel(self, name, build, width, pairs, dtype, interleaved, conjugate, with_k=False):
        self.asked.append((name, width, pairs, dtype, interleaved, conjugate, with_k))

        def cuda(q, k, qo, ko, cos, sin, rows):
            qo.copy_(_rotate(q, cos, sin, rows, interleaved, conjugate))
            if with_k:
                ko.copy_(_rotate(k, cos, sin, rows, interleaved, conjugate))

        def ascend(x, xo, cos, sin, rows):
            xo.copy_(_rotate(x, cos, sin, rows, interleaved, conjugate))

        return cuda if self.target == "cuda" else ascend


@pytest.mark.parametrize("target", ["cuda", "ascend"])
def test_launchers_host_side(backend, target, monkeypatch):
    """Table rows from position_ids (int64 past int32 stays off the table) or offsets, transposed q, k None and
    empty, outputs in the inputs' layouts, and the kernel picked by (bucket, pair chunk, dtype, form)."""
    import importlib

    from tileport.backends.tilelang import rope_device

    module = importlib.import_module(f"tileport.backends.tilelang.{target}.rope")
    stand = _Stand(target)
    monkeypatch.setattr(module, "RUNNER", stand)
    g = torch.Generator().manual_seed(0)
    q = torch.randn(2, 3, 4, 10, generator=g).transpose(1, 2)  # [B, T=4, H=3, D=10] over a [B, H, T, D] buffer
    k = torch.randn(2, 4, 1, 10, generator=g)
    cos, sin = torch.randn(5, 4, generator=g), torch.randn(5, 4, generator=g)  # R = 8 of 10
    ids = torch.tensor([[0, 4, 5, -1], [2**32 + 1, 1, 2, 3]])
    q_out, k_out = module.forward(q, k, cos, sin, ids, None, True, 0)
    rows = torch.tensor([0, 4, 5, -1, 5, 1, 2, 3], dtype=torch.int32)  # clamped to [-1, T_ro]
    assert torch.equal(rope_device.table_rows(ids, None, 0, 2, 4, 5, "cpu"), rows)
    assert q_out.stride() == torch.empty_like(q).stride()
    want_q = _rotate(q.reshape(8, 3, 10), cos, sin, rows, True, False).view(q.shape)
    want_k = _rotate(k.reshape(8, 1, 10), cos, sin, rows, True, False).view(k.shape)
    assert torch.equal(q_out, want_q) and torch.equal(k_out, want_k)
    assert stand.asked[0][:6] == ("rope_fwd", module.bucket(10), module.pair_chunk(8), torch.float32, True, False)
    offsets = torch.tensor([-2, 1], dtype=torch.int32)
    dq, dk = module.backward(q, None, cos, sin, None, offsets, False, 1)
    rows = torch.tensor([-1, 0, 1, 2, 2, 3, 4, 5], dtype=torch.int32)  # t + 1 + offsets[b]
    assert dk is None and torch.equal(dq, _rotate(q.reshape(8, 3, 10), cos, sin, rows, False, True).view(q.shape))
    _, dk = module.backward(q, torch.empty(2, 4, 0, 10), cos, sin, None, offsets, False, 1)
    assert dk.shape == (2, 4, 0, 10) and stand.asked[-1][0] == "rope_bwd"
