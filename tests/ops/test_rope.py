"""rope's interface, generated from its declaration by named dimensions: the checks name the tensor, the
dimension and both sizes; the public forms (``rope`` with flash-attention's arguments, transformers'
``apply_rotary_pos_emb``) against a float64 golden written here; autograd differentiates q and k only, with each
output's gradient in its own shape; empty inputs; custom ops under opcheck and torch.compile without a recompile
per sequence length. Every backend that serves rope here runs the numerics."""

import math

import pytest
import torch

import tileport
from tileport.backends.registry import available_backends
from tileport.ops import catalog

BACKENDS = [b.name for b in available_backends() if b.available and "rope" in b.serves and not b.interpreted]
SPEC = catalog.get("rope")


def _golden(x, cos, sin, pos, interleaved=False):
    """The contract's formula in float64, written out: pairs (x1, x2) -> (x1 c - x2 s, x2 c + x1 s)."""
    b, t, h, d = x.shape
    half = cos.shape[1]
    out = x.double().clone()
    for bi in range(b):
        for ti in range(t):
            p = int(pos[bi, ti])
            inside = 0 <= p < cos.shape[0]
            c = cos[p].double() if inside else torch.zeros(half, dtype=torch.float64)
            sn = sin[p].double() if inside else torch.zeros(half, dtype=torch.float64)
            row = x[bi, ti].double()
            i1 = torch.arange(half) * 2 if interleaved else torch.arange(half)
            i2 = i1 + 1 if interleaved else i1 + half
            out[bi, ti][:, i1] = row[:, i1] * c - row[:, i2] * sn
            out[bi, ti][:, i2] = row[:, i2] * c + row[:, i1] * sn
    return out


def _tables(t, r, dtype=torch.float32):
    inv = 1.0 / (10000 ** (torch.arange(0, r, 2, dtype=torch.float64) / r))
    ang = torch.arange(t, dtype=torch.float64)[:, None] * inv
    return ang.cos().to(dtype), ang.sin().to(dtype)


# ---------------------------------------------------------------- checks from the declaration


@pytest.mark.parametrize(
    "change,error,message",
    [
        (dict(k=torch.randn(3, 5, 2, 8)), ValueError, r"^k has B = 3 \(its dim 0\) but q has B = 2 \(its dim 0\)$"),
        (dict(k=torch.randn(2, 5, 2, 6)), ValueError, r"^k has D = 6 \(its dim 3\) but q has D = 8 \(its dim 3\)$"),
        (
            dict(sin=torch.randn(6, 3)),
            ValueError,
            r"^sin has T_ro = 6 \(its dim 0\) but cos has T_ro = 7 \(its dim 0\)$",
        ),
        (
            dict(cos=torch.randn(7, 5), sin=torch.randn(7, 5)),
            ValueError,
            r"^the sizes must satisfy R <= D, got R = 10, D = 8$",
        ),
        (
            dict(k=torch.randn(2, 5, 2, 8).half()),
            TypeError,
            r"^k must have the dtype of q \(torch.float32\), got torch.float16$",
        ),
        (
            dict(q=torch.randn(2, 5, 8)),
            ValueError,
            r"^q must have 4 dimensions \(\[B, T, Hq, D\]\), got 3 \(shape \(2, 5, 8\)\)$",
        ),
        (dict(q=torch.zeros(2, 5, 4, 8, dtype=torch.int64)), TypeError, r"^q must have a floating dtype"),
        (
            dict(position_ids=torch.zeros(2, 5)),
            TypeError,
            r"^position_ids must have an integer dtype \(int64 or int32\), got torch.float32$",
        ),
        (
            dict(position_ids=torch.zeros(2, 4, dtype=torch.int64)),
            ValueError,
            r"^position_ids has T = 4 \(its dim 1\) but q has T = 5",
        ),
        (
            dict(offsets=torch.zeros(3, dtype=torch.int32)),
            ValueError,
            r"^offsets has B = 3 \(its dim 0\) but q has B = 2",
        ),
        (dict(k=torch.randn(2, 5, 2, 8, device="meta")), ValueError, r"^k must be on q's device cpu, got meta"),
        (dict(cos="table"), TypeError, r"^cos must be a torch.Tensor, got str$"),
    ],
)
def test_checks_name_the_tensor_the_dimension_and_both_sizes(change, error, message):
    ins = (
        dict(
            q=torch.randn(2, 5, 4, 8),
            k=torch.randn(2, 5, 2, 8),
            cos=torch.randn(7, 3),
            sin=torch.randn(7, 3),
            position_ids=None,
            offsets=None,
        )
        | change
    )
    for fn in (SPEC.api.function, SPEC.api.forward):
        with pytest.raises(error, match=message):
            fn(**ins, backend="torch")


