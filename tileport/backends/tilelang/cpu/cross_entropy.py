"""cross_entropy's row kernel (the contract of ``tileport.ops.cross_entropy``) as TileLang CPU kernels (C target):
one compiled kernel per (input dtype, target dtype, direction, softcap or not, label smoothing off / without /
with weight), serving every N and C; the other options (weight, z-loss, the fused gradient, ignore_index, the
values of eps and softcap) are runtime values.

A grid kernel over the N rows (``interface.py``: rows with any row stride, targets int32 or int64, optional
weight and gradient), rows cut into ranges among threads. Per row, 16 lanes at a time, 16-bit logits widened
in registers (never copied to fp32):
- pass 1, the row in blocks of ``BLOCK`` columns with an online max and sum: the block's max of x (z's, with a
  softcap: tanh is increasing), the running max M raised to it and the running sum S rescaled by exp(M_old -
  M_new), then S += the block's sum of exp(z - M) (in fp64 lanes, a fixed tree).
  With label smoothing the same loop sums w_c (M - z_c) and w_c (terms >= 0: no cancellation; raising M adds
  W_so_far * (M_new - M_old)). lse = M + log S; the loss is log S + (M - z_t) (torch's order: no cancellation
  of M at large logits) and the smoothing sum W log S + sum w_c (M - z_c), in fp64 per row.
- pass 2 (``grad`` given), while the row is in cache: G = s_c ((p_c A - B w_c) a + p_c 2 b zs lse), p_c =
  exp((z_c - M) - log S), A = (1 - eps) w_t + eps W / C, B = eps / C; the target's element is then rewritten in
  fp64 by the contract's formula (with p_t - 1: no cancellation). Each chunk is read before it is written, so
  ``grad`` may be ``input``.
``backward`` is pass 2 from the saved lse (M = lse, log S = 0), with a = dloss_r, b = dz_loss_r; with a softcap,
passes 1 and 2. Softcap: z = cap tanh(x / cap) and s = 1 - tanh^2 in fp64 lanes, the exp's argument rounded once
(``cross_entropy.h``). fp64 inputs are not served here.
Non-finite values as the contract (torch's logsumexp and composite): a term whose scale is 0 is absent (eps = 0,
zs = 0: no inf * 0), the running max starts at -FLT_MAX (a block of -inf adds exp(-inf) = 0), a nan max stays
(the row's results nan), a row holding +inf has lse = +inf.
"""

# No `from __future__ import annotations`: it breaks T.prim_func annotations.
from pathlib import Path

import tilelang.cpu.language as T
import torch

from ... import outputs
from .interface import GRID
from .rowwise import STORAGE, VEC, VL, Io, get, put, splat, vectors
from .runtime import CACHE, threads_for

PRELUDE = Path(__file__).with_name("cross_entropy.h").read_text()
BLOCK = 2048  # columns per block of pass 1: its chunks are read twice (max, then exp), from L1
NEG_MAX = -3.4028234663852886e38  # the running max starts here, not at -inf: exp(-inf - M) is 0, not nan
_INDEX = {torch.int32: "int32", torch.int64: "int64"}

N = T.dynamic("N")  # rows
C = T.dynamic("C")  # classes


def _rows(io: Io, name: str):
    return T.StridedTensor((N, C), (T.dynamic(f"{name}_s0", "int64"), 1), io.tl)


def _classes(io: Io):
    return T.StridedTensor((C,), (1,), io.tl)


def _per_row(dtype: str = "float32"):
    return T.StridedTensor((N,), (1,), dtype)


def _call(fn: str, *args) -> None:
    T.evaluate(T.call_extern("handle", fn, *args))


def _ref(buf, *index):
    return T.address_of(T.BufferLoad(buf, list(index)))


def _if(cond, then, otherwise=None) -> None:
    with T.If(cond):
        with T.Then():
            then()
        if otherwise is not None:
            with T.Else():
                otherwise()


def _set(buf, index, value) -> None:
    """buf[index] = value (outside a prim_func's own body, a buffer takes no item assignment)."""
    T.buffer_store(buf, value, [index])


