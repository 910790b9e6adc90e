// tileport CPU prelude of the cross-entropy kernels, after simd.h (its tp_v16, tp_exp_n and dtype bridges).
//
// Gemma 2's softcap z = cap * tanh(x / cap) and its slope s = dz/dx = 1 - tanh^2, packed. u = x / cap is the
// rounded quotient (x * (1 / cap) corrected by one FMA of its exact remainder: no division, and no bias of
// 1 / cap's rounding, which made z = x (1 + d) for small x). tanh(u) for |u| < 1 is a + a^3 Q(a^2), Q of degree 7
// fitted here for tanh's relative error (about 4e-10 before rounding; the coefficients in fp32); beyond, 1 - q
// with q = 2 / (exp(2|u|) + 1) from the packed exp (q <= 0.24 there: 1 - q does not cancel). Measured against
// fp64: about 1.5 half-ulps at worst. The slope is 1 - t * t from the fp32 t with one rounding (an FMA): it is
// 0 where t rounds to 1 (|u| > 9), as torch's fp32 composite and, further out, the fp64 golden's own 1 - tanh^2
// give. An exact tiny slope there (q * (2 - q)) beat neither: it lost to the golden's rounding to 0 at |u| > 15
// (a metric relative to |g| + 1e-7), and in rows of saturated logits it exposed the fp32 cancellation of
// p * A - B that a zero slope hides. Signs by bit operations; nan stays nan, +-inf gives +-1 and slope 0.

// z is held opaque (an empty asm statement) once rounded: with -ffp-contract=fast, g++ fused cap * t - M into
// one FMA in the caller, so z - M was cap * t's rounding error (not 0) where z is the max: S != 1 at C = 1.
#if defined(__x86_64__) || defined(__i386__)
#define TP_CE_OPAQUE(r) __asm__("" : "+v"(r))
#elif defined(__aarch64__)
#define TP_CE_OPAQUE(r) __asm__("" : "+w"(r))
#else
#define TP_CE_OPAQUE(r) __asm__("" : "+m"(r))
#endif

static inline tp_nf tp_ce_tanh_n(tp_nf u) {
  const tp_nu bits = (tp_nu)u;
  const tp_nu sign = bits & 0x80000000u;
  const tp_nf a = (tp_nf)(bits & 0x7FFFFFFFu);
  const tp_nf z = a * a;
  tp_nf p = 1.214708027e-04f * z - 8.411375456e-04f;
  p = tp_fma_nf(p, z, (tp_nf){} + 3.078594804e-03f);
  p = tp_fma_nf(p, z, (tp_nf){} - 8.595115505e-03f);
  p = tp_fma_nf(p, z, (tp_nf){} + 2.178473026e-02f);
  p = tp_fma_nf(p, z, (tp_nf){} - 5.395310000e-02f);
  p = tp_fma_nf(p, z, (tp_nf){} + 1.333319992e-01f);
  p = tp_fma_nf(p, z, (tp_nf){} - 3.333332837e-01f);
  p = tp_fma_nf(p * z, a, a);
  const tp_nf qb = 2.0f / (tp_exp_n(a + a) + 1.0f);
  const tp_ni big = a >= 1.0f;
  const tp_nf ta = big ? 1.0f - qb : p;
  return (tp_nf)((tp_nu)ta | sign);
}

// x / cap, rounded (but for rare near-ties): x * inv and one Newton step on its exact remainder x - u * cap.
static inline tp_nf tp_ce_quotient(tp_nf x, float cap, float inv) {
  const tp_nf c = (tp_nf){} + cap, i = (tp_nf){} + inv;
  const tp_nf u = x * i;
  const tp_nf r = tp_fma_nf(-u, c, x);
  const tp_nf v = tp_fma_nf(r, i, u);
  return (tp_nf)((tp_ni)v & (tp_ni)((r - r) == 0)) + (tp_nf)((tp_ni)u & ~(tp_ni)((r - r) == 0));  // x inf: u
}

// z = cap * tanh(x / cap) of 16 lanes (inv = 1 / cap).
extern "C" inline tp_v16 tp_ce_cap(tp_v16 x, float cap, float inv) {
  tp_v16 z;
#pragma GCC unroll 4
  for (int i = 0; i < TP_PARTS; ++i) {
    const tp_nf t = tp_ce_tanh_n(tp_ce_quotient(x.v[i], cap, inv));
    z.v[i] = cap * t;
    TP_CE_OPAQUE(z.v[i]);
  }
  return z;
}

