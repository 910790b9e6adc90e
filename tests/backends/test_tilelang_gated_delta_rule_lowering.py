"""Gated DeltaNet's TileLang device kernels (chunk_gated_delta_rule's eight, fused_recurrent_gated_delta_rule's
decode step) lower here without a device: CUDA for sm_90 (tensor-core products, within shared memory; cubins where
nvcc is present) and Ascend 950 (slow: the auto-scheduler's search; products on the cube from L1 into L0C, vector
work in SIMT VF blocks, UB, L1 and L0C within their budgets). Their launchers run here with every kernel stood in by
torch code that follows its GM contract (``gated_delta_device.py``'s table): the decomposition into kernels, the
sequences padded to chunks, the K-block partial sums and the group sums give the CPU chunk algorithm's results.
Nothing here runs a kernel on a device."""

import importlib
import inspect
import shutil

import pytest
import torch

from tileport.backends.registry import REGISTRY
from tileport.backends.tilelang import gated_delta_device as gdd

CHUNK = "chunk_gated_delta_rule"
DECODE = "fused_recurrent_gated_delta_rule"
CHUNK_KERNELS = (
    gdd.PREPARE,
    gdd.STATES,
    gdd.OUTPUT,
    gdd.BWD_PREPARE,
    gdd.BWD_DV,
    gdd.BWD_STATES,
    gdd.BWD_DQKWG,
    gdd.BWD_WY,
)
FORWARD = (gdd.PREPARE, gdd.STATES, gdd.OUTPUT)
BF16, FP16, FP32 = torch.bfloat16, torch.float16, torch.float32


@pytest.fixture(scope="module")
def backend():
    if not REGISTRY.availability("tilelang").ok:
        pytest.skip(REGISTRY.availability("tilelang").reason)
    return REGISTRY.load("tilelang")


def test_both_operators_have_cuda_and_ascend_kernel_modules(backend):
    for op in (CHUNK, DECODE):
        assert set(backend.targets(op)) == {"cpu", "cuda", "npu-arch35"}, op


def test_head_dims_the_tiles_take(backend):
    for bad in (8, 72, 192):
        with pytest.raises(ValueError, match="multiples of 16 up to 64 and of 64 up to 128"):
            backend.device_kernels(CHUNK, "cuda", BF16, bad, only=(gdd.OUTPUT,))
    with pytest.raises(ValueError, match="state_dtype must be one of"):
        backend.device_kernels(DECODE, "cuda", BF16, 128, state_dtype=torch.float64)


# ---- CUDA ----


def _cuda_checks(name: str, src: str, used: int):
    from tileport.backends.tilelang.targets import ON_CHIP_BUDGET

    assert f"{name}_kernel(" in src and 'extern "C" __global__' in src
    assert 0 <= used <= ON_CHIP_BUDGET["cuda"], f"{name}: {used} B of shared memory"
    if name != gdd.DECODE:
        # tensor-core products: wgmma for 16-bit tiles, tf32 mma_sync for fp32
        assert "wgmma" in src or "tl::mma_sync" in src, f"{name}: its products are not tensor-core GEMMs"
        assert "int HV" in src and "int NCH" in src  # chunks and heads are runtime values


@pytest.mark.parametrize(
    "dtype,dim,names",
    [
        pytest.param(BF16, 128, FORWARD, id="bf16-128-forward"),
        pytest.param(BF16, 128, CHUNK_KERNELS[3:], id="bf16-128-backward", marks=pytest.mark.slow),
        pytest.param(FP32, 128, CHUNK_KERNELS, id="fp32-128", marks=pytest.mark.slow),
        # fp16's tiles are bf16's but for the casts; a head of 64 changes the tiles: a kernel of each kind
        pytest.param(FP16, 128, FORWARD, id="fp16-128-forward", marks=pytest.mark.slow),
        pytest.param(BF16, 64, (gdd.PREPARE, gdd.OUTPUT, gdd.BWD_DQKWG), id="bf16-64", marks=pytest.mark.slow),
    ],
)
def test_cuda_chunk_kernels_lower(backend, dtype, dim, names):
    kernels = backend.device_kernels(CHUNK, "cuda", dtype, dim, only=names)
    assert set(kernels) == set(names)
    for name, (src, used) in kernels.items():
        _cuda_checks(name, src, used)
    if gdd.PREPARE in kernels:  # the triangular inverse in fp32 SIMT loops, the exps of gc differences
        assert "expf" in kernels[gdd.PREPARE][0] or "__expf" in kernels[gdd.PREPARE][0]


