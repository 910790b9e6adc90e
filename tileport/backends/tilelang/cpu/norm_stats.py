"""Row statistics the RMS-type norms share on the CPU (the operators here, and any new norm): the
inverse RMS of a row in fp64 rounded once, the cancellation-free backward's fp64 statistics, and a weight
gradient's once-rounded term. Emitted into a kernel's body from its prim_func, as rowwise.py's helpers."""

# No `from __future__ import annotations`: it breaks T.prim_func annotations.

import tilelang.cpu.language as T
import torch

from .rowwise import VEC, D, row_sum_squares64, row_sums64, splat, square


def inv_rms(r, eps, x_io, x, row):
    """r[0] = rsqrt(mean(x^2) + eps) of ``row``, accumulated in fp64 and rounded once to fp32
    (``row_sum_squares64``: exact below 64 columns, within 3 * 2^-24 of the sum above). torch rounds each
    square, add, the mean, the sum with eps, the sqrt and the reciprocal in fp32; with ties these roundings
    decide the dual benchmark's ratios, so an rstd nearer the golden than torch's wins them for every D (at
    D = 1 the exact x^2 makes sqrt give |x| back, as torch's fp32 sqrt of round(x^2) does)."""
    T.buffer_store(r, rstd_of(row_sum_squares64(x_io, x, row), eps), [0])


def rstd_of(ss, eps):
    """rsqrt(ss / D + eps) in fp64 from a row's fp64 sum of squares ``ss``, rounded once to fp32."""
    return T.cast(T.float64(1.0) / T.sqrt(ss / T.cast(D, "float64") + T.cast(eps, "float64")), "float32")


# sin^2 of the angle between a row's x (u) and g below which its dx takes the exact form (tp_resid64). The fast
# form's error is k's fp64 rounding, 2^-53 |x k|; the exact form's is ss * g's, as large, but for rows whose
# products cancel exactly (D = 1, g = 2x), where it keeps the eps term and the fast form would keep only noise.
# Any small threshold catches those (their computed sin^2 is 0 or fp64 noise, about D / 32 * 2^-53); this one
# leaves every row with more than 2^-10 of g across x to the fast form.
NEAR_PARALLEL = 2.0**-20
STATS = 7  # fp64 slots of ``eps_stats``' c
# The relative distance from the fp64 rstd within which a given rstd is the forward's: inv_rms's rstd is within
# 2.5 * 2^-24 of it (row_sum_squares64's fp32 blocks, then one rounding); a user's other rstd is farther.
FORWARD_RSTD = 2.0**-22


def eps_stats(c, eps, rstd, rows, row, g_of, u_of=None, near=FORWARD_RSTD):
    """c = [ss, d, D * eps, rstd / (ss + D * eps), rstd, k, exact] of ``row`` (c: STATS fp64): ss = sum(u^2),
    d = sum(g * u) and sum(g^2) in one fp64 pass, g = g_of(the loaded values after x) and u = u_of(all of them)
    (default x) in fp32. rstd is 1 / sqrt(ss / D + eps) in fp64 where ``rstd`` is None or the given fp32 rstd is
    within ``near`` of that value, relative (what the forward saves: its error, up to 1.5e-7, would scale all of
    dx and dweight; ``near=None``: the value rounded, for a forward that saves the correctly rounded rstd of
    another u); any other given rstd is used as given. k and exact: ``choose_form``'s, for ``by_form``."""
    u = u_of or (lambda xv, *rest: xv)
    g = lambda *v: g_of(*v[1:])  # noqa: E731
    ss, d, gg = row_sums64([lambda *v: square(u(*v)), lambda *v: (g(*v), u(*v)), lambda *v: square(g(*v))], rows, row)
    T.buffer_store(c, ss, [0])
    T.buffer_store(c, d, [1])
    T.buffer_store(c, T.cast(D, "float64") * T.cast(eps, "float64"), [2])
    exact = T.float64(1.0) / T.sqrt(T.BufferLoad(c, [0]) / T.cast(D, "float64") + T.cast(eps, "float64"))
    if rstd is not None and near is None:
        exact = T.if_then_else(T.cast(exact, "float32") == rstd, exact, T.cast(rstd, "float64"))
    elif rstd is not None:
        given = T.cast(rstd, "float64")
        # the distance against exact * tolerance: TileLang prints fp64 literals with 7 digits, 1 + 2^-22 as 1
        tol = exact * T.float64(near)
        close = T.And(given - exact <= tol, exact - given <= tol)
        exact = T.if_then_else(close, exact, given)
    T.buffer_store(c, exact, [4])
    T.buffer_store(c, T.BufferLoad(c, [4]) / (T.BufferLoad(c, [0]) + T.BufferLoad(c, [2])), [3])
    choose_form(c, gg)