def _f64(x):
    return T.cast(x, "float64")


def _exp64(x):
    return T.call_extern("float64", "exp", x)


class Row:
    """One row's scalars (TileLang locals), the tensors it reads (logits x, weight w), its index r and the softcap
    (``capped``: the variant has one; ``cap`` its runtime value). With a softcap the capped logits are fp64 (M in
    d[11], z_t in d[12]: ``cross_entropy.h``), without one the logits' own fp32 (m[0], m[3]). The weight is held
    as ``wio`` says (the logits' dtype, or fp32 beside 16-bit logits)."""

    def __init__(self, io: Io, x, w, r, cap, capped: bool, wio: Io | None = None):
        self.io, self.x, self.w, self.r, self.cap, self.capped = io, x, w, r, cap, capped
        self.wio = wio or io
        self.m = T.alloc_local((4,), "float32")  # [0] M, [1] log S (pass 2's shift), [2] a block's max, [3] z_t
        # S, sum w (M - z), W so far, log S, A, B, s_t, w_t, a, zt, p_t; capped: M, z_t, a block's max in fp64
        self.d = T.alloc_local((14,), "float64")
        self.k = T.alloc_local((2,), "int32")  # a block's whole chunks, its tail
        self.t = T.alloc_local((1,), "int64")

    def capped_value(self, value):
        """cap * tanh(value / cap) in fp64, through the lanes' own arithmetic."""
        return T.call_extern("float64", "tp_ce_cap64", value, self.cap)

    def max64(self):
        """The running max M in fp64."""
        return self.d[11] if self.capped else _f64(self.m[0])

    def target64(self):
        """The target's (capped) logit z_t in fp64."""
        return self.d[12] if self.capped else _f64(self.m[3])

    def element(self, buf, col):
        """buf[col] (a row of x, or the weight) as fp32."""
        index = [col] if len(buf.shape) == 1 else [self.r, col]
        io = self.wio if buf is self.w else self.io
        return T.call_extern("float32", f"tp_ce_get_{io.tag}", T.BufferLoad(buf, index))


def _masked(v, slot, tmp, n) -> int:
    """The slot holding v[slot] with the lanes from n on set to 0 (v[tmp], a tail chunk), or slot itself."""
    if n is None:
        return slot
    put(v, tmp, splat(T.float32(0)))
    _call("tp_keep_lanes", _ref(v, tmp), _ref(v, slot), n)
    return tmp