@pytest.mark.parametrize("dtype,state_dtype", [(BF16, FP32), (FP16, BF16), (FP32, FP32)])
def test_cuda_decode_lowers(backend, dtype, state_dtype):
    (name, (src, used)), *_ = backend.device_kernels(DECODE, "cuda", dtype, 128, state_dtype=state_dtype).items()
    assert name == gdd.DECODE
    _cuda_checks(name, src, used)
    assert "float* __restrict__ HT" in src  # the final state in fp32


def test_one_cuda_kernel_per_head_dim(backend):
    """The tiles are the head dim's: 64 and 128 are two kernels (a row kernel's width bucket would merge them)."""
    a = backend.device_sources(CHUNK, "cuda", BF16, 64, only=(gdd.OUTPUT,))[gdd.OUTPUT]
    b = backend.device_sources(CHUNK, "cuda", BF16, 128, only=(gdd.OUTPUT,))[gdd.OUTPUT]
    assert a != b


@pytest.mark.slow
def test_lower_cli_builds_cuda_cubins(tmp_path):
    from typer.testing import CliRunner

    from tileport.cli import app

    if shutil.which("nvcc") is None:
        pytest.skip("nvcc not on PATH: the cubin step needs the CUDA toolkit")
    for op, count in ((CHUNK, 8), (DECODE, 1)):
        out = tmp_path / op
        result = CliRunner().invoke(app, ["lower", op, "--target", "cuda", "--dim", "128", "--out", str(out)])
        assert result.exit_code == 0, result.output
        cubins = sorted(out.glob("*.cubin"))
        assert len(cubins) == count and all(c.read_bytes()[:4] == b"\x7fELF" for c in cubins)
        assert result.output.count("KB of on-chip memory") == count


# ---- Ascend 950 ----


def _ascend_checks(name: str, src: str, used, out_err: str):
    from tileport.backends.tilelang.targets import CUBE_BUDGET, ON_CHIP_BUDGET

    assert "ThreadSync" not in out_err, "lowering reports a data race: " + out_err[-400:]
    assert f"{name}_kernel(" in src and "asc_vf_call" in src, name  # vector work in SIMT VF blocks
    assert 0 < used <= ON_CHIP_BUDGET["ascend"], f"{name}: {used} B of UB"
    if name == gdd.DECODE:  # a matrix-vector step: the vector unit alone, the state in UB
        assert "__cbuf__" not in src and "asc_mmad" not in src and "ascend_gemm_l1" not in src
        return
    # the products on the cube: GEMMs from L1 (the template stages L0A/L0B and issues mmad) into L0C, then to UB
    assert "__mix__" in src and "ascend_gemm_l1<" in src and "__cbuf__" in src and "asc_copy_l0c2ub" in src, name
    assert set(used.cube) == {"L1", "L0C"}, used.cube
    for memory, size in used.cube.items():
        assert 0 < size <= CUBE_BUDGET["ascend"][memory], f"{name}: {size} B of {memory}"


# every kernel in fp32 (the most UB bytes: the budget test's lowering, read back from the disk cache there), the
# 16-bit inputs' casts and cube products in the forward's (bf16) and the output's (fp16): an Ascend lowering takes
# up to a minute here
ASCEND_CASES = [pytest.param(FP32, n, id=f"fp32-{n}", marks=pytest.mark.slow) for n in CHUNK_KERNELS]
ASCEND_CASES += [pytest.param(BF16, n, id=f"bf16-{n}", marks=pytest.mark.slow) for n in FORWARD]
ASCEND_CASES += [pytest.param(FP16, gdd.OUTPUT, id=f"fp16-{gdd.OUTPUT}", marks=pytest.mark.slow)]


