"""Gated DeltaNet's Triton kernels (``tileport/backends/triton/chunk_gated_delta_rule.py`` and
``fused_recurrent_gated_delta_rule.py``) under the CPU interpreter: every output and gradient against the float64
token-by-token recurrence (``spec.recurrence``, differentiated by autograd), through the kernel modules and the
public API, over grouped value heads, K != V, T off the chunk size, T = 1, packed sequences with segments of one
token and of none, initial states and final-state gradients given or not, fp32/bf16/fp16 beside fp32 g and beta.

The bound of an element (``assert_golden``): its own rounding to the output's dtype, eps / 2 |golden| (the kernels
compute in fp32 and round once), plus 10 times the largest error of the same result computed in fp32 by the
same-precision benchmarks (10: the precision standard's L0 ratio on the largest error): the recurrence token by
token, and for the chunk operator also the chunk algorithm in torch's fp32 operations (``chunked.py``, the CPU
backend's), whose rounding is the chunk form's (decays exp(gc_r - gc_s) of in-chunk cumulative sums, the WY
solve) where the token recurrence's is not. Small shapes: the interpreter costs milliseconds per program and per
operation."""

import dataclasses

import pytest
import torch

pytest.importorskip("triton", reason="triton is an optional extra: pip install tileport[triton]")
from tileport.backends.registry import REGISTRY

if not REGISTRY.availability("triton").ok:
    pytest.skip(REGISTRY.availability("triton").reason, allow_module_level=True)

import tileport
from tileport.backends import outputs
from tileport.backends.tilelang.cpu import chunked
from tileport.backends.triton import _delta, ascend
from tileport.backends.triton import chunk_gated_delta_rule as chunk
from tileport.backends.triton import fused_recurrent_gated_delta_rule as step
from tileport.ops.chunk_gated_delta_rule.spec import recurrence

NAMES = ("q", "k", "v", "g", "beta", "initial_state")
RATIO = 10  # the precision standard's L0 ratio of largest errors, against the fp32 benchmark


def make(B, T, H, HV, K, V, cu=None, dtype=torch.float32, gate_dtype=torch.float32, state=True, g_low=-2.0, seed=0):
    """Inputs as gated DeltaNet makes them: k normalized, g in [g_low, 0] (every fifth token 0), beta in (0, 1)."""
    gen = torch.Generator().manual_seed(seed)

    def rand(*shape):
        return torch.randn(shape, generator=gen)

    g = torch.rand((B, T, HV), generator=gen) * g_low
    g[:, ::5] = 0.0
    n = B if cu is None else len(cu) - 1
    return {
        "q": rand(B, T, H, K).to(dtype),
        "k": torch.nn.functional.normalize(rand(B, T, H, K), dim=-1).to(dtype),
        "v": rand(B, T, HV, V).to(dtype),
        "g": g.to(gate_dtype),
        "beta": torch.rand((B, T, HV), generator=gen).to(gate_dtype),
        "initial_state": rand(n, HV, K, V) if state else None,
        "cu_seqlens": None if cu is None else torch.tensor(cu),
    }


def reference(inp, dtype, scale, do=None, dfinal=None):
    """(o, final_state) of the token recurrence in ``dtype`` and, given ``do``, the gradients of every input present
    (``dfinal`` None: no gradient reaches the final state)."""
    leaves = {n: None if inp[n] is None else inp[n].to(dtype).detach().requires_grad_(do is not None) for n in NAMES}
    with torch.enable_grad():
        o, final = recurrence(*leaves.values(), inp["cu_seqlens"], scale)
        if do is None:
            return o.detach(), final.detach(), {}
        outs = [(o, do)] + ([(final, dfinal)] if dfinal is not None else [])
        wrt = {n: t for n, t in leaves.items() if t is not None}
        found = torch.autograd.grad(
            [t for t, _ in outs], list(wrt.values()), [d.to(dtype) for _, d in outs], allow_unused=True
        )
    grads = {f"d{n}": torch.zeros_like(t) if d is None else d for (n, t), d in zip(wrt.items(), found)}
    return o.detach(), final.detach(), grads