def test_backward_checks_and_attribute_checks():
    dq = torch.randn(2, 5, 4, 8)
    cos, sin = torch.randn(7, 4), torch.randn(7, 4)
    with pytest.raises(ValueError, match=r"^dk_out has T = 6 \(its dim 1\) but dq_out has T = 5"):
        tileport.rope_bwd(dq, torch.randn(2, 6, 1, 8), cos, sin, backend="torch")
    with pytest.raises(TypeError, match=r"^interleaved must be a bool, got int$"):
        tileport.rope_fwd(dq, None, cos, sin, interleaved=1)
    with pytest.raises(TypeError, match=r"^offset must be an int, got float$"):
        tileport.rope_fwd(dq, None, cos, sin, offset=1.0)


def test_public_argument_rules():
    q, cos, sin = torch.randn(1, 6, 2, 8), *_tables(8, 8)
    with pytest.raises(ValueError, match="give position_ids or seqlen_offsets, not both"):
        tileport.rope(q, None, cos, sin, position_ids=torch.zeros(1, 6, dtype=torch.int64), seqlen_offsets=2)
    with pytest.raises(TypeError, match="seqlen_offsets must be an int or an integer tensor, got float"):
        tileport.rope(q, None, cos, sin, seqlen_offsets=1.5)
    with pytest.raises(ValueError, match=r"cu_seqlens must rise from 0 to q's total tokens 6, got \[0, 2, 5\]"):
        tileport.rope(q, None, cos, sin, cu_seqlens=torch.tensor([0, 2, 5]))
    with pytest.raises(ValueError, match=r"with cu_seqlens, q must be packed as \[1, total, H, D\]"):
        tileport.rope(torch.randn(2, 3, 2, 8), None, cos, sin, cu_seqlens=torch.tensor([0, 3]))
    with pytest.raises(ValueError, match="unsqueeze_dim must be 1"):
        tileport.apply_rotary_pos_emb(q, q, cos[None], sin[None], unsqueeze_dim=3)


# ---------------------------------------------------------------- numerics against the float64 golden


def _tol(dtype):
    return {torch.float32: 2e-6, torch.float16: 1e-3, torch.bfloat16: 8e-3}[dtype]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("interleaved", [False, True])
def test_rope_against_the_golden(backend, dtype, interleaved):
    g = torch.Generator().manual_seed(1)
    b, t, hq, hk, d, r, t_ro = 2, 6, 4, 2, 12, 8, 7  # partial rotary, GQA, a table shorter than offset + T
    q = torch.randn(b, t, hq, d, generator=g).to(dtype)
    k = torch.randn(b, t, hk, d, generator=g).to(dtype)
    cos, sin = _tables(t_ro, r, dtype)
    offsets = torch.tensor([-1, 2])
    qo, ko = tileport.rope(q, k, cos, sin, interleaved=interleaved, seqlen_offsets=offsets, backend=backend)
    pos = torch.arange(t)[None, :] + offsets[:, None]
    for got, x in ((qo, q), (ko, k)):
        want = _golden(x, cos, sin, pos, interleaved)
        assert got.dtype == dtype and got.shape == x.shape
        torch.testing.assert_close(got.double(), want, rtol=_tol(dtype), atol=_tol(dtype))
    assert torch.equal(qo[..., r:], q[..., r:])  # pass-through columns copied
    assert torch.count_nonzero(qo[0, 0, :, :r]) == 0 and torch.count_nonzero(qo[1, 5, :, :r]) == 0  # out of range


@pytest.mark.parametrize("backend", BACKENDS)
def test_position_ids_and_packed_sequences(backend):
    g = torch.Generator().manual_seed(2)
    q = torch.randn(1, 7, 2, 8, generator=g)
    cos, sin = _tables(16, 8)
    cu = torch.tensor([0, 3, 7], dtype=torch.int32)
    qo, ko = tileport.rope(q, None, cos, sin, cu_seqlens=cu, seqlen_offsets=torch.tensor([5, 0]), backend=backend)
    pos = torch.tensor([[5, 6, 7, 0, 1, 2, 3]])
    assert ko is None
    torch.testing.assert_close(qo.double(), _golden(q, cos, sin, pos), rtol=2e-6, atol=2e-6)
    by_ids, _ = tileport.rope(q, None, cos, sin, position_ids=pos.int(), backend=backend)
    assert torch.equal(by_ids, qo)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("unsqueeze_dim", [1, 2])