@pytest.mark.parametrize("dtype,name", ASCEND_CASES)
def test_ascend_chunk_kernel_lowers(backend, dtype, name, capfd):
    kernels = backend.device_kernels(CHUNK, "ascend", dtype, 128, only=(name,))
    out, err = capfd.readouterr()
    _ascend_checks(name, kernels[name][0], kernels[name][1], out + err)


@pytest.mark.slow
@pytest.mark.parametrize("dtype,state_dtype", [(BF16, BF16), (FP16, FP32), (FP32, FP32)])
def test_ascend_decode_lowers(backend, dtype, state_dtype, capfd):
    kernels = backend.device_kernels(DECODE, "ascend", dtype, 128, state_dtype=state_dtype)
    out, err = capfd.readouterr()
    src, used = kernels[gdd.DECODE]
    _ascend_checks(gdd.DECODE, src, used, out + err)
    widened = state_dtype != FP32  # a narrower initial state widened once in UB, then a step per token
    assert src.count("asc_vf_call") == 1 + widened


# ---- the launchers, every kernel stood in by torch code following its GM contract ----


def _heads(x, R):
    """[NCH, C, H, D] -> [NCH, HV, C, D] fp64 (a key head's rows for each of its R value heads)."""
    return x.double().repeat_interleave(R, 2).transpose(1, 2)


def _tokens(y):
    """[NCH, HV, C, D] -> [NCH, C, HV, D]."""
    return y.transpose(1, 2)


def _decays(gc):
    """(exp(gc_r - gc_s) for r >= s, the same for r > s), zero elsewhere; gc [..., C] fp64."""
    d = gc[..., :, None] - gc[..., None, :]
    low = torch.ones(d.shape[-2:], dtype=torch.bool).tril()
    return torch.where(low, d, -torch.inf).exp(), torch.where(low.tril(-1), d, -torch.inf).exp()