def chunk_benchmark(inp, scale, do, dfinal):
    """(o, final_state, {d<name>: gradient}) of the chunk algorithm in torch's fp32 operations (``chunked.py``)."""
    up = {n: None if inp[n] is None else inp[n].float() for n in NAMES}
    args = [*up.values(), inp["cu_seqlens"]]
    o, final = chunked.forward(*args, scale)
    grads = chunked.backward(*args, do.float(), dfinal, scale)
    return o, final, {f"d{n}": d for n, d in zip(NAMES, grads) if d is not None}


def assert_golden(got, gold, what, *benches):
    """got within its dtype's rounding of the float64 golden plus RATIO times the fp32 benchmarks' largest error;
    no element left unwritten (outputs start as NaN)."""
    assert got.shape == gold.shape, what
    assert not got.isnan().any(), f"{what}: an element never written (or nan)"
    if gold.numel() == 0:
        return
    eps = torch.finfo(got.dtype).eps
    worst_bench = max((b.double() - gold).abs().max().item() for b in benches)
    floor = RATIO * worst_bench + torch.finfo(torch.float32).tiny
    err = (got.double() - gold).abs()
    bound = eps / 2 * gold.abs() + floor
    worst = (err - bound).argmax()
    assert torch.all(err <= bound), (
        f"{what}: error {err.flatten()[worst].item():.3g} at {worst.item()} over its bound "
        f"{bound.flatten()[worst].item():.3g} (golden {gold.flatten()[worst].item():.3g}, "
        f"fp32 benchmarks' largest error {worst_bench:.3g})"
    )


def check_chunk(inp, dfinal_given=True, scale=None):
    """The chunk module's forward and backward against the golden, each result in its input's dtype."""
    K = inp["q"].shape[-1]
    scale = K**-0.5 if scale is None else scale
    args = [inp[n] for n in NAMES] + [inp["cu_seqlens"]]
    with outputs.poisoned():
        o, final = chunk.forward(*args, scale)
    assert o.dtype == inp["q"].dtype and (final is None) == (inp["initial_state"] is None)
    gen = torch.Generator().manual_seed(7)
    do = torch.randn(o.shape, generator=gen).to(o.dtype)
    state = inp["initial_state"]
    dfinal = torch.randn(state.shape, generator=gen) if state is not None and dfinal_given else None
    gold_o, gold_final, gold = reference(inp, torch.float64, scale, do, dfinal)
    bench_o, bench_final, bench = reference(inp, torch.float32, scale, do, dfinal)
    chunk_o, chunk_final, chunk_grads = chunk_benchmark(inp, scale, do, dfinal)
    assert_golden(o, gold_o, "o", bench_o, chunk_o)
    if final is not None:
        assert final.dtype == torch.float32
        assert_golden(final, gold_final, "final_state", bench_final, chunk_final)
    with outputs.poisoned():
        grads = chunk.backward(*args, do, dfinal, scale)
    for n, got in zip(NAMES, grads):
        if inp[n] is None:
            assert got is None, f"d{n}"
            continue
        assert got.dtype == inp[n].dtype, f"d{n}"
        assert_golden(got, gold[f"d{n}"], f"d{n}", bench[f"d{n}"], chunk_grads[f"d{n}"])


def test_grouped_values_k_not_v_tail_chunk_fp32():
    """HV = 2 H, K != V, T = 70 (a full chunk and a tail of 6), an initial state and the final state's gradient."""
    check_chunk(make(2, 70, 2, 4, 16, 8))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
def test_16_bit_q_k_v_beside_fp32_gates(dtype):
    """q, k, v in 16 bits with g and beta fp32 (as fla's users pass them); no final-state gradient."""
    check_chunk(make(1, 40, 1, 2, 16, 32, dtype=dtype), dfinal_given=False)


def test_packed_segments_of_one_token_and_of_none_fp16():
    """cu_seqlens with segments of 1, 64, 0, 1 and 20 tokens (chunks of one token, a sequence of no chunk whose
    final state is its initial one), beta in fp16 too."""
    check_chunk(make(1, 86, 1, 2, 8, 16, cu=[0, 1, 65, 65, 66, 86], dtype=torch.float16, gate_dtype=torch.float16))


def test_one_token_without_state():
    """T = 1, no initial state (no final state, no dinitial_state), K = 4 < the smallest tile, a scale of 1."""
    check_chunk(make(3, 1, 2, 2, 4, 12, state=False), scale=1.0)