def test_apply_rotary_pos_emb_is_bit_for_bit_with_transformers_in_fp32(backend, unsqueeze_dim, monkeypatch):
    """transformers' code, written out: ``q * cos.unsqueeze(dim) + rotate_half(q) * sin.unsqueeze(dim)``."""
    g = torch.Generator().manual_seed(3)
    b, h, t, d = 2, 3, 5, 16
    shape = (b, h, t, d) if unsqueeze_dim == 1 else (b, t, h, d)
    q, k = torch.randn(shape, generator=g), torch.randn(shape, generator=g)
    position_ids = torch.tensor([[0, 1, 2, 3, 4], [7, 8, 9, 10, 11]])
    inv = 1.0 / (10000 ** (torch.arange(0, d, 2, dtype=torch.float32) / d))
    freqs = position_ids[..., None].float() * inv
    emb = torch.cat((freqs, freqs), -1)
    cos, sin = emb.cos(), emb.sin()  # [B, T, D], halves repeated (LlamaRotaryEmbedding)

    def rotate_half(x):
        return torch.cat((-x[..., d // 2 :], x[..., : d // 2]), -1)

    c, sn = cos.unsqueeze(unsqueeze_dim), sin.unsqueeze(unsqueeze_dim)
    want_q, want_k = q * c + rotate_half(q) * sn, k * c + rotate_half(k) * sn
    monkeypatch.setenv("TILEPORT_BACKEND", backend)  # the drop-in takes no backend argument, as transformers' does
    got_q, got_k = tileport.apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=unsqueeze_dim)
    assert torch.equal(got_q, want_q) and torch.equal(got_k, want_k)
    assert got_q.is_contiguous()  # in q's own layout, as transformers' result is


# ---------------------------------------------------------------- autograd, empty inputs, custom ops


@pytest.mark.parametrize("backend", BACKENDS)
def test_autograd_differentiates_q_and_k_only_with_each_outputs_gradient(backend):
    g = torch.Generator().manual_seed(4)
    q = torch.randn(2, 4, 4, 8, generator=g, dtype=torch.float64 if backend == "torch" else torch.float32)
    k = torch.randn(2, 4, 1, 8, generator=g, dtype=q.dtype)
    cos, sin = (t.to(q.dtype).requires_grad_() for t in _tables(4, 6))
    leaves = q.clone().requires_grad_(), k.clone().requires_grad_()
    qo, ko = tileport.rope(*leaves, cos, sin, backend=backend)
    (qo * torch.arange(qo.numel()).view(qo.shape).to(q.dtype)).sum().backward()  # k_out unused: its gradient is 0
    pos = torch.arange(4).expand(2, 4)
    # the rotation is orthogonal per pair: dq is dq_out rotated by minus the angle
    dq_out = torch.arange(qo.numel()).view(qo.shape).double()
    want = _golden(dq_out, cos.detach(), -sin.detach(), pos)
    want[..., 6:] = dq_out[..., 6:]
    torch.testing.assert_close(leaves[0].grad.double(), want, rtol=1e-6, atol=1e-4)
    assert torch.count_nonzero(leaves[1].grad) == 0
    assert cos.grad is None and sin.grad is None


@pytest.mark.parametrize("backend", BACKENDS)
def test_empty_inputs_give_empty_outputs(backend):
    cos, sin = _tables(4, 8)
    qo, ko = tileport.rope(torch.randn(0, 4, 2, 8), torch.randn(0, 4, 1, 8), cos, sin, backend=backend)
    assert qo.shape == (0, 4, 2, 8) and ko.shape == (0, 4, 1, 8)
    q = torch.randn(1, 3, 2, 8)
    qo, _ = tileport.rope(q, None, cos[:, :0], sin[:, :0], backend=backend)  # R = 0: a copy
    assert torch.equal(qo, q)
    qo, _ = tileport.rope(q, None, cos[:0], sin[:0], backend=backend)  # T_ro = 0: every rotated column zero
    assert torch.count_nonzero(qo) == 0


def test_custom_ops_pass_opcheck():
    q, k = torch.randn(2, 3, 4, 8), torch.randn(2, 3, 2, 8)
    cos, sin = _tables(5, 6)
    pos = torch.tensor([[0, 1, 2], [4, 3, 9]])
    for args in ((q, k, cos, sin, pos, None, False, 0, "torch"), (q, None, cos, sin, None, None, True, 1, "torch")):
        torch.library.opcheck(torch.ops.tileport.rope_fwd.default, args)
        torch.library.opcheck(torch.ops.tileport.rope_bwd.default, (q, args[1], *args[2:]))


def test_fullgraph_compile_without_a_recompile_per_sequence_length():
    from torch._dynamo.testing import CompileCounter

    counter = CompileCounter()

    def f(q, k, cos, sin):
        qo, ko = tileport.rope(q, k, cos, sin, backend="torch")
        return qo.sum() + ko.sum() * 2

    compiled = torch.compile(f, fullgraph=True, backend=counter, dynamic=True)
    for t in (5, 9, 17):
        q, k = torch.randn(2, t, 4, 8, requires_grad=True), torch.randn(2, t, 2, 8, requires_grad=True)
        cos, sin = _tables(t, 8)
        out = compiled(q, k, cos, sin)
        out.backward()
        qr, kr = q.detach().clone().requires_grad_(), k.detach().clone().requires_grad_()
        f(qr, kr, cos, sin).backward()
        torch.testing.assert_close(q.grad, qr.grad, rtol=0, atol=0)
        torch.testing.assert_close(k.grad, kr.grad, rtol=0, atol=0)
    assert counter.frame_count == 1


def test_the_module_form_takes_every_tensor_input():
    Rope = SPEC.api.module("Rope")
    layer = Rope(interleaved=True, backend="torch")
    q, cos, sin = torch.randn(1, 3, 2, 8), *_tables(3, 8)
    qo, ko = layer(q, None, cos, sin)
    assert ko is None and torch.equal(qo, tileport.rope(q, None, cos, sin, interleaved=True, backend="torch")[0])
    assert "interleaved=True" in repr(layer)
    assert math.isclose(float(qo[0, 0].norm()), float(q[0, 0].norm()), rel_tol=1e-6)  # position 0: the identity


@pytest.mark.parametrize("backend", BACKENDS)
def test_an_expanded_gradient_reaches_the_kernel_with_unit_stride(backend):
    """autograd's gradient of ``.sum()`` is expanded (stride 0 everywhere): the interface hands the kernels stride 1
    in the last dimension, as the contract says (``unit_stride``)."""
    q = torch.randn(2, 3, 2, 8, requires_grad=True)
    cos, sin = _tables(3, 8)
    tileport.rope(q, None, cos, sin, backend=backend)[0].sum().backward()
    ones = torch.ones(2, 3, 2, 8)
    want = _golden(ones, cos, -sin, torch.arange(3).expand(2, 3))
    torch.testing.assert_close(q.grad.double(), want, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("backend", BACKENDS)
def test_forward_writes_into_out(backend):
    """``rope_fwd(out=...)``: preallocated outputs written and returned (bench's kernel-only provider), checked
    against the declared shapes; an absent output's slot must be None."""
    q, k = torch.randn(2, 3, 4, 8), torch.randn(2, 3, 2, 8)
    cos, sin = _tables(3, 8)
    want = tileport.rope_fwd(q, k, cos, sin, backend=backend)
    outs = (torch.empty_like(q), torch.empty_like(k))
    got = tileport.rope_fwd(q, k, cos, sin, backend=backend, out=outs)
    assert got[0] is outs[0] and got[1] is outs[1]
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
    alone = tileport.rope_fwd(q, None, cos, sin, backend=backend, out=(torch.empty_like(q), None))
    assert alone[1] is None and torch.equal(alone[0], want[0])
    with pytest.raises(ValueError, match=r"^out\[1\] \(k_out\) must be None: k_out is absent from this call$"):
        tileport.rope_fwd(q, None, cos, sin, backend=backend, out=outs)
    with pytest.raises(ValueError, match=r"^out\[0\] \(q_out\) must be torch.float32 of shape \(2, 3, 4, 8\)"):
        tileport.rope_fwd(q, k, cos, sin, backend=backend, out=(torch.empty(2, 3, 4, 7), outs[1]))
    with pytest.raises(TypeError, match=r"^out must be a tuple \(q_out, k_out\) of tensors, got Tensor$"):
        tileport.rope_fwd(q, k, cos, sin, backend=backend, out=outs[0])