def online_max_sum(row: Row, capped: bool, smoothing: bool, weighted: bool) -> None:
    """Pass 1: d[0] = S, m[0] = M (lse = M + log S); with ``smoothing`` d[1] = sum_c w_c (M - z_c), d[2] = W.

    A block's sums are accumulated in fp64 lanes (two sets of 16, ``tp_dot64_*`` in simd.h), the smoothing's
    terms widened exactly, the exps two chunks at a time (below): summed in fp32 lanes, 8070 near-equal exps of
    a softcapped row lost 4 ulps of lse to the additions' coherent roundings, where torch's cascade sum lost
    none."""
    io, x, r, m, d, k = row.io, row.x, row.r, row.m, row.d, row.k
    v = vectors(20)
    MX, L, Z, EV, SV, WL, TMP, E, S, W = 0, 2, 3, 4, 5, 6, 7, 8, 12, 16  # E, S, W: fp64 sums of 4 slots each
    _set(m, 0, T.float32(NEG_MAX))
    _set(d, 11, T.float64(NEG_MAX))
    for i in range(3):
        _set(d, i, T.float64(0))
    with T.serial(T.truncdiv(C - 1, BLOCK) + 1) as b:
        c0 = b * BLOCK
        _set(k, 0, T.truncdiv(T.min(BLOCK, C - c0), VL))
        _set(k, 1, T.truncmod(T.min(BLOCK, C - c0), VL))
        # the block's max of x: two chains of lanes, the tail's missing lanes at -inf
        for u in range(2):
            put(v, MX + u, splat(T.float32(-float("inf"))))

        def to_max(col, u, n=None):
            io.load(x, r, col, v, L, n)
            if n is not None:
                put(v, TMP, splat(T.float32(-float("inf"))))
                _call("tp_keep_lanes", _ref(v, TMP), _ref(v, L), n)
                put(v, L, get(v, TMP))
            put(v, MX + u, T.call_extern(VEC, "tp_max", get(v, MX + u), get(v, L)))

        with T.serial(T.truncdiv(k[0], 2)) as j:
            for u in range(2):
                to_max(c0 + (2 * j + u) * VL, u)
        _if(T.truncmod(k[0], 2) == 1, lambda: to_max(c0 + (k[0] - 1) * VL, 0))
        _if(k[1] > 0, lambda: to_max(c0 + k[0] * VL, 1, k[1]))
        _set(m, 2, T.call_extern("float32", "tp_hmax", T.call_extern(VEC, "tp_max", get(v, MX), get(v, MX + 1))))
        if capped:  # the block's max capped, in fp64 (tanh is increasing)
            _set(d, 13, row.capped_value(m[2]))
        new = d[13] if capped else _f64(m[2])

        def raise_max():
            _set(d, 0, d[0] * _exp64(row.max64() - new))
            if smoothing:
                _set(d, 1, d[1] + d[2] * (new - row.max64()))
            _set(m, 0, T.cast(new, "float32"))
            if capped:
                _set(d, 11, new)

        _if(T.Or(new > row.max64(), new != new), raise_max)  # noqa: PLR0124 (a TileLang nan test: a nan max stays, S, lse and the loss are nan)
        # the block's sums against the running max, in fp64 lanes
        for acc in (E, S, W) if smoothing else (E,):
            _call("tp_dot64_zero", _ref(v, acc))

        def to_sums(col, u, n=None, first_of_pair=None):
            """The chunk's terms; its exp is added to v[EV] (first_of_pair False), put there (True), or
            added to set 1 of the exp sums on its own (None: the odd chunk and the tail)."""
            io.load(x, r, col, v, L, n)
            if capped:  # exp(z - M) in fp64 from the fp64 capped logits, into the sums; z - M rounded once
                lanes = T.int32(VL) if n is None else n
                put(v, Z, T.call_extern(VEC, "tp_ce_exp_add64", _ref(v, E + 2 * u), get(v, L), row.cap, d[11], lanes))
                shifted = get(v, Z)
            else:
                shifted = get(v, L) - splat(m[0])
                e = T.call_extern(VEC, "tp_exp", shifted)
                if first_of_pair is None:
                    put(v, EV, e)
                    _call("tp_ce_add64", _ref(v, E + 2), _ref(v, _masked(v, EV, TMP, n)))
                else:
                    put(v, EV, e if first_of_pair else get(v, EV) + e)
            if smoothing:
                put(v, SV, -shifted)
                if weighted:  # a tail's missing weights load as 0: their products and sum are 0
                    row.wio.load(row.w, r, col, v, WL, n)
                    _call("tp_dot64_add", _ref(v, S + 2 * u), _ref(v, WL), _ref(v, _masked(v, SV, TMP, n)))
                    _call("tp_ce_add64", _ref(v, W + 2 * u), _ref(v, WL))
                else:
                    _call("tp_ce_add64", _ref(v, S + 2 * u), _ref(v, _masked(v, SV, TMP, n)))

        # two chunks' exps (each <= 1; uncapped) added in fp32, then widened: one rounding of a sum <= 2 per 32 columns
        # (at most 2^-24 relative, so below lse's resolution even if every rounding goes one way), half the
        # widenings of adding each chunk's exps to the fp64 sums
        with T.serial(T.truncdiv(k[0], 2)) as j:
            for u in range(2):
                to_sums(c0 + (2 * j + u) * VL, u, first_of_pair=u == 0)
            if not capped:
                _call("tp_ce_add64", _ref(v, E), _ref(v, EV))
        _if(T.truncmod(k[0], 2) == 1, lambda: to_sums(c0 + (k[0] - 1) * VL, 0))
        _if(k[1] > 0, lambda: to_sums(c0 + k[0] * VL, 1, k[1]))

        def total(acc):
            return T.call_extern("float64", "tp_dot64_total", _ref(v, acc))

        _set(d, 0, d[0] + total(E))
        if smoothing:
            _set(d, 1, d[1] + total(S))
            _set(d, 2, d[2] + (total(W) if weighted else _f64(T.min(BLOCK, C - c0))))


