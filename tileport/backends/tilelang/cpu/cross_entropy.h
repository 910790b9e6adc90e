// tileport CPU prelude of the cross-entropy kernels, after simd.h (its tp_v16, tp_exp_n and dtype bridges).
//
// Gemma 2's softcap z = cap * tanh(x / cap) and its slope s = dz/dx = 1 - tanh^2, in fp64 lanes: the capped logits
// are never rounded to fp32, only the exp's argument (z - M) - shift is (once). In fp32, z's rounding (half an ulp
// of cap) and tanh's own error were the softmax's error: at cap 30 about 1e-6 in every p, and in a row of logits
// saturated at one side (all z within an ulp of -cap) the differences z_c - M, true at 1e-8, came out 0 or an ulp.
// u = x / cap with fp64's 1 / cap. tanh(a), a = |u| < 1: a + a^3 Q(a^2), Q of degree 7 fitted for tanh's relative
// error (about 4e-10; the coefficients in fp32), evaluated in fp64; beyond, 1 - q with q = 2 / (exp(2a) + 1) and
// exp in fp64 lanes (tp_ce_exp64; fp32's exp, within 2 ulp, made t's error q * 2^-22 near a = 1), computed only
// for a chunk with such a lane (a row's chunks within the cap skip it). The slope: (1 - t)(1 + t) below 1,
// q (2 - q) beyond (no cancellation), and 0 where q <= 2^-25, where fp32's t rounds to 1 (|u| > 9.01): torch's
// fp32 slope is 0 there, and the golden's own 1 - tanh^2 rounds to 0 further out (an exact tiny slope lost to
// both under a metric relative to |g| + 1e-7). The cost against the fp32 lanes: CHANGELOG.md, 2026-12-06.
// Signs by bit operations; nan stays nan, +-inf gives +-cap and slope 0.

typedef long long tp_nl __attribute__((vector_size(64)));

// exp(h) of 8 fp64 lanes for 0 <= h <= 88 (nan stays nan): h = n ln2 + r (ln2 in two parts, the first with 32
// significant bits so n * it is exact), |r| <= 0.35, e^r by its Taylor polynomial of degree 11 (truncation below
// 1e-15 relative), times 2^n. A degree-7 one (6e-9) left z's errors of one sign, summed into a row's lse: where
// the lse cancels (all z near -cap, lse = -cap + log C, small) they were 5x the fp32 composite's.
TP_INLINE tp_nd tp_ce_exp64(tp_nd h) {
  const tp_nd n = (h * 1.4426950408889634 + 6755399441055744.0) - 6755399441055744.0;
  const tp_nd r = (h - n * 6.93147180369123816490e-01) - n * 1.90821492927058770002e-10;
  tp_nd p = (tp_nd){} + 1.0 / 39916800.0;
  p = tp_fma_nd(p, r, (tp_nd){} + 1.0 / 3628800.0);
  p = tp_fma_nd(p, r, (tp_nd){} + 1.0 / 362880.0);
  p = tp_fma_nd(p, r, (tp_nd){} + 1.0 / 40320.0);
  p = tp_fma_nd(p, r, (tp_nd){} + 1.0 / 5040.0);
  p = tp_fma_nd(p, r, (tp_nd){} + 1.0 / 720.0);
  p = tp_fma_nd(p, r, (tp_nd){} + 1.0 / 120.0);
  p = tp_fma_nd(p, r, (tp_nd){} + 1.0 / 24.0);
  p = tp_fma_nd(p, r, (tp_nd){} + 1.0 / 6.0);
  p = tp_fma_nd(p, r, (tp_nd){} + 0.5);
  p = tp_fma_nd(p, r, (tp_nd){} + 1.0);
  p = tp_fma_nd(p, r, (tp_nd){} + 1.0);
  const tp_nl k = __builtin_convertvector(n, tp_nl);
  const tp_nd e = p * (tp_nd)((k + 1023) << 52);
  return h == h ? e : h;
}

// 2 / d of 8 fp64 lanes, d >= 2 (or inf, nan): AVX-512's 14-bit reciprocal and two Newton steps (about 2^-52
// relative), not vdivpd (two per 16 lanes, in both passes).
TP_INLINE tp_nd tp_ce_two_over(tp_nd d) {
#if defined(__AVX512F__)
  tp_nd r = (tp_nd)_mm512_rcp14_pd((__m512d)d);
  r = r * tp_fma_nd(-d, r, (tp_nd){} + 2.0);
  r = r * tp_fma_nd(-d, r, (tp_nd){} + 2.0);
  return r + r;
#else
  return 2.0 / d;
#endif
}

// Whether any lane of a comparison's mask is set.
TP_INLINE bool tp_ce_any(tp_nl m) {
#if defined(__AVX512F__)
  return _mm512_test_epi64_mask((__m512i)m, (__m512i)m) != 0;
#else
  long long o = 0;
  for (int i = 0; i < 8; ++i) o |= m[i];
  return o != 0;
#endif
}