class _Stand:
    """A kernel cache whose kernels are torch code in fp64 on the GM contract's tensors."""

    def __init__(self):
        self.asked = []

    def kernel(self, name, build, *args):
        self.asked.append((name, *args))
        return getattr(self, name.removeprefix("chunk_gdn_").removeprefix("fused_recurrent_gdn_"))

    @staticmethod
    def _wy(Kc, Vc, G, BETA):
        R = Vc.shape[2] // Kc.shape[2]
        k, v, b = _heads(Kc, R), Vc.double().transpose(1, 2), BETA.double()
        gc = G.double().cumsum(-1)
        _, strict = _decays(gc)
        eye = torch.eye(k.shape[2], dtype=torch.float64)
        tinv = torch.linalg.solve_triangular(eye + b[..., None] * (k @ k.mT) * strict, eye, upper=False)
        return k, v, b, gc, tinv

    def fwd_prepare(self, Kc, Vc, G, BETA, GC, W, U, TINV=None):
        k, v, b, gc, tinv = self._wy(Kc, Vc, G, BETA)
        GC.copy_(gc)
        W.copy_(_tokens((tinv * (b * gc.exp())[..., None, :]) @ k))
        U.copy_(_tokens((tinv * b[..., None, :]) @ v))
        if TINV is not None:
            TINV.copy_(tinv)

    bwd_prepare = fwd_prepare

    def fwd_states(self, Kc, W, U, GC, H0, CO, HS, VN, HT):
        R = W.shape[2] // Kc.shape[2]
        k, w, u, gc = _heads(Kc, R), W.double().transpose(1, 2), U.double().transpose(1, 2), GC.double()
        for n in range(H0.shape[0]):
            S = H0[n].double()
            for c in range(int(CO[n]), int(CO[n + 1])):
                HS[c] = S
                vn = u[c] - w[c] @ S
                VN[c] = vn.transpose(0, 1)
                gam = gc[c][:, -1:]
                S = gam.exp()[..., None] * S + (k[c] * (gam - gc[c]).exp()[..., None]).mT @ vn
            HT[n] = S

    def fwd_output(self, Qc, Kc, GC, HS, VN, O, scale):
        R = HS.shape[1] // Kc.shape[2]
        q, k, gc = _heads(Qc, R), _heads(Kc, R), GC.double()
        low, _ = _decays(gc)
        p = (q @ k.mT) * low * scale
        O.copy_(_tokens((q * (gc.exp() * scale)[..., None]) @ HS.double() + p @ VN.double().transpose(1, 2)))

    def bwd_dv(self, Qc, Kc, GC, DO, DVL, scale):
        R = DO.shape[2] // Kc.shape[2]
        q, k, gc = _heads(Qc, R), _heads(Kc, R), GC.double()
        low, _ = _decays(gc)
        DVL.copy_(_tokens(((q @ k.mT) * low * scale).mT @ DO.double().transpose(1, 2)))

    def bwd_states(self, Qc, Kc, W, GC, DO, DVL, DHT, CO, DH, DVN, DH0, scale):
        R = W.shape[2] // Kc.shape[2]
        q, k, gc = _heads(Qc, R), _heads(Kc, R), GC.double()
        w, do, dvl = (x.double().transpose(1, 2) for x in (W, DO, DVL))
        for n in range(DHT.shape[0]):
            dS = DHT[n].double()
            for c in reversed(range(int(CO[n]), int(CO[n + 1]))):
                DH[c] = dS
                gam = gc[c][:, -1:]
                dvn = dvl[c] + (k[c] * (gam - gc[c]).exp()[..., None]) @ dS
                DVN[c] = dvn.transpose(0, 1)
                qe = q[c] * (gc[c].exp() * scale)[..., None]
                dS = gam.exp()[..., None] * dS + qe.mT @ do[c] - w[c].mT @ dvn
            DH0[n] = dS

    def bwd_dqkwg(self, Qc, Kc, GC, HS, VN, DO, DH, DVN, DQ, DK, DW, DGC, scale):
        R = HS.shape[1] // Kc.shape[2]
        q, k, gc = _heads(Qc, R), _heads(Kc, R), GC.double()
        vn, do, dvn = (x.double().transpose(1, 2) for x in (VN, DO, DVN))
        hs, dh = HS.double(), DH.double()
        low, _ = _decays(gc)
        gam = gc[..., -1:]
        dp = (do @ vn.mT) * low * scale
        NK = DGC.shape[0]
        BK = q.shape[-1] // NK
        for kb in range(NK):  # the K blocks' partial terms of dg, as the kernel splits them
            cut = slice(kb * BK, (kb + 1) * BK)
            qb, kb_, hb, dhb = q[..., cut], k[..., cut], hs[:, :, cut], dh[:, :, cut]
            dqi = (do @ hb.mT) * (gc.exp() * scale)[..., None]
            t = dp * (qb @ kb_.mT)
            dg = t.sum(-1) - t.sum(-2) + (dqi * qb).sum(-1)
            dkd = (vn @ dhb.mT) * (gam - gc).exp()[..., None]
            gk = (dkd * kb_).sum(-1)
            dg = dg - gk
            dg[..., -1] += gk.sum(-1) + gam[..., 0].exp() * (hb * dhb).sum((-1, -2))
            DQ[..., cut] = _tokens(dqi + dp @ kb_)
            DK[..., cut] = _tokens(dkd + dp.mT @ qb)
            DW[..., cut] = _tokens(dvn @ hb.mT)
            DGC[kb] = dg

    def bwd_wy(self, Kc, Vc, BETA, GC, TINV, W, U, DW, DVN, DK, DGC, DKO, DV, DBETA, DG):
        R = Vc.shape[2] // Kc.shape[2]
        k, v, b, gc = _heads(Kc, R), Vc.double().transpose(1, 2), BETA.double(), GC.double()
        tinv = TINV.double()
        w, u, dw, dvn, dk = (x.double().transpose(1, 2) for x in (W, U, DW, DVN, DK))
        _, strict = _decays(gc)
        eg = gc.exp()
        dx, dy = tinv.mT @ dw, tinv.mT @ dvn
        e = (dx @ w.mT - dy @ u.mT) * strict
        kk = k @ k.mT
        kdx = (dx * k).sum(-1)
        be = e * b[..., None]
        t = be * kk
        dg = DGC.double().sum(0) + t.sum(-1) - t.sum(-2) - b * eg * kdx
        DBETA.copy_((e * kk).sum(-1) + (dy * v).sum(-1) - eg * kdx)
        DKO.copy_(_tokens(dk + be @ k + be.mT @ k - dx * (b * eg)[..., None]))
        DV.copy_(_tokens(dy * b[..., None]))
        DG.copy_(dg.flip(-1).cumsum(-1).flip(-1))

    def fwd(self, Q, Kk, V, G, BETA, H0, TOK, O, HT, scale):  # the decode step, token by token
        R = V.shape[1] // Q.shape[1]
        q, k = (x.double().repeat_interleave(R, 1) for x in (Q, Kk))
        for n in range(H0.shape[0]):
            S = H0[n].double()
            for t in range(int(TOK[n]), int(TOK[n + 1])):
                e = G[t].double().exp()[:, None, None]
                S = e * S
                vn = BETA[t].double()[:, None] * (V[t].double() - (S * k[t][..., None]).sum(-2))
                S = S + k[t][..., None] * vn[:, None, :]
                O[t] = scale * (S * q[t][..., None]).sum(-2)
            HT[n] = S