def grad_row(row: Row, grad, capped: bool, weighted: bool, shift) -> None:
    """Pass 2: grad[r, c] = s_c ((p_c d[4] - d[5] w_c) d[8] + p_c d[9]) (``coefficients``), p_c = exp((z_c - M) -
    log S): M and log S in fp32 (m[0], m[1]), or with a softcap M in fp64 and log S the fp64 ``shift``."""
    io, x, r, m, d = row.io, row.x, row.r, row.m, row.d
    v = vectors(6)
    L, Z, SL, WL, G = 0, 1, 2, 3, 4
    A, B, a, zt = (splat(T.cast(d[k], "float32")) for k in (4, 5, 8, 9))

    def step(col, n=None):
        io.load(x, r, col, v, L, n)
        if capped:
            _call("tp_ce_shifted_slope", _ref(v, L), row.cap, d[11], shift, _ref(v, Z), _ref(v, SL))
            p = T.call_extern(VEC, "tp_exp", get(v, Z))
        else:
            p = T.call_extern(VEC, "tp_exp", (get(v, L) - splat(m[0])) - splat(m[1]))
        if weighted:
            row.wio.load(row.w, r, col, v, WL, n)
            g = (p * A - B * get(v, WL)) * a + p * zt
        else:
            g = (p * A - B) * a + p * zt
        put(v, G, g * get(v, SL) if capped else g)
        io.store(v, G, grad, r, col, n)

    with T.serial(T.truncdiv(C, VL)) as j:
        step(j * VL)
    _if(T.truncmod(C, VL) > 0, lambda: step(C - T.truncmod(C, VL), T.truncmod(C, VL)))


def zero_row(row: Row, grad) -> None:
    """grad[r, :] = 0 (an ignored row), packed stores."""
    v = vectors(1)
    put(v, 0, T.call_extern(VEC, "tp_ce_zeros"))
    with T.serial(T.truncdiv(C, VL)) as j:
        row.io.store(v, 0, grad, row.r, j * VL)
    _if(T.truncmod(C, VL) > 0, lambda: row.io.store(v, 0, grad, row.r, C - T.truncmod(C, VL), T.truncmod(C, VL)))


def target_terms(row: Row, has_weight, capped: bool):
    """For a row whose target is not ignored: m[3] = z_t, d[6] = s_t, d[7] = w_t (returned). A target outside
    [0, C) (the interface rules it out) reads nothing and gives nan."""
    t, m, d = row.t, row.m, row.d

    def inside():
        _set(m, 3, row.element(row.x, T.cast(t[0], "int32")))
        _set(d, 7, T.float64(1))
        _if(has_weight != 0, lambda: T.buffer_store(d, _f64(row.element(row.w, T.cast(t[0], "int32"))), [7]))
        _set(d, 6, T.float64(1))

        def cap():  # the target's slope in fp64 (one element per row: the largest gradient's accuracy)
            _set(d, 6, T.call_extern("float64", "tp_ce_target_slope", m[3], row.cap))
            _set(d, 12, row.capped_value(m[3]))
            _set(m, 3, T.cast(d[12], "float32"))

        if capped:
            cap()

    def outside():
        _set(m, 3, T.cast(T.call_extern("float64", "tp_ce_nan"), "float32"))
        _set(d, 12, T.call_extern("float64", "tp_ce_nan"))
        _set(d, 6, T.call_extern("float64", "tp_ce_nan"))
        _set(d, 7, d[6])

    _if(T.And(t[0] >= 0, t[0] < T.cast(C, "int64")), inside, outside)
    return d[7]


def _smoothing(eps, value):
    """``value`` where label smoothing is on, else 0: the term is absent then, not 0 times an inf or nan
    (of a scale, a weight), as in torch's composite."""
    return T.if_then_else(eps != T.float64(0), value, T.float64(0))


