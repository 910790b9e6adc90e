"""What gated DeltaNet's Triton kernels share: where a chunk's tokens are (the chunk table), the persistent grid, the
matrix product they all use, the in-chunk decays and the unit lower-triangular solve of the WY representation.

The chunk table: every sequence (B rows of T tokens, or the packed sequences ``cu_seqlens`` cuts from one row) cut
into chunks of ``C = 64`` tokens, chunk-major, each sequence's chunks consecutive. Row c of ``CHUNKS`` ([NCH, 8]
int32, 32 bytes a row: Ascend's aligned load) holds the batch row, the chunk's first token and its token count
(1..64); ``SEQS`` ([N + 1] int32) the first chunk of each sequence. A sequence of no token has no chunk. A kernel
addresses token t of a chunk as ``row * stride_b + (t0 + t) * stride_t``; rows past the count load as zeros
(k = v = q = 0, beta = 0, g = 0), which leave the state as it is, so every chunk is computed as a full one.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from .. import sequences
from .ascend import chip_of

C = 64  # tokens per chunk (fla's chunk_size)
SUB = 16  # the solve's diagonal blocks


@dataclass(frozen=True)
class Plan:
    """The chunks of a batch (see the module docstring): ``chunks`` [NCH, 8] and ``seqs`` [N + 1], on the
    inputs' device."""

    chunks: torch.Tensor
    seqs: torch.Tensor
    N: int
    NCH: int


def plan(B: int, T: int, cu_seqlens: torch.Tensor | None, device, states: torch.Tensor | None = None) -> Plan:
    """The chunk table of B sequences of T tokens, or of the packed sequences of ``cu_seqlens`` (B = 1); the
    sequences (and ``states``' N) checked as every backend checks them."""
    lengths = sequences.lengths(B, T, cu_seqlens, states)
    firsts = [0] * B if cu_seqlens is None else cu_seqlens[:-1].tolist()
    rows, seqs = [], [0]
    for n, (first, length) in enumerate(zip(firsts, lengths)):
        row = n if cu_seqlens is None else 0
        rows += [(row, first + s, min(C, length - s), 0, 0, 0, 0, 0) for s in range(0, length, C)]
        seqs.append(len(rows))
    table = torch.tensor(rows, dtype=torch.int32).reshape(-1, 8)
    return Plan(table.to(device), torch.tensor(seqs, dtype=torch.int32).to(device), len(lengths), len(rows))


def programs(tasks: int, device) -> tuple[int]:
    """The grid of a kernel walking ``tasks`` (``for task in range(pid, tasks, programs)``): one program a task on
    a GPU and the interpreter, the vector-core count on an Ascend chip (each program looping)."""
    chip = chip_of(device)
    return (max(1, min(tasks, chip.vector_cores) if chip is not None else tasks),)


def width(n: int) -> int:
    """A tile's width for n columns: a power of 2, at least 16 (tl.dot's smallest operand)."""
    return max(16, triton.next_power_of_2(max(n, 1)))


def inner_contiguous(x: torch.Tensor | None) -> torch.Tensor | None:
    """x with its last dimension at stride 1 (the kernels take the other strides as they are)."""
    return x if x is None or x.stride(-1) == 1 or x.shape[-1] <= 1 else x.contiguous()


@triton.jit
def mm(a, b):
    """a @ b in fp32 (IEEE products, no TF32). The left operand is passed as a copy: triton-ascend's dot may
    overwrite its left operand's buffer (fla's Ascend kernels reload or copy it too), and the kernels reuse theirs."""
    return tl.dot(a + 0.0, b, input_precision="ieee")


@triton.jit
def chunk_at(CHUNKS, c):
    """(batch row, first token, token count) of chunk c, the first two int64 for addresses."""
    row = CHUNKS + tl.cast(c, tl.int64) * 8
    return tl.cast(tl.load(row), tl.int64), tl.cast(tl.load(row + 1), tl.int64), tl.load(row + 2)


@triton.jit
def load_tokens(X, row, t0, count, sb, st, cols, D, BT: tl.constexpr):
    """The chunk's [BT, len(cols)] tile of a token tensor at X (already offset to its head), fp32, zeros past the
    chunk's count and the columns' D."""
    r = tl.arange(0, BT)
    m = (r < count)[:, None] & (cols < D)[None, :]
    return tl.load(X + row * sb + t0 * st + r[:, None] * st + cols[None, :], mask=m, other=0.0).to(tl.float32)


@triton.jit
def load_chunk(X, base, cols, D, BT: tl.constexpr):
    """A [BT, len(cols)] tile of a chunk buffer (rows of D fp32 from ``base``)."""
    r = tl.arange(0, BT)
    m = (r < BT)[:, None] & (cols < D)[None, :]
    return tl.load(X + base + r[:, None] * D + cols[None, :], mask=m, other=0.0)


@triton.jit
def store_chunk(X, base, cols, D, value, BT: tl.constexpr):
    r = tl.arange(0, BT)
    m = (r < BT)[:, None] & (cols < D)[None, :]
    tl.store(X + base + r[:, None] * D + cols[None, :], value, mask=m)


@triton.jit
def decays(gc, STRICT: tl.constexpr, BT: tl.constexpr):
    """exp(gc_r - gc_s) on the lower triangle (r > s with STRICT, else r >= s), 0 above it. The difference is
    masked before the exponential: above the diagonal it is -(the decays between) >= 0 and would overflow, and
    gc itself reaches -1280 in a chunk of g = -20 tokens, so only differences are exponentiated."""
    r = tl.arange(0, BT)
    if STRICT:
        low = r[:, None] > r[None, :]
    else:
        low = r[:, None] >= r[None, :]
    return tl.where(low, tl.exp(tl.where(low, gc[:, None] - gc[None, :], 0.0)), 0.0)


@triton.jit
def solve_unit_lower(a, BT: tl.constexpr, SB: tl.constexpr):
    """(I + a)^-1 of a strictly lower-triangular [BT, BT] a, BT = 4 SB. The diagonal SB x SB blocks by forward
    substitution, all four at once (step i sets row i of every block: e_r - a_r . X, its rows above final); then,
    with D that block-diagonal inverse and N = D a_off (a's blocks below the diagonal, so N^4 = 0),
    (I + a)^-1 = (I + N)^-1 D = (I - N)(I + N^2) D. fla merges 16 x 16 inverses by blocks likewise."""
    r = tl.arange(0, BT)
    same = (r[:, None] // SB) == (r[None, :] // SB)
    eye = tl.where(r[:, None] == r[None, :], 1.0, 0.0)
    diag = tl.where(same, a, 0.0)
    x = eye
    for i in range(1, SB):
        x = x - mm(tl.where((r % SB == i)[:, None], diag, 0.0), x)
    n = mm(x, tl.where(same, 0.0, a))
    t = mm(eye + mm(n, n), x)
    return t - mm(n, t)