TP_INLINE void tp_ce_tanh64(const tp_v16* x, double inv, tp_nd t[2], tp_nd s[2]) {
  tp_nd u[2];
  tp_widen16(x, &u[0], &u[1]);
  for (int i = 0; i < 2; ++i) {
    u[i] = u[i] * inv;
    const tp_nd a = (tp_nd)((tp_nl)u[i] & 0x7FFFFFFFFFFFFFFFLL);
    tp_nd h = a + a;
    h = h < 88.0 ? h : (h == h ? (tp_nd){} + 88.0 : h);  // q > 0 (and t < 1 in fp64) beyond: the slope rule below
    const tp_nl big = a >= 1.0;
    // the exp form only where a lane needs it (softcapped logits mostly lie within cap: a row's chunks skip it)
    const tp_nd q = tp_ce_any(big) ? tp_ce_two_over(tp_ce_exp64(h) + 1.0) : (tp_nd){};
    const tp_nd z = a * a;
    tp_nd p = 1.214708027e-04f * z - 8.411375456e-04f;
    p = tp_fma_nd(p, z, (tp_nd){} + 3.078594804e-03f);
    p = tp_fma_nd(p, z, (tp_nd){} - 8.595115505e-03f);
    p = tp_fma_nd(p, z, (tp_nd){} + 2.178473026e-02f);
    p = tp_fma_nd(p, z, (tp_nd){} - 5.395310000e-02f);
    p = tp_fma_nd(p, z, (tp_nd){} + 1.333319992e-01f);
    p = tp_fma_nd(p, z, (tp_nd){} - 3.333332837e-01f);
    p = tp_fma_nd(p * z, a, a);
    const tp_nd ta = big ? 1.0 - q : p;
    t[i] = (tp_nd)((tp_nl)ta | ((tp_nl)u[i] & (tp_nl){} + (long long)0x8000000000000000ULL));
    const tp_nd tail = q > 0x1p-25 ? q * (2.0 - q) : (tp_nd){};
    s[i] = big ? tail : (1.0 - ta) * (1.0 + ta);
  }
}

#if defined(__AVX512F__)
#define TP_CE_OPAQUE(r) __asm__("" : "+v"(r))
#elif defined(__x86_64__) || defined(__i386__)  // AVX2: the 8 fp64 lanes (64 bytes) fit no register: in memory
#define TP_CE_OPAQUE(r) __asm__("" : "+m"(r))
#elif defined(__aarch64__)
#define TP_CE_OPAQUE(r) __asm__("" : "+w"(r))
#else
#define TP_CE_OPAQUE(r) __asm__("" : "+m"(r))
#endif

// z = cap * t, rounded (held opaque: with -ffp-contract=fast g++ fused cap * t - M into one FMA, so z - M was
// the product's rounding error, not 0, where z is the max: a single class's p was not 1).
TP_INLINE tp_nd tp_ce_z(float cap, tp_nd t) {
  tp_nd z = (double)cap * t;
  TP_CE_OPAQUE(z);
  return z;
}

// exp(h) of 8 fp64 lanes for h <= 0 (tp_ce_exp64's reduction holds down to -708; below, 0: under 1e-307 of the
// row's largest term, 1).
TP_INLINE tp_nd tp_ce_exp64_le0(tp_nd h) {
  const tp_nd lo = (tp_nd){} - 708.0;
  const tp_nd e = tp_ce_exp64(h < lo ? lo : h);
  return h < lo ? (tp_nd){} : e;
}

// acc (one set of fp64 sums) += exp(z - M) of the 16 lanes of x, lanes from n on left out, each term in fp64; the
// return: z - M rounded once to fp32 (the smoothing's term). In fp32 the exps of a row saturated at -cap (every
// z - M within 1e-6 of 0, every exp within an ulp of 1) rounded alike, and their sum's error was lse's (small
// there: -cap + log C), 2.6x the fp32 composite's (cross_entropy's L1 case 8345).
TP_HELPER tp_v16 tp_ce_exp_add64(tp_v16* acc, tp_v16 x, float cap, double M, int32_t n) {
  tp_nd t[2], s[2], sum[2];
  tp_ce_tanh64(&x, 1.0 / (double)cap, t, s);
  const tp_nd h0 = tp_ce_z(cap, t[0]) - M, h1 = tp_ce_z(cap, t[1]) - M;
  tp_nd e0 = tp_ce_exp64_le0(h0), e1 = tp_ce_exp64_le0(h1);
  for (int i = n; i < 16; ++i) {  // a tail's missing lanes
    if (i < 8) e0[i] = 0.0; else e1[i - 8] = 0.0;
  }
  tp_nd_get2(acc, sum);
  sum[0] += e0;
  sum[1] += e1;
  tp_nd_put2(acc, sum);
  return tp_narrow16(h0, h1);
}

