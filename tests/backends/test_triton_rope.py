"""rope's Triton kernels (``tileport/backends/triton/rope.py``) under the CPU interpreter, called through the
kernel module's interface (``tileport.ops.rope``'s contract), against a float64 golden written here from the
contract's formula; fp32 bit for bit with transformers' ``q * cos + rotate_half(q) * sin``. Small shapes: the
interpreter costs milliseconds per program."""

import pytest
import torch

pytest.importorskip("triton", reason="triton is an optional extra: pip install tileport[triton]")
from tileport.backends.registry import REGISTRY

if not REGISTRY.availability("triton").ok:
    pytest.skip(REGISTRY.availability("triton").reason, allow_module_level=True)

from tileport import BackendUnavailableError
from tileport.backends import outputs
from tileport.backends.triton import ascend, rope

DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def tables(rows: int, half: int, dtype=torch.float32, base: float = 10000.0):
    """cos and sin [rows, half] of the usual inverse-frequency angles, in ``dtype``."""
    inv = 1.0 / base ** (torch.arange(half, dtype=torch.float64) * 2 / max(2 * half, 1))
    ang = torch.arange(rows, dtype=torch.float64)[:, None] * inv[None, :]
    return ang.cos().to(dtype), ang.sin().to(dtype)


def positions(B, T, rows, position_ids=None, offsets=None, offset=0):
    """(table row [B, T] as int64, on the table [B, T]) of the contract."""
    if position_ids is not None:
        p = position_ids.long()
    else:
        p = torch.arange(T)[None, :] + offset + (offsets.long()[:, None] if offsets is not None else 0)
    p = p.expand(B, T)
    return p, (p >= 0) & (p < rows)


def golden(
    x, cos, sin, position_ids=None, offsets=None, interleaved=False, offset=0, conjugate=False, dt=torch.float64
):
    """The contract's rope of x [B, T, H, D] computed in ``dt`` (float64: the golden; fp32: the kernels' math,
    each product rounded, torch's CPU ops fusing none), with the sum of the pairs' products' magnitudes."""
    B, T = x.shape[:2]
    rows, half = cos.shape
    p, ok = positions(B, T, rows, position_ids, offsets, offset)
    idx = p.clamp(0, max(rows - 1, 0))
    c = cos.to(dt)[idx] if rows else torch.zeros(B, T, half, dtype=dt)
    s = sin.to(dt)[idx] if rows else torch.zeros(B, T, half, dtype=dt)
    c, s = c[:, :, None, :], (-s if conjugate else s)[:, :, None, :]
    xd, out = x.to(dt), x.to(dt).clone()
    pairs = (slice(0, 2 * half, 2), slice(1, 2 * half, 2)) if interleaved else (slice(0, half), slice(half, 2 * half))
    sl1, sl2 = pairs
    x1, x2 = xd[..., sl1], xd[..., sl2]
    keep = ok[:, :, None, None]
    out[..., sl1] = torch.where(keep, x1 * c - x2 * s, 0.0)
    out[..., sl2] = torch.where(keep, x2 * c + x1 * s, 0.0)
    scale = torch.zeros_like(out)
    scale[..., sl1] = (x1 * c).abs() + (x2 * s).abs()
    scale[..., sl2] = (x2 * c).abs() + (x1 * s).abs()
    return out, scale


def assert_golden(got, x, cos, sin, **kw):
    """got within one rounding to its dtype of the fp32 math's bound around the float64 golden, and equal to the
    contract's fp32 math rounded once; the pass-through columns and the off-table tokens' rotated columns exact."""
    want, scale = golden(x, cos, sin, **kw)
    assert got.dtype == x.dtype and got.shape == x.shape
    fi = torch.finfo(got.dtype)
    bound = fi.eps / 2 * want.abs() + 2.0**-23 * (1 + fi.eps) * scale + fi.tiny * fi.eps / 2
    err = (got.double() - want).abs()
    assert torch.all(err <= bound), f"max error {err.max().item():.3g}, at {torch.nonzero(err > bound)[0].tolist()}"
    fp32 = golden(x, cos, sin, dt=torch.float32, **kw)[0].to(x.dtype)
    assert torch.equal(got.view(torch.uint8), fp32.view(torch.uint8))
    half = cos.shape[1]
    assert torch.equal(got[..., 2 * half :], x[..., 2 * half :])
    B, T = x.shape[:2]
    _, ok = positions(B, T, cos.shape[0], kw.get("position_ids"), kw.get("offsets"), kw.get("offset", 0))
    assert torch.all(got[..., : 2 * half][~ok] == 0)