// *z = cap * tanh(x / cap) and *s = 1 - tanh^2 of 16 lanes.
extern "C" inline void* tp_ce_cap_slope(tp_v16* x, float cap, float inv, tp_v16* z, tp_v16* s) {
#pragma GCC unroll 4
  for (int i = 0; i < TP_PARTS; ++i) {
    const tp_nf t = tp_ce_tanh_n(tp_ce_quotient(x->v[i], cap, inv));
    tp_nf zi = cap * t;
    TP_CE_OPAQUE(zi);
    z->v[i] = zi;
    s->v[i] = tp_fma_nf(-t, t, (tp_nf){} + 1.0f);
  }
  return 0;
}

// One value through the packed forms above, so the target's logit and a block's max get the bits the lanes
// get (the broadcast held opaque too, so no lane is specialized for it).
static inline tp_v16 tp_ce_opaque_splat(float x) {
  tp_v16 v(x);
#pragma GCC unroll 4
  for (int i = 0; i < TP_PARTS; ++i) TP_CE_OPAQUE(v.v[i]);
  return v;
}
extern "C" inline float tp_ce_cap1(float x, float cap, float inv) {
  tp_v16 z = tp_ce_cap(tp_ce_opaque_splat(x), cap, inv);
  return z.v[0][0];
}
// The target's slope 1 - tanh^2(x / cap) in fp64 (libm's tanh), the formula the fp64 golden evaluates: the
// row's largest gradient element as accurate as its fp64 terms. 0 where the lanes' fp32 slope 1 - t * t is 0
// (t rounds to +-1, |x / cap| > 9), as torch's fp32 slope: in a row of saturated logits the target's bracket
// (with eps = 1, C p_t - 1) cancels to noise that a tiny nonzero slope shows and a zero one hides.
extern "C" inline double tp_ce_target_slope(float x, float cap, float inv) {
  tp_v16 v = tp_ce_opaque_splat(x), z, s;
  tp_ce_cap_slope(&v, cap, inv, &z, &s);
  if (s.v[0][0] == 0.0f) return 0.0;
  const double t = tanh((double)x / (double)cap);
  return 1.0 - t * t;
}

// One element of a storage dtype as fp32, and one fp64 value rounded to fp32, then to the storage dtype.
extern "C" inline float tp_ce_get_f32(float v) { return v; }
extern "C" inline float tp_ce_get_bf16(uint16_t v) { return tp_load1_bf16(v); }
extern "C" inline float tp_ce_get_f16(uint16_t v) { return tp_load1_f16(v); }
extern "C" inline void* tp_ce_put_f32(float* dst, double v) {
  *dst = (float)v;
  return 0;
}
extern "C" inline void* tp_ce_put_bf16(uint16_t* dst, double v) {
  *dst = tp_store1_bf16((float)v);
  return 0;
}
extern "C" inline void* tp_ce_put_f16(uint16_t* dst, double v) {
  *dst = tp_store1_f16((float)v);
  return 0;
}
// A quiet nan: the values of a row whose target lies outside [0, C).
extern "C" inline double tp_ce_nan() { return NAN; }

// 16 zero lanes the compiler cannot see through: an ignored row's gradient stored from it stays a loop of
// packed (masked, at the tail) stores, not a call to memset (g++ recognized the fp32 loop as one).
extern "C" inline tp_v16 tp_ce_zeros() { return tp_ce_opaque_splat(0.0f); }

// Whether both values are finite (a row's pass-2 coefficients with its scales folded in).
extern "C" inline int32_t tp_ce_finite2(double a, double b) { return isfinite(a) && isfinite(b); }

// The target's gradient: the accurate form, or torch's order where that is not finite (an infinite weight or
// scale: inf - inf is nan there, and the golden follows torch).
extern "C" inline double tp_ce_finite_or(double accurate, double torch_order) {
  return isfinite(torch_order) ? accurate : torch_order;
}

// acc (one set of simd.h's fp64 sums: 16 lanes, two tp_v16 slots) += the 16 fp32 lanes of v, widened exactly.
extern "C" inline void* tp_ce_add64(tp_v16* acc, tp_v16* v) {
  tp_nd s[2], lo, hi;
  memcpy(s, acc, 128);
  tp_widen16(v, &lo, &hi);
  s[0] += lo;
  s[1] += hi;
  memcpy(acc, s, 128);
  return 0;
}