def _inputs(B, T, H, HV, K, V, packed: bool, seed=0):
    g = torch.Generator().manual_seed(seed)
    q, k = (torch.nn.functional.normalize(torch.randn(B, T, H, K, generator=g), dim=-1) for _ in range(2))
    v = torch.randn(B, T, HV, V, generator=g)
    gate = torch.nn.functional.logsigmoid(torch.randn(B, T, HV, generator=g))
    beta = torch.rand(B, T, HV, generator=g)
    cu = torch.tensor([0, 5, 5, 70, T], dtype=torch.long) if packed else None
    N = 4 if packed else B
    h0 = torch.randn(N, HV, K, V, generator=g) * 0.1
    return q, k, v, gate, beta, h0, cu


@pytest.mark.parametrize(
    "B,T,packed", [(2, 128, False), (2, 100, False), (1, 150, True)], ids=["dense", "tail", "packed"]
)
def test_chunk_launchers_give_the_chunk_algorithm(B, T, packed):
    """forward and backward through the eight kernels' contracts (stood in by fp64 torch code): the CPU chunk
    algorithm's o, final state and every gradient (an empty sequence, a tail chunk and grouped heads included)."""
    from tileport.backends.tilelang.cpu import chunked

    q, k, v, gate, beta, h0, cu = _inputs(B, T, 2, 4, 32, 48, packed)
    stand = _Stand()
    _, forward, backward = gdd.chunk_entries(gdd.ChunkBuilders(*[None] * 7), stand, "a stand-in")
    scale = 32**-0.5
    o, ht = forward(q, k, v, gate, beta, h0, cu, scale)
    want_o, want_ht = chunked.forward(q, k, v, gate, beta, h0, cu, scale)
    torch.testing.assert_close(o, want_o, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(ht, want_ht, rtol=1e-4, atol=1e-5)
    assert [a[0] for a in stand.asked] == list(FORWARD)
    assert stand.asked[0][1:] == (torch.float32, 32, 48, False)
    g2 = torch.Generator().manual_seed(1)
    do, dht = torch.randn(o.shape, generator=g2), torch.randn(ht.shape, generator=g2)
    got = backward(q, k, v, gate, beta, h0, cu, do, dht, scale)
    want = chunked.backward(q, k, v, gate, beta, h0, cu, do, dht, scale)
    for name, a, b in zip(("dq", "dk", "dv", "dg", "dbeta", "dh0"), got, want):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4, msg=name)
    backward_kernels = [gdd.BWD_PREPARE, gdd.STATES, *CHUNK_KERNELS[4:]]  # the forward's states recomputed
    assert [a[0] for a in stand.asked[3:]] == backward_kernels and stand.asked[3][-1] is True