def z_term(zs, b, lse):
    """2 b zs lse, the z-loss's share of A; absent (0, whatever b is) without a z-loss."""
    return T.if_then_else(zs != T.float64(0), T.float64(2) * b * zs * lse, T.float64(0))


def _ab(wt, W, eps):
    """(A, B) = ((1 - eps) w_t + eps W / C, eps / C): the gradient's bracket is p_c A - B w_c (less w_t at t)."""
    cinv = T.float64(1) / _f64(C)
    return (T.float64(1) - eps) * wt + _smoothing(eps, eps * W * cinv), _smoothing(eps, eps * cinv)


def coefficients(row: Row, wt, W, eps, a, zterm) -> None:
    """Pass 2's d[4], d[5], d[8], d[9]: the gradient is s_c ((p_c d[4] - d[5] w_c) d[8] + p_c d[9]). Where the row's
    scales are finite: (A a + zt, B a, 1, 0), one FMA per element and one rounding of the bracket (the bracket
    first, then times a, then plus p zt rounded thrice, and lost to torch's order where its terms cancel); else
    (A, B, a, zt), torch's order, which gives its infinities (a = inf: +-inf, not inf - inf)."""
    d = row.d
    A, B = _ab(wt, W, eps)
    _set(d, 4, A)
    _set(d, 5, B)
    fused = T.call_extern("int32", "tp_ce_finite2", d[4] * a + zterm, d[5] * a) != 0
    _set(d, 8, T.if_then_else(fused, T.float64(1), a))
    _set(d, 9, T.if_then_else(fused, T.float64(0), zterm))
    _set(d, 4, T.if_then_else(fused, d[4] * a + zterm, d[4]))
    _set(d, 5, T.if_then_else(fused, d[5] * a, d[5]))


def fix_target(row: Row, grad, shift, wt, W, eps, a, zterm, lanes_p: bool = False) -> None:
    """grad[r, t] rewritten (pass 2 wrote it without the target's term) as the contract's formula in fp64,
    s_t (a ((1 - eps) w_t (p_t - 1) + eps / C (W p_t - w_t)) + 2 b zs lse p_t), p_t = exp((z_t - M) - shift):
    p_t - 1 formed first (no cancellation of A against the target's term). Where torch's order (p_t A - the
    target's term) is not finite (an infinite weight or scale), that value instead: torch's inf - inf is nan.
    ``lanes_p`` (the backward, M = the saved fp32 lse): p_t is the lanes' fp32 exp of the same argument. The lse's
    rounding is in every p there; the lanes' exp rounds it away where torch's does (two equal logits: p = 1/2
    exactly), an fp64 p_t alone would show it (1/2 (1 - 2e-9) of fp32's ln 2, a gradient where the golden's is 0)."""
    t, m, d = row.t, row.m, row.d

    def write():
        arg = (row.target64() - row.max64()) - shift
        if not lanes_p:
            p_t = _exp64(arg)
        elif row.capped:
            p_t = T.call_extern("float64", "tp_ce_exp1", T.cast(arg, "float32"))
        else:
            p_t = T.call_extern("float64", "tp_ce_exp1", (m[3] - m[0]) - m[1])
        _set(d, 10, p_t)  # once (the terms below read it 4 times)
        p = d[10]
        ce = (T.float64(1) - eps) * wt * (p - T.float64(1)) + _smoothing(eps, eps / _f64(C) * (W * p - wt))
        A, B = _ab(wt, W, eps)
        naive = (p * A - B * wt - (T.float64(1) - eps) * wt) * a + zterm * p
        g = T.call_extern("float64", "tp_ce_finite_or", a * ce + zterm * p, naive)
        _call(f"tp_ce_put_{row.io.tag}", _ref(grad, row.r, T.cast(t[0], "int32")), g * d[6])

    _if(T.And(t[0] >= 0, t[0] < T.cast(C, "int64")), write)