def run(q, k, cos, sin, position_ids=None, offsets=None, interleaved=False, offset=0, backward=False):
    fn = rope.backward if backward else rope.forward
    with outputs.poisoned():  # an element the kernel never writes stays NaN
        return fn(q, k, cos, sin, position_ids, offsets, interleaved, offset)


def rotate_half(x):
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("interleaved", [False, True])
def test_gqa_partial_rotary_against_golden(dtype, interleaved, randn):
    """Hq != Hk, R < D (the last 8 columns copied), a table longer than T."""
    q, k = randn(2, 5, 4, 24, dtype=dtype), randn(2, 5, 2, 24, dtype=dtype, seed=1)
    cos, sin = tables(9, 8, dtype)
    q_out, k_out = run(q, k, cos, sin, interleaved=interleaved, offset=2)
    assert_golden(q_out, q, cos, sin, interleaved=interleaved, offset=2)
    assert_golden(k_out, k, cos, sin, interleaved=interleaved, offset=2)


@pytest.mark.parametrize("dtype", DTYPES)
def test_bit_for_bit_with_the_composite_in_fp32(dtype, randn):
    """R = D, halves: the torch composite in fp32 (each product rounded, then the sum), rounded once to the
    dtype: equal bits, bf16 included (rounded to nearest even by hand, as torch's cast)."""
    q, k = randn(3, 7, 2, 32, dtype=dtype), randn(3, 7, 1, 32, dtype=dtype, seed=1)
    cos, sin = tables(7, 16, dtype)
    q_out, k_out = run(q, k, cos, sin)
    c = torch.cat((cos, cos), -1).float()[None, :, None, :]
    s = torch.cat((sin, sin), -1).float()[None, :, None, :]
    for x, got in ((q, q_out), (k, k_out)):
        xf = x.float()
        want = (xf * c + rotate_half(xf) * s).to(dtype)
        assert torch.equal(got.view(torch.uint8), want.view(torch.uint8))


@pytest.mark.parametrize("interleaved", [False, True])
def test_rotary_dim_zero_copies_and_empty_table_zeros(interleaved, randn):
    q, k = randn(2, 3, 2, 8, dtype=torch.bfloat16), randn(2, 3, 1, 8, dtype=torch.bfloat16, seed=1)
    cos, sin = tables(4, 0, torch.bfloat16)
    q_out, k_out = run(q, k, cos, sin, interleaved=interleaved)
    assert torch.equal(q_out, q) and torch.equal(k_out, k)
    cos, sin = tables(0, 3, torch.bfloat16)  # T_ro = 0: every rotated column zero, the last two copied
    q_out, k_out = run(q, k, cos, sin, interleaved=interleaved)
    assert torch.all(q_out[..., :6] == 0) and torch.equal(q_out[..., 6:], q[..., 6:])
    assert_golden(k_out, k, cos, sin, interleaved=interleaved)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_offsets_negative_and_past_the_table(dtype, randn):
    """Left-padded rows (negative offsets) and rows running past the table: zeros in the rotated columns."""
    q, k = randn(3, 6, 2, 12, dtype=dtype), randn(3, 6, 1, 12, dtype=dtype, seed=1)
    cos, sin = tables(7, 5, dtype)  # R = 10 of 12
    offsets = torch.tensor([-3, 0, 4], dtype=torch.int32)
    for kw in (dict(offsets=offsets, offset=0), dict(offsets=offsets.long(), offset=-1), dict(offset=3)):
        q_out, k_out = run(q, k, cos, sin, **kw)
        assert_golden(q_out, q, cos, sin, **kw)
        assert_golden(k_out, k, cos, sin, **kw)