// *arg = (z - M) - shift of 16 lanes (z = cap * tanh(x / cap) in fp64), rounded once to fp32 (pass 2's exp
// argument), and *s = the slope, rounded to fp32.
TP_HELPER void* tp_ce_shifted_slope(tp_v16* x, float cap, double M, double shift, tp_v16* arg, tp_v16* s) {
  tp_nd t[2], sl[2];
  tp_ce_tanh64(x, 1.0 / (double)cap, t, sl);
  *arg = tp_narrow16(tp_ce_z(cap, t[0]) - M - shift, tp_ce_z(cap, t[1]) - M - shift);
  *s = tp_narrow16(sl[0], sl[1]);
  return 0;
}

// One value through the lanes above, so the target's logit and a block's max get the bits the lanes get (the
// broadcast held opaque, so no lane is specialized for it): z in fp64, and the slope (fp64).
TP_INLINE void tp_ce_one64(float x, float cap, double* z, double* slope) {
  tp_v16 v(x);
#pragma GCC unroll 4
  for (int i = 0; i < TP_PARTS; ++i) TP_CE_OPAQUE(v.v[i]);
  tp_nd t[2], s[2];
  tp_ce_tanh64(&v, 1.0 / (double)cap, t, s);
  *z = tp_ce_z(cap, t[0])[0];
  *slope = s[0][0];
}
TP_HELPER double tp_ce_cap64(float x, float cap) {
  double z, s;
  tp_ce_one64(x, cap, &z, &s);
  return z;
}
// The target's slope 1 - tanh^2(x / cap) in fp64 by libm's tanh (the formula the fp64 golden evaluates: the
// row's largest gradient element as accurate as its terms), 0 where the lanes' slope is 0.
TP_HELPER double tp_ce_target_slope(float x, float cap) {
  double z, s;
  tp_ce_one64(x, cap, &z, &s);
  if (s == 0.0) return 0.0;
  const double t = tanh((double)x / (double)cap);
  return 1.0 - t * t;
}
// exp of one fp32 value through the packed exp: the fp32 p a lane gets for the same argument.
TP_HELPER double tp_ce_exp1(float x) {
  tp_v16 v(x);
#pragma GCC unroll 4
  for (int i = 0; i < TP_PARTS; ++i) TP_CE_OPAQUE(v.v[i]);
  return (double)tp_exp(v).v[0][0];
}

// One element of a storage dtype as fp32, and one fp64 value rounded to fp32, then to the storage dtype.
TP_HELPER float tp_ce_get_f32(float v) { return v; }
TP_HELPER float tp_ce_get_bf16(uint16_t v) { return tp_load1_bf16(v); }
TP_HELPER float tp_ce_get_f16(uint16_t v) { return tp_load1_f16(v); }
TP_HELPER void* tp_ce_put_f32(float* dst, double v) {
  *dst = (float)v;
  return 0;
}
TP_HELPER void* tp_ce_put_bf16(uint16_t* dst, double v) {
  *dst = tp_store1_bf16((float)v);
  return 0;
}
TP_HELPER void* tp_ce_put_f16(uint16_t* dst, double v) {
  *dst = tp_store1_f16((float)v);
  return 0;
}
// A quiet nan: the values of a row whose target lies outside [0, C).
TP_HELPER double tp_ce_nan() { return NAN; }

// 16 zero lanes the compiler cannot see through: an ignored row's gradient stored from it stays a loop of
// packed (masked, at the tail) stores, not a call to memset (g++ recognized the fp32 loop as one).
TP_HELPER tp_v16 tp_ce_zeros() {
  tp_v16 v(0.0f);
#pragma GCC unroll 4
  for (int i = 0; i < TP_PARTS; ++i) TP_CE_OPAQUE(v.v[i]);
  return v;
}

// Whether both values are finite (a row's pass-2 coefficients with its scales folded in).
TP_HELPER int32_t tp_ce_finite2(double a, double b) { return isfinite(a) && isfinite(b); }

// The target's gradient: the accurate form, or torch's order where that is not finite (an infinite weight or
// scale: inf - inf is nan there, and the golden follows torch).
TP_HELPER double tp_ce_finite_or(double accurate, double torch_order) {
  return isfinite(torch_order) ? accurate : torch_order;
}

// acc (one set of simd.h's fp64 sums: 16 lanes, two tp_v16 slots) += the 16 fp32 lanes of v, widened exactly.
TP_HELPER void* tp_ce_add64(tp_v16* acc, tp_v16* v) {
  tp_nd s[2], lo, hi;
  tp_nd_get2(acc, s);
  tp_widen16(v, &lo, &hi);
  s[0] += lo;
  s[1] += hi;
  tp_nd_put2(acc, s);
  return 0;
}