def forward_row(
    row: Row,
    target,
    grad,
    loss,
    z_loss,
    lse,
    ignore_index,
    eps,
    zs,
    a,
    b,
    has_weight,
    has_grad,
    capped: bool,
    smoothing: str,
):
    """The fused forward of one row: pass 1, the row's loss, z-loss and lse, and pass 2 where grad is given."""
    m, d, t, r = row.m, row.d, row.t, row.r
    _set(t, 0, T.cast(target[r], "int64"))
    online_max_sum(row, capped, smoothing != "none", smoothing == "weighted")
    # a row holding +inf (and no nan): S is nan (inf - inf); lse = +inf as torch's logsumexp gives, the loss
    # inf - z_t, and pass 2's p = exp(z - inf): 0, nan at the +inf logits
    _if(m[0] == T.float32(float("inf")), lambda: _set(d, 0, T.float64(1)))
    _set(d, 3, T.call_extern("float64", "log", d[0]))
    _set(m, 1, T.cast(d[3], "float32"))
    _set(lse, r, T.cast(row.max64() + d[3], "float32"))

    def ignored():
        _set(loss, r, T.cast(0, loss.dtype))
        _set(z_loss, r, T.cast(0, z_loss.dtype))
        _if(has_grad != 0, lambda: zero_row(row, grad))

    def counted():
        wt = target_terms(row, has_weight, capped)
        lse64 = row.max64() + d[3]
        nll = d[3] + (row.max64() - row.target64())  # log S + (M - z_t): M cancels exactly
        W = T.if_then_else(has_weight != 0, d[2], _f64(C))
        ce = (T.float64(1) - eps) * wt * nll
        if smoothing != "none":
            ce = ce + eps / _f64(C) * (W * d[3] + d[1])
        _set(loss, r, T.cast(ce, loss.dtype))
        _set(z_loss, r, T.cast(T.if_then_else(zs != T.float64(0), zs * lse64 * lse64, T.float64(0)), z_loss.dtype))

        def fused():
            zterm = z_term(zs, b, lse64)
            coefficients(row, wt, W, eps, a, zterm)
            grad_row(row, grad, capped, smoothing == "weighted", d[3])
            fix_target(row, grad, d[3], wt, W, eps, a, zterm)

        _if(has_grad != 0, fused)

    _if(t[0] == ignore_index, ignored, counted)


def backward_row(
    row: Row,
    target,
    dloss,
    dz_loss,
    lse,
    dinput,
    ignore_index,
    eps,
    zs,
    weight_sum,
    has_dz_loss,
    has_weight,
    capped: bool,
    weighted: bool,
):
    """One row's gradient from the saved lse: pass 2 with M = lse, log S = 0. With a softcap, pass 1 again
    instead: the capped logits are fp64 and the saved lse fp32, whose rounding (up to half its ulp, about 1e-7
    at lse 4) every p would carry (a single class's p = 1 would not be 1)."""
    m, t, r, d = row.m, row.t, row.r, row.d
    _set(t, 0, T.cast(target[r], "int64"))
    if capped:
        online_max_sum(row, True, False, False)
        _set(d, 3, T.call_extern("float64", "log", d[0]))
        shift = d[3]
    else:
        _set(m, 0, lse[r])
        _set(m, 1, T.float32(0))
        shift = T.float64(0)

    def counted():
        wt = target_terms(row, has_weight, capped)
        b = T.if_then_else(has_dz_loss != 0, _f64(dz_loss[r]), T.float64(0))
        W = T.if_then_else(has_weight != 0, weight_sum, _f64(C))
        zterm = z_term(zs, b, _f64(lse[r]))
        coefficients(row, wt, W, eps, _f64(dloss[r]), zterm)
        grad_row(row, dinput, capped, weighted, shift)
        fix_target(row, dinput, shift, wt, W, eps, _f64(dloss[r]), zterm, lanes_p=not capped)

    _if(t[0] == ignore_index, lambda: zero_row(row, dinput), counted)


SMOOTHING = ("none", "uniform", "weighted")  # a forward's label smoothing: off, without weight, with weight