@pytest.mark.parametrize("pos_dtype", [torch.int32, torch.int64])
@pytest.mark.parametrize("interleaved", [False, True])
def test_position_ids(pos_dtype, interleaved, randn):
    """Any row per token, in or out of the table; an int64 id past int32 takes no table row."""
    q, k = randn(2, 4, 3, 16, dtype=torch.bfloat16), randn(2, 4, 1, 16, dtype=torch.bfloat16, seed=1)
    cos, sin = tables(10, 8, torch.bfloat16)
    ids = [[9, 0, -1, 10], [3, 3, 2, 7]]
    if pos_dtype == torch.int64:
        ids[1][0] = 2**32 + 3  # as int32 it would be row 3
    position_ids = torch.tensor(ids, dtype=pos_dtype)
    kw = dict(position_ids=position_ids, interleaved=interleaved, offset=5)  # offset unused with position_ids
    q_out, k_out = run(q, k, cos, sin, **kw)
    assert_golden(q_out, q, cos, sin, **kw)
    assert_golden(k_out, k, cos, sin, **kw)
    transposed = position_ids.t().contiguous().t()  # strided ids
    q2, _ = run(q, None, cos, sin, **(kw | dict(position_ids=transposed)))
    assert torch.equal(q2, q_out)


def test_k_none_and_k_empty(randn):
    q = randn(2, 3, 2, 8)
    cos, sin = tables(3, 4)
    q_out, k_out = run(q, None, cos, sin)
    assert k_out is None
    assert_golden(q_out, q, cos, sin)
    k = torch.empty(2, 3, 0, 8)
    q2, k2 = run(q, k, cos, sin)
    assert torch.equal(q2, q_out) and k2.shape == k.shape and k2.dtype == k.dtype


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_non_contiguous_inputs_and_outputs_in_their_layout(dtype, randn):
    """q a transposed [B, H, T, D] view, k a column slice of a wider buffer, cos and sin column slices of
    wider tables: read in place; each output allocated as torch.empty_like would (its layout kept)."""
    q = randn(2, 3, 5, 16, dtype=dtype).transpose(1, 2)  # [B, T, H, D] over a [B, H, T, D] buffer
    k = randn(2, 5, 2, 20, dtype=dtype, seed=1)[..., 2:18]
    cos_w, sin_w = tables(6, 12, dtype)
    cos, sin = cos_w[:, :8], sin_w[:, :8]
    assert not q.is_contiguous() and not k.is_contiguous() and not cos.is_contiguous()
    q_out, k_out = run(q, k, cos, sin, interleaved=True)
    assert q_out.stride() == torch.empty_like(q).stride() and k_out.stride() == torch.empty_like(k).stride()
    assert_golden(q_out, q, cos, sin, interleaved=True)
    assert_golden(k_out, k, cos, sin, interleaved=True)
    ref_q, ref_k = run(q.contiguous(), k.contiguous(), cos.contiguous(), sin.contiguous(), interleaved=True)
    assert torch.equal(q_out, ref_q) and torch.equal(k_out, ref_k)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("interleaved", [False, True])
def test_backward_rotates_by_minus_the_angle(dtype, interleaved, randn):
    dq_out, dk_out = randn(2, 4, 3, 20, dtype=dtype), randn(2, 4, 1, 20, dtype=dtype, seed=1)
    cos, sin = tables(6, 8, dtype)  # R = 16 of 20
    offsets = torch.tensor([-1, 3])
    kw = dict(offsets=offsets, interleaved=interleaved)
    dq, dk = run(dq_out, dk_out, cos, sin, backward=True, **kw)
    assert_golden(dq, dq_out, cos, sin, conjugate=True, **kw)
    assert_golden(dk, dk_out, cos, sin, conjugate=True, **kw)
    if dtype == torch.float32:  # the rotation undone, on the table's tokens
        x, _ = run(dq, dk, cos, sin, **kw)
        _, ok = positions(2, 4, 6, offsets=offsets)
        torch.testing.assert_close(x[ok], dq_out[ok], rtol=1e-5, atol=1e-6)