def choose_form(c, gg) -> None:
    """c[5] = k = d / (ss + eps'), c[6] = 1 where the row takes the exact form (x and g nearly parallel:
    ss * sum(g^2) - d^2 < NEAR_PARALLEL * ss * sum(g^2)), else 0; c[0:3] as ``eps_stats`` leaves them, gg = sum(g^2)."""
    ss, d, e = (T.BufferLoad(c, [i]) for i in range(3))
    T.buffer_store(c, d / (ss + e), [5])
    # ss * gg - d^2 < NEAR_PARALLEL * ss * gg, scaled by 1 / NEAR_PARALLEL (a power of two the C code prints exactly)
    parallel = (ss * gg - d * d) * T.float64(1.0 / NEAR_PARALLEL) < ss * gg
    T.buffer_store(c, T.if_then_else(parallel, T.float64(1.0), T.float64(0.0)), [6])


def by_form(c, body) -> None:
    """Emit ``body(resid)`` once per form of the row's dx, under one test of ``choose_form``'s flag per row;
    ``resid(g, u, out)`` gives 16 lanes of dx = rstd * (g - u * k) for a dx stored as ``out`` (an Io), rounded
    to fp32: the exact fp64 eps form (``tp_resid64``) where the flag is set, else g - u * k with k from the row's
    fp64 sums, in fp64 for an fp32 dx (``tp_resid_k64``), in fp32 pairs for a 16-bit one (``tp_resid_pair``,
    whose pairs are formed here, per row). Two loops and the pairs outside them: with a test per chunk, g++ 12
    left the test and the pairs' scalar arithmetic inside the loop."""
    pair = T.alloc_local((4,), "float32")  # k and rstd as fp32 pairs (high part, remainder)
    exact = lambda g, u, out: T.call_extern(VEC, "tp_resid64", g, u, *(T.BufferLoad(c, [i]) for i in range(4)))  # noqa: E731

    def fast(g, u, out):
        if out.dtype == torch.float32:
            return T.call_extern(VEC, "tp_resid_k64", g, u, T.BufferLoad(c, [5]), T.BufferLoad(c, [4]))
        return T.call_extern(VEC, "tp_resid_pair", g, u, *(splat(T.BufferLoad(pair, [i])) for i in range(4)))

    with T.If(T.BufferLoad(c, [6]) != T.float64(0.0)):
        with T.Then():
            body(exact)
        with T.Else():
            for i, slot in enumerate((5, 4)):
                T.buffer_store(pair, T.cast(T.BufferLoad(c, [slot]), "float32"), [2 * i])
                T.buffer_store(
                    pair,
                    T.cast(T.BufferLoad(c, [slot]) - T.cast(T.BufferLoad(pair, [2 * i]), "float64"), "float32"),
                    [2 * i + 1],
                )
            body(fast)


def dweight_term(g, xv, rstd_hi, rstd_lo):
    """dy * x * rstd of 16 lanes, rounded once (``tp_scaled_product`` in simd.h), rstd as an fp32 pair."""
    return T.call_extern(VEC, "tp_scaled_product", g, xv, splat(rstd_hi), splat(rstd_lo))


def rstd_pair(r, c) -> None:
    """r[0], r[1] = the rstd ``eps_stats`` chose (c[4], fp64) as an fp32 pair (high part, remainder)."""
    T.buffer_store(r, T.cast(c[4], "float32"), [0])
    T.buffer_store(r, T.cast(c[4] - T.cast(r[0], "float64"), "float32"), [1])