def build_forward(
    dtype: torch.dtype,
    target: str = "int64",
    capped: bool = False,
    smoothing: str = "none",
    rows: str = "float32",
    weight: torch.dtype | None = None,
):
    """(loss, z_loss, lse) per row and, with grad, the fused gradient (module docstring); loss and z_loss in
    ``rows`` (float64: unrounded, for a caller that sums them); the weight in ``weight`` (None: the logits'
    dtype; float32 beside 16-bit logits, read as it is). The loops are built for
    one variant: ``capped`` (a softcap), ``smoothing`` (one of SMOOTHING); one kernel holding every variant's
    loops grew past g++'s inlining budget, which then left the exp and the softcap as calls in the loops."""
    if smoothing not in SMOOTHING:
        raise ValueError(f"smoothing is one of {SMOOTHING}, not {smoothing!r}")
    X = Io(dtype)
    WI = X if weight is None else Io(weight)

    @T.prim_func
    def cross_entropy_fwd(
        input: _rows(X, "input"),
        target: _per_row(target),
        weight: _classes(WI),
        grad: _rows(X, "grad"),
        loss: _per_row(rows),
        z_loss: _per_row(rows),
        lse: _per_row(),
        ignore_index: T.int64,
        label_smoothing: T.float64,
        lse_square_scale: T.float64,
        softcap: T.float32,
        scale_loss: T.float64,
        scale_z_loss: T.float64,
        has_weight: T.int32,
        has_grad: T.int32,
        first: T.int64,
        count: T.int64,
    ):
        T.func_attr({GRID: ["N"]})
        with T.Kernel(count, prelude=PRELUDE) as i:
            forward_row(
                Row(X, input, weight, first + i, softcap, capped, WI),
                target,
                grad,
                loss,
                z_loss,
                lse,
                ignore_index,
                label_smoothing,
                lse_square_scale,
                scale_loss,
                scale_z_loss,
                has_weight,
                has_grad,
                capped,
                smoothing,
            )

    return cross_entropy_fwd


def build_backward(
    dtype: torch.dtype,
    target: str = "int64",
    capped: bool = False,
    weighted: bool = False,
    weight: torch.dtype | None = None,
):
    """dinput = dloss_r dloss_r/dx + dz_loss_r dz_loss_r/dx from input and the saved lse (module docstring), for one
    variant: ``capped`` (a softcap), ``weighted`` (label smoothing with a weight: pass 2 reads it); the weight in
    ``weight`` (as ``build_forward``)."""
    X = Io(dtype)
    WI = X if weight is None else Io(weight)

    @T.prim_func
    def cross_entropy_bwd(
        dloss: _per_row(),
        dz_loss: _per_row(),
        input: _rows(X, "input"),
        target: _per_row(target),
        weight: _classes(WI),
        lse: _per_row(),
        dinput: _rows(X, "dinput"),
        ignore_index: T.int64,
        label_smoothing: T.float64,
        lse_square_scale: T.float64,
        softcap: T.float32,
        weight_sum: T.float64,
        has_dz_loss: T.int32,
        has_weight: T.int32,
        first: T.int64,
        count: T.int64,
    ):
        T.func_attr({GRID: ["N"]})
        with T.Kernel(count, prelude=PRELUDE) as i:
            backward_row(
                Row(X, input, weight, first + i, softcap, capped, WI),
                target,
                dloss,
                dz_loss,
                lse,
                dinput,
                ignore_index,
                label_smoothing,
                lse_square_scale,
                weight_sum,
                has_dz_loss,
                has_weight,
                capped,
                weighted,
            )

    return cross_entropy_bwd


# The packed-SIMD check of tests/backends/test_cpu_simd.py reads every backward jump as a loop; g++ places parts of
# this kernel's row epilogue out of line, jumping back, which it reads as scalar loops. So
# tests/backends/test_tilelang_cross_entropy.py checks every variant's disassembly itself (as rope's test does).
PACKED_CHECKS = ()


def _target(target: torch.Tensor) -> torch.Tensor:
    return target if target.is_contiguous() else target.contiguous()