def test_ascend_forms_persistent_grid(monkeypatch, randn):
    """The A2 tiling under the interpreter ($TILEPORT_TRITON_ASCEND): the vector-core grid, each program walking
    several token blocks, gives the GPU form's bits."""
    q, k = randn(2, 2600, 1, 4), randn(2, 2600, 1, 4, seed=1)
    cos, sin = tables(2600, 2)
    want = run(q, k, cos, sin, offset=-3)
    monkeypatch.setenv(ascend.EMULATE, "ascend-a2")
    from tileport.backends.triton.common import blocks

    _, _, grid, n = blocks(5200, 2, torch.device("cpu"), rope.LIVE["fwd"])
    assert grid == (ascend.CHIPS["ascend-a2"].vector_cores,) and n > grid[0]
    got = run(q, k, cos, sin, offset=-3)
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])


def test_interpreter_refuses_large_shapes():
    q = torch.empty(1, 1025, 8, 128)
    cos, sin = tables(4, 64)
    with pytest.raises(BackendUnavailableError, match="rope: backend 'triton' under the CPU interpreter"):
        rope.forward(q, None, cos, sin, None, None, False, 0)


def test_no_fp64_in_the_kernels():
    """Ascend's vector units have no fp64: nothing in the kernel source asks for it."""
    import inspect

    src = inspect.getsource(rope)
    assert "float64" not in src and "fp64" not in src


def test_ascend_blocks_hold_two_tokens_within_the_unified_buffer(monkeypatch, randn):
    """triton-ascend 3.2 stops on a gathered [1, BLOCK_D] load (the table rows by position): on a chip a block
    holds at least two tokens, half as many pairs per chunk, still within half the unified buffer."""
    from tileport.backends.triton import common

    chosen = []

    def recording(*args):
        chosen.append(common.blocks(*args))
        return chosen[-1]

    q = randn(1, 3, 2, 4100, dtype=torch.bfloat16)  # R = 4096 of 4100: 2048 pairs a token
    cos, sin = tables(3, 2048, torch.bfloat16)
    ids = torch.tensor([[2, 0, 5]])
    want = run(q, None, cos, sin, position_ids=ids)
    monkeypatch.setenv(ascend.EMULATE, "ascend-a2")
    monkeypatch.setattr(rope, "blocks", recording)
    got = run(q, None, cos, sin, position_ids=ids)
    assert torch.equal(got[0], want[0])
    chip = ascend.CHIPS["ascend-a2"]
    (m1, d1, _, _), (m2, d2, grid, _) = chosen
    assert m1 == 1 and (m2, d2) == (2, d1 // 2) and grid[0] <= chip.vector_cores
    assert m2 * d2 * 4 * rope.LIVE["fwd"] <= chip.ub_bytes // 2


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_through_the_public_api_with_autograd(dtype, randn):
    """``tileport.rope`` on the Triton kernels: outputs and gradients equal to the torch backend's."""
    import tileport

    if not hasattr(tileport, "rope"):
        pytest.skip("tileport.rope is not exported here")
    q = randn(2, 4, 5, 24, dtype=dtype).transpose(1, 2)
    k = randn(2, 5, 2, 24, dtype=dtype, seed=1)
    cos, sin = tables(7, 8, dtype)
    pos = torch.tensor([[0, 1, 2, 9, -1], [6, 5, 4, 3, 2]])
    got = {}
    for backend in ("triton", "torch"):
        qq, kk = q.detach().requires_grad_(), k.detach().requires_grad_()
        q_out, k_out = tileport.rope(qq, kk, cos, sin, position_ids=pos, interleaved=True, backend=backend)
        (q_out.float().square().sum() + k_out.float().sum()).backward()
        got[backend] = (q_out, k_out, qq.grad, kk.grad)
    assert all(torch.equal(a, b) for a, b in zip(got["triton"], got["torch"]))