def test_strong_decay_stays_finite():
    """g down to -20 a token: gc reaches about -640 in a chunk of 64, where exp(gc_s) alone underflows and
    exp(-gc_s) overflows; the kernels only exponentiate differences gc_r - gc_s <= 0 (and gc itself)."""
    check_chunk(make(1, 64, 1, 1, 16, 16, g_low=-20.0))


def test_strided_inputs_read_in_place():
    """q a transposed [B, H, T, K] buffer, v a slice of a wider one, k with a strided last dimension (copied), g
    and beta transposed views: the same numbers as contiguous copies."""
    inp = make(2, 20, 2, 2, 8, 8)
    strided = dict(inp)
    strided["q"] = inp["q"].transpose(1, 2).contiguous().transpose(1, 2)
    strided["v"] = torch.cat([inp["v"], inp["v"]], -1)[..., :8]
    strided["k"] = torch.stack([inp["k"], inp["k"]], -1)[..., 0]
    strided["g"] = inp["g"].transpose(1, 2).contiguous().transpose(1, 2)
    assert not strided["q"].is_contiguous() and strided["k"].stride(-1) == 2 and not strided["v"].is_contiguous()
    args = [strided[n] for n in NAMES] + [None]
    want = chunk.forward(*[inp[n] for n in NAMES], None, 0.5)
    got = chunk.forward(*args, 0.5)
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
    do = torch.randn(want[0].shape, generator=torch.Generator().manual_seed(3))
    want_grads = chunk.backward(*[inp[n] for n in NAMES], None, do, None, 0.5)
    got_grads = chunk.backward(*args, do.transpose(1, 2).contiguous().transpose(1, 2), None, 0.5)
    assert all(torch.equal(a, b) for a, b in zip(got_grads, want_grads))


def test_chunk_public_api_with_autograd():
    """``tileport.chunk_gated_delta_rule(..., backend="triton")``: packed bf16 sequences, the final state asked
    for, gradients of every input through autograd against the golden."""
    inp = make(1, 75, 1, 2, 16, 16, cu=[0, 10, 75], dtype=torch.bfloat16)
    leaves = {n: inp[n].detach().requires_grad_() for n in NAMES}
    o, final = tileport.chunk_gated_delta_rule(
        *(leaves[n] for n in NAMES[:5]), initial_state=leaves["initial_state"], output_final_state=True,
        cu_seqlens=inp["cu_seqlens"], backend="triton",
    )  # fmt: skip
    gen = torch.Generator().manual_seed(5)
    do, dfinal = torch.randn(o.shape, generator=gen).to(o.dtype), torch.randn(final.shape, generator=gen)
    torch.autograd.backward([o, final], [do, dfinal])
    scale = 16**-0.5
    gold_o, gold_final, gold = reference(inp, torch.float64, scale, do, dfinal)
    bench_o, bench_final, bench = reference(inp, torch.float32, scale, do, dfinal)
    chunk_o, chunk_final, chunk_grads = chunk_benchmark(inp, scale, do, dfinal)
    assert_golden(o, gold_o, "o", bench_o, chunk_o)
    assert_golden(final, gold_final, "final_state", bench_final, chunk_final)
    for n in NAMES:
        assert leaves[n].grad.dtype == inp[n].dtype
        assert_golden(leaves[n].grad, gold[f"d{n}"], f"d{n}", bench[f"d{n}"], chunk_grads[f"d{n}"])


def check_step(inp, use_g=True, use_beta=True, public=False):
    """The recurrent kernel (or the public function) against the golden with g / beta left out as asked (no decay,
    beta 1)."""
    B, T, HV = inp["v"].shape[:3]
    given = dict(inp, g=inp["g"] if use_g else None, beta=inp["beta"] if use_beta else None)
    scale = inp["q"].shape[-1] ** -0.5
    if public:
        o, final = tileport.fused_recurrent_gated_delta_rule(
            given["q"], given["k"], given["v"], g=given["g"], beta=given["beta"],
            initial_state=given["initial_state"], output_final_state=given["initial_state"] is not None,
            cu_seqlens=given["cu_seqlens"], backend="triton",
        )  # fmt: skip
    else:
        with outputs.poisoned():
            o, final = step.forward(*[given[n] for n in NAMES], given["cu_seqlens"], scale)
    assert o.dtype == inp["q"].dtype and (final is None) == (inp["initial_state"] is None)
    filled = dict(given)
    filled["g"] = given["g"] if use_g else torch.zeros(B, T, HV)
    filled["beta"] = given["beta"] if use_beta else torch.ones(B, T, HV)
    gold_o, gold_final, _ = reference(filled, torch.float64, scale)
    bench_o, bench_final, _ = reference(filled, torch.float32, scale)
    assert_golden(o, gold_o, "o", bench_o)
    if final is not None:
        assert final.dtype == torch.float32
        assert_golden(final, gold_final, "final_state", bench_final)