def test_chunk_launchers_without_states_or_gradients_of_them():
    from tileport.backends.tilelang.cpu import chunked

    q, k, v, gate, beta, _, _ = _inputs(1, 64, 1, 1, 16, 16, False)
    _, forward, backward = gdd.chunk_entries(gdd.ChunkBuilders(*[None] * 7), _Stand(), "a stand-in")
    o, ht = forward(q, k, v, gate, beta, None, None, 0.25)
    assert ht is None
    torch.testing.assert_close(o, chunked.forward(q, k, v, gate, beta, None, None, 0.25)[0], rtol=1e-4, atol=1e-5)
    do = torch.ones_like(o)
    got = backward(q, k, v, gate, beta, None, None, do, None, 0.25)
    want = chunked.backward(q, k, v, gate, beta, None, None, do, None, 0.25)
    assert got[-1] is None
    for a, b in zip(got[:-1], want[:-1]):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4)
    with pytest.raises(TypeError, match="fp16, bf16 or fp32 q, k and v, got torch.float64"):
        forward(q.double(), k.double(), v.double(), gate, beta, None, None, 0.25)


@pytest.mark.parametrize("packed", [False, True])
def test_decode_launcher_gives_the_recurrence(packed):
    """The decode step's launcher (its kernel stood in): the CPU step's o and final state; g and beta None are
    no decay and beta = 1; a bf16 initial state is read in its own dtype."""
    from tileport.backends.tilelang.cpu import fused_recurrent_gated_delta_rule as cpu

    q, k, v, gate, beta, h0, cu = _inputs(1 if packed else 3, 150 if packed else 2, 2, 4, 32, 16, packed)
    stand = _Stand()
    _, forward = gdd.recurrent_entries(None, stand, "a stand-in")
    for g_, b_ in ((gate, beta), (None, None)):
        o, ht = forward(q, k, v, g_, b_, h0, cu, 0.5)
        want_o, want_ht = cpu.forward(q, k, v, g_, b_, h0, cu, 0.5)
        torch.testing.assert_close(o, want_o, rtol=1e-4, atol=1e-5)
        torch.testing.assert_close(ht, want_ht, rtol=1e-4, atol=1e-5)
    forward(q, k, v, gate, beta, h0.bfloat16(), cu, 0.5)
    assert stand.asked[-1] == (gdd.DECODE, torch.float32, 32, 16, torch.bfloat16)
    assert forward(q, k, v, gate, beta, None, cu, 0.5)[1] is None


@pytest.mark.parametrize("target", ["cuda", "ascend"])
def test_device_modules_take_the_contract_and_launch_through_their_runner(backend, target, monkeypatch):
    """Each target's modules give forward (and backward) in the torch reference's argument names, and launch their
    kernels through the target's runner (here stood in: the kernels cannot run without the device)."""
    from tileport.backends.tilelang.cpu import chunked

    for op, fns in ((CHUNK, ("forward", "backward")), (DECODE, ("forward",))):
        module = importlib.import_module(f"tileport.backends.tilelang.{target}.{op}")
        ref = importlib.import_module(f"tileport.backends.torch.{op}")
        for fn in fns:
            got, want = (inspect.signature(getattr(m, fn)).parameters for m in (module, ref))
            assert list(got) == list(want), (op, fn)
    module = importlib.import_module(f"tileport.backends.tilelang.{target}.{CHUNK}")
    stand = _Stand()
    monkeypatch.setattr(module.RUNNER, "kernel", stand.kernel)
    q, k, v, gate, beta, h0, _ = _inputs(1, 64, 1, 2, 16, 16, False)
    o, _ = module.forward(q, k, v, gate, beta, h0, None, 0.25)
    torch.testing.assert_close(o, chunked.forward(q, k, v, gate, beta, h0, None, 0.25)[0], rtol=1e-4, atol=1e-5)
    assert [a[0] for a in stand.asked] == list(FORWARD)


def test_chunking_pads_each_sequence_to_whole_chunks():
    cu = torch.tensor([0, 5, 5, 70, 150])
    ch = gdd.chunking(1, 150, cu, None, "cpu")
    assert ch.N == 4 and ch.NCH == 1 + 0 + 2 + 2 and ch.offsets.tolist() == [0, 1, 1, 3, 5]
    assert ch.tokens[:6].tolist() == [0, 1, 2, 3, 4, -1] and ch.tokens[64:66].tolist() == [5, 6]
    x = torch.randn(1, 150, 2, 3)
    assert torch.equal(gdd.unpack(ch, gdd.pack(ch, x), x.dtype), x)
    dense = gdd.chunking(2, 128, None, None, "cpu")
    assert dense.tokens is None and dense.offsets.tolist() == [0, 2, 4]
