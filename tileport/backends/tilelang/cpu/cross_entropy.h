// tileport CPU prelude of the cross-entropy kernels, after simd.h (its tp_v16, tp_exp_n and dtype bridges).
//
// Gemma 2's softcap z = cap * tanh(x / cap) and its slope s = dz/dx = 1 - tanh^2, packed. tanh(u) for
// |u| < 0.625 is Cephes' odd polynomial (relative error about 2e-7, as libm's tanhf); beyond, 1 - q with
// q = 2 / (exp(2|u|) + 1) from the packed exp (q <= 0.45 there: 1 - q does not cancel). q = 1 - |tanh| is
// kept, so the slope q * (2 - q) keeps its relative precision where tanh is near 1 (1 - t * t loses every bit
// there). Signs by bit operations; nan stays nan, +-inf gives +-1 and slope 0.

// z is held opaque (an empty asm statement) once rounded: with -ffp-contract=fast, g++ fused cap * t - M into
// one FMA in the caller, so z - M was cap * t's rounding error (not 0) where z is the max: S != 1 at C = 1.
#if defined(__x86_64__) || defined(__i386__)
#define TP_CE_OPAQUE(r) __asm__("" : "+v"(r))
#elif defined(__aarch64__)
#define TP_CE_OPAQUE(r) __asm__("" : "+w"(r))
#else
#define TP_CE_OPAQUE(r) __asm__("" : "+m"(r))
#endif

static inline void tp_ce_tanh_n(tp_nf u, tp_nf* t, tp_nf* q) {
  const tp_nu bits = (tp_nu)u;
  const tp_nu sign = bits & 0x80000000u;
  const tp_nf a = (tp_nf)(bits & 0x7FFFFFFFu);
  const tp_nf z = a * a;
  tp_nf p = -5.70498872745e-3f * z + 2.06390887954e-2f;
  p = p * z - 5.37397155531e-2f;
  p = p * z + 1.33314422036e-1f;
  p = p * z - 3.33332819422e-1f;
  p = (p * z) * a + a;
  const tp_nf qb = 2.0f / (tp_exp_n(a + a) + 1.0f);
  const tp_ni big = a >= 0.625f;
  const tp_nf ta = big ? 1.0f - qb : p;
  *q = big ? qb : 1.0f - p;
  *t = (tp_nf)((tp_nu)ta | sign);
}

// z = cap * tanh(x * inv) of 16 lanes (inv = 1 / cap).
extern "C" inline tp_v16 tp_ce_cap(tp_v16 x, float cap, float inv) {
  tp_v16 z;
#pragma GCC unroll 4
  for (int i = 0; i < TP_PARTS; ++i) {
    tp_nf t, q;
    tp_ce_tanh_n(x.v[i] * inv, &t, &q);
    z.v[i] = cap * t;
    TP_CE_OPAQUE(z.v[i]);
  }
  return z;
}

// *z = cap * tanh(x * inv) and *s = 1 - tanh^2 of 16 lanes.
extern "C" inline void* tp_ce_cap_slope(tp_v16* x, float cap, float inv, tp_v16* z, tp_v16* s) {
#pragma GCC unroll 4
  for (int i = 0; i < TP_PARTS; ++i) {
    tp_nf t, q;
    tp_ce_tanh_n(x->v[i] * inv, &t, &q);
    tp_nf zi = cap * t;
    TP_CE_OPAQUE(zi);
    z->v[i] = zi;
    s->v[i] = q * (2.0f - q);
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
extern "C" inline float tp_ce_slope1(float x, float cap, float inv) {
  tp_v16 v = tp_ce_opaque_splat(x), z, s;
  tp_ce_cap_slope(&v, cap, inv, &z, &s);
  return s.v[0][0];
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

// The target's gradient: the accurate form, or torch's order where that is not finite (an infinite weight or
// scale: inf - inf is nan there, and the golden follows torch).
extern "C" inline double tp_ce_finite_or(double accurate, double torch_order) {
  return isfinite(torch_order) ? accurate : torch_order;
}