def test_step_grouped_values_k_not_v_fp32():
    check_step(make(2, 5, 2, 4, 16, 8))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
def test_step_16_bit_without_gates_packed(dtype):
    """g and beta None (no decay, beta 1), packed sequences of 1, 0 and 3 tokens with their states."""
    check_step(make(1, 4, 1, 2, 8, 12, cu=[0, 1, 1, 4], dtype=dtype), use_g=False, use_beta=False)


def test_step_decode_batch_decay_only_no_state():
    """One token per sequence (decoding), g given and beta None, no initial state (no final state)."""
    check_step(make(3, 1, 1, 1, 32, 16, state=False), use_beta=False)


def test_step_public_api():
    """``tileport.fused_recurrent_gated_delta_rule(..., backend="triton")`` with the state asked for."""
    check_step(make(2, 3, 2, 2, 16, 16, dtype=torch.bfloat16), public=True)


def test_prefill_then_decode_from_its_state():
    """The chunk kernels over 66 tokens, then the recurrent kernel for the 67th from their final state: the 67th
    token's output and the final state are those of the whole sequence's golden."""
    inp = make(1, 67, 1, 2, 16, 16)
    tokens = [inp[n] for n in NAMES[:5]]
    _, state = chunk.forward(*(x[:, :66] for x in tokens), inp["initial_state"], None, 0.25)
    o, final = step.forward(*(x[:, 66:] for x in tokens), state, None, 0.25)
    gold_o, gold_final, _ = reference(inp, torch.float64, 0.25)
    bench_o, bench_final, _ = reference(inp, torch.float32, 0.25)
    assert_golden(o, gold_o[:, 66:], "o", bench_o[:, 66:])
    assert_golden(final, gold_final, "final_state", bench_final)


def test_ascend_forms_under_the_interpreter(monkeypatch):
    """$TILEPORT_TRITON_ASCEND runs the A2 forms under the interpreter, against the same golden: K walked in blocks
    of 64 and V in blocks of 16 (K = 96 and V = 40: two K blocks, three V blocks), and the grid at the chip's
    vector cores (3 here, so that each program walks several tasks)."""
    monkeypatch.setenv(ascend.EMULATE, "ascend-a2")
    monkeypatch.setitem(ascend.CHIPS, "ascend-a2", dataclasses.replace(ascend.CHIPS["ascend-a2"], vector_cores=3))
    cpu = torch.device("cpu")
    assert chunk._blocks(96, 40, cpu) == (128, 64, 16) and _delta.programs(50, cpu) == (3,)
    check_chunk(make(1, 70, 1, 2, 96, 40, cu=[0, 3, 70]))
    check_step(make(2, 3, 1, 2, 96, 40))


def test_no_token_passes_the_states_through():
    """T = 0 (and packed sequences of no token): o is empty, the final state is the initial one, and
    dinitial_state the final state's gradient, through both operators."""
    q, v, g = torch.randn(2, 0, 1, 8), torch.randn(2, 0, 2, 8), torch.zeros(2, 0, 2)
    h0 = torch.randn(2, 2, 8, 8)
    for args in ((q, q, v, g, g, h0, None), (q[:1], q[:1], v[:1], g[:1], g[:1], h0, torch.tensor([0, 0, 0]))):
        for module in (chunk, step):
            o, final = module.forward(*args, 0.5)
            assert o.shape == args[2].shape and torch.equal(final, h0)
        grads = chunk.backward(*args, o, 2 * h0, 0.5)
        assert all(d.shape == x.shape for d, x in zip(grads, args)) and torch.equal(grads[5], 2 * h0)