def _weight_dtype(input: torch.Tensor, weight) -> torch.dtype | None:
    """The weight's dtype where the kernel holds it apart from the logits': float32 beside 16-bit logits (read as
    it is: Liger-Kernel's users pass an fp32 weight with bf16 logits); None where it is the logits' (or absent)."""
    if weight is None or weight.dtype == input.dtype:
        return None
    if weight.dtype != torch.float32:  # fp16 and bf16 share a storage type in the kernel: the other would be misread
        raise TypeError(f"cross_entropy: weight must have input's dtype {input.dtype} or float32, not {weight.dtype}")
    return weight.dtype


def _kernel(name: str, builder, variant: tuple, input: torch.Tensor, target: torch.Tensor, *same_dtype):
    """The compiled kernel for these tensors; a dtype the kernels do not take is refused by name (fp16 and bf16
    share a storage type in the kernel, so a gradient of the other one would be misread)."""
    for other in same_dtype:
        if other is not None and other.dtype != input.dtype:
            raise TypeError(f"cross_entropy: grad must have input's dtype {input.dtype}, not {other.dtype}")
    if input.dtype not in STORAGE:
        raise TypeError(
            f"cross_entropy: the TileLang CPU kernels take float32, float16 or bfloat16 logits, not {input.dtype}"
        )
    if target.dtype not in _INDEX:
        raise TypeError(f"cross_entropy: target must be int64 or int32, not {target.dtype}")
    return CACHE.kernel(name, builder, input.dtype, _INDEX[target.dtype], *variant)


def forward(
    input,
    target,
    weight,
    ignore_index: int,
    label_smoothing: float,
    lse_square_scale: float,
    softcap: float,
    grad=None,
    scales=(1.0, 1.0),
    wide=False,
):
    """(loss, z_loss, lse), each ``[N]`` fp32 (loss and z_loss fp64, unrounded, where ``wide``); with ``grad``
    ([N, C], may be ``input`` itself) the gradient ``a * dloss + b * dz_loss`` (``scales = (a, b)``) written into
    it in the same pass."""
    n, c = input.shape
    rows = torch.float64 if wide else torch.float32
    loss, z_loss = (outputs.empty((n,), rows, input.device) for _ in range(2))
    lse = outputs.empty((n,), torch.float32, input.device)
    cap = float(softcap) if softcap else 0.0
    a, b = scales
    smoothing = "none" if not label_smoothing else "uniform" if weight is None else "weighted"
    variant = (bool(softcap), smoothing, "float64" if wide else "float32", _weight_dtype(input, weight))
    _kernel("cross_entropy_fwd", build_forward, variant, input, target, grad)(
        threads_for(n * c),
        input=input,
        target=_target(target),
        weight=weight,
        grad=grad,
        loss=loss,
        z_loss=z_loss,
        lse=lse,
        ignore_index=int(ignore_index),
        label_smoothing=float(label_smoothing),
        lse_square_scale=float(lse_square_scale),
        softcap=cap,
        scale_loss=float(a),
        scale_z_loss=float(b),
    )
    return loss, z_loss, lse


def backward(
    dloss,
    dz_loss,
    input,
    target,
    weight,
    lse,
    ignore_index: int,
    label_smoothing: float,
    lse_square_scale: float,
    softcap: float,
):
    """dinput ``[N, C]`` in input's dtype from input and the forward's lse."""
    n, c = input.shape
    dinput = outputs.empty((n, c), input.dtype, input.device)
    cap = float(softcap) if softcap else 0.0
    weight_sum = 0.0 if weight is None or not label_smoothing else float(weight.sum(dtype=torch.float64))
    variant = (bool(softcap), bool(label_smoothing) and weight is not None, _weight_dtype(input, weight))
    _kernel("cross_entropy_bwd", build_backward, variant, input, target)(
        threads_for(n * c),
        dloss=dloss.contiguous(),
        dz_loss=None if dz_loss is None or not lse_square_scale else dz_loss.contiguous(),  # no z-loss: never read
        input=input,
        target=_target(target),
        weight=weight,
        lse=lse.contiguous(),
        dinput=dinput,
        ignore_index=int(ignore_index),
        label_smoothing=float(label_smoothing),
        lse_square_scale=float(lse_square_scale),
        softcap=cap,
        weight_sum=weight_sum,
    )
    return dinput
