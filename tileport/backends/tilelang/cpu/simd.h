// tileport CPU runtime prelude: the vector type of TileLang's C kernels and the dtype bridges they call.
//
// Packed by construction. A kernel's per-element math runs on TileLang `float32x16` locals, which the C
// codegen prints as `float16` (TileLang's `vec_type<float, 16>`, a struct whose operators are plain loops that
// g++ may or may not vectorize: on AMD Zen 4 with -march=native, g++ 12 left them scalar, 3x slower). Here
// that type is specialized as an array of the ISA's native registers (one zmm with AVX-512, two ymm with AVX,
// four 128-bit vectors elsewhere) using GCC vector extensions, so every operator is one packed instruction per
// register whatever the tuning or cost model. The dtype bridges move 16 lanes at a time with intrinsics where
// the ISA has them (F16C, AVX-512, AVX512-BF16) and portable code elsewhere; nothing assumes x86 unguarded.
//
// Every helper is extern "C" and has the signature the codegen prints for a T.call_extern (`void*` for a
// "handle" call), or the symbol would clash. Rounding: fp32 -> fp16 and fp32 -> bf16 round to nearest even,
// bit-exact with torch (bf16 NaN -> 0x7FC0).
#include <math.h>
#include <stdint.h>
#include <string.h>
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

#if defined(__AVX512F__)
#define TP_NATIVE 16
#elif defined(__AVX__)
#define TP_NATIVE 8
#else
#define TP_NATIVE 4  // SSE2, NEON, or scalar code from GCC's generic vector lowering
#endif
// The helpers the codegen calls (TP_HELPER) and theirs (TP_INLINE): always inlined (left to g++'s budget, the AVX2
// build of a kernel holding several variants' loops called the exp and the softcap's tanh out of line, per 16 lanes).
#define TP_INLINE static inline __attribute__((always_inline))
#define TP_HELPER extern "C" inline __attribute__((always_inline))
#define TP_VL 16
#define TP_PARTS (TP_VL / TP_NATIVE)
#if defined(__F16C__) || defined(__AVX512F__)
#define TP_F16C 1
#endif
#if defined(__AVX512BW__) && defined(__AVX512VL__)
#define TP_AVX512BW 1
#endif

typedef float tp_nf __attribute__((vector_size(TP_NATIVE * 4)));
typedef int32_t tp_ni __attribute__((vector_size(TP_NATIVE * 4)));
typedef uint32_t tp_nu __attribute__((vector_size(TP_NATIVE * 4)));

// 16 fp32 lanes as TP_PARTS native registers; the interface TileLang's codegen uses (an explicit one-value
// constructor for broadcasts, + - * / and their compound forms).
template <> struct vec_type<float, 16> {
  tp_nf v[TP_PARTS];
  vec_type() = default;
  explicit vec_type(float a) {
#pragma GCC unroll 4
    for (int i = 0; i < TP_PARTS; ++i) v[i] = (tp_nf){} + a;
  }
#define TP_VEC_OP(op)                                                      \
  vec_type operator op(const vec_type& o) const {                          \
    vec_type r;                                                            \
    _Pragma("GCC unroll 4") for (int i = 0; i < TP_PARTS; ++i) r.v[i] = v[i] op o.v[i]; \
    return r;                                                              \
  }                                                                        \
  vec_type& operator op##=(const vec_type& o) {                            \
    _Pragma("GCC unroll 4") for (int i = 0; i < TP_PARTS; ++i) v[i] = v[i] op o.v[i]; \
    return *this;                                                          \
  }
  TP_VEC_OP(+)
  TP_VEC_OP(-)
  TP_VEC_OP(*)
  TP_VEC_OP(/)
#undef TP_VEC_OP
  vec_type operator-() const {
    vec_type r;
#pragma GCC unroll 4
    for (int i = 0; i < TP_PARTS; ++i) r.v[i] = -v[i];
    return r;
  }
};
typedef vec_type<float, 16> tp_v16;

// ---- scalar conversions (tails of 16-bit storage on ISAs without masked moves) ----
TP_HELPER float tp_load1_f16(uint16_t v) {
#ifdef TP_F16C
  return _cvtsh_ss(v);
#else
  half h;
  memcpy(&h, &v, 2);
  return (float)h;
#endif
}

TP_HELPER uint16_t tp_store1_f16(float f) {
#ifdef TP_F16C
  return _cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT);
#else
  half h(f);
  uint16_t v;
  memcpy(&v, &h, 2);
  return v;
#endif
}

TP_HELPER float tp_load1_bf16(uint16_t v) {
  uint32_t b = ((uint32_t)v) << 16;
  float f;
  memcpy(&f, &b, 4);
  return f;
}

TP_HELPER uint16_t tp_store1_bf16(float f) {
  if (f != f) return 0x7FC0;
  uint32_t b;
  memcpy(&b, &f, 4);
  return (uint16_t)((b + 0x7FFFu + ((b >> 16) & 1u)) >> 16);
}

// ---- 16-lane loads: storage -> fp32 vector ----
TP_HELPER void* tp_load_f32(float* src, tp_v16* dst) {
  memcpy(dst, src, 64);
  return 0;
}

TP_HELPER void* tp_load_bf16(uint16_t* src, tp_v16* dst) {
#if defined(__AVX512F__)
  __m512i w = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i*)src));
  _mm512_storeu_si512(dst, _mm512_slli_epi32(w, 16));
#elif defined(__AVX2__)
  for (int k = 0; k < 2; ++k) {
    __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i*)(src + 8 * k)));
    _mm256_storeu_si256((__m256i*)((float*)dst + 8 * k), _mm256_slli_epi32(w, 16));
  }
#else
  uint32_t w[16];
  for (int i = 0; i < 16; ++i) w[i] = ((uint32_t)src[i]) << 16;
  memcpy(dst, w, 64);
#endif
  return 0;
}

TP_HELPER void* tp_load_f16(uint16_t* src, tp_v16* dst) {
#if defined(__AVX512F__)
  _mm512_storeu_ps((float*)dst, _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i*)src)));
#elif defined(TP_F16C)
  for (int k = 0; k < 2; ++k)
    _mm256_storeu_ps((float*)dst + 8 * k, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i*)(src + 8 * k))));
#else
  float f[16];
  for (int i = 0; i < 16; ++i) f[i] = tp_load1_f16(src[i]);
  memcpy(dst, f, 64);
#endif
  return 0;
}

// ---- 16-lane stores: fp32 vector -> storage ----
TP_HELPER void* tp_store_f32(tp_v16* src, float* dst) {
  memcpy(dst, src, 64);
  return 0;
}

TP_HELPER void* tp_store_f16(tp_v16* src, uint16_t* dst) {
#if defined(__AVX512F__)
  _mm256_storeu_si256((__m256i*)dst, _mm512_cvtps_ph(_mm512_loadu_ps((const float*)src), _MM_FROUND_TO_NEAREST_INT));
#elif defined(TP_F16C)
  for (int k = 0; k < 2; ++k)
    _mm_storeu_si128((__m128i*)(dst + 8 * k),
                     _mm256_cvtps_ph(_mm256_loadu_ps((const float*)src + 8 * k), _MM_FROUND_TO_NEAREST_INT));
#else
  const float* f = (const float*)src;
  for (int i = 0; i < 16; ++i) dst[i] = tp_store1_f16(f[i]);
#endif
  return 0;
}

TP_HELPER void* tp_store_bf16(tp_v16* src, uint16_t* dst) {
#if defined(__AVX512BF16__) && defined(TP_AVX512BW)
  // One instruction rounds 16 lanes to nearest even; nan lanes are set to 0x7FC0 as torch does.
  // vcvtneps2bf16 flushes denormal inputs to zero: |y| < 1.2e-38, far below the standard's error bounds.
  __m512 f = _mm512_loadu_ps((const float*)src);
  __m256i r = (__m256i)_mm512_cvtneps_pbh(f);
  r = _mm256_mask_mov_epi16(r, _mm512_cmp_ps_mask(f, f, _CMP_UNORD_Q), _mm256_set1_epi16(0x7FC0));
  _mm256_storeu_si256((__m256i*)dst, r);
#else
  // Round to nearest even with integer ops on the native registers (packed on every SIMD ISA).
  uint32_t out[16];
#pragma GCC unroll 4
  for (int k = 0; k < TP_PARTS; ++k) {
    tp_nu b = (tp_nu)src->v[k];
    tp_nu r = (b + 0x7FFFu + ((b >> 16) & 1u)) >> 16;
    tp_ni nan = src->v[k] != src->v[k];  // -1 in nan lanes
    r = (r & ~(tp_nu)nan) | ((tp_nu)nan & 0x7FC0u);
    memcpy(out + k * TP_NATIVE, &r, sizeof r);
  }
  for (int i = 0; i < 16; ++i) dst[i] = (uint16_t)out[i];
#endif
  return 0;
}

// bf16 with subnormal values kept ("bf16s"): what torch's rounding gives for every fp32 value, where
// vcvtneps2bf16 (tp_store_bf16 on AVX512-BF16) flushes |y| < 2^-126 to zero. Round to nearest even with integer
// ops; loads are bf16's. For kernels whose 16-bit results are claimed bit for bit with torch's.
TP_HELPER void* tp_load_bf16s(uint16_t* src, tp_v16* dst) { return tp_load_bf16(src, dst); }
TP_HELPER void* tp_store_bf16s(tp_v16* src, uint16_t* dst) {
#if defined(__AVX512BF16__) && defined(TP_AVX512BW) && defined(__AVX512DQ__)
  // vcvtneps2bf16 rounds to nearest even as the integer ops below do, but flushes subnormal inputs to zero and
  // keeps a nan's payload: 16 lanes with neither (fpclass: quiet nan 0x01, subnormal 0x20, signalling nan 0x80)
  // take that one instruction, the rare others the integer rounding (gated bf16 kernels: 9 instructions fewer).
  __m512 f = _mm512_loadu_ps((const float*)src);
  if (__builtin_expect(_mm512_fpclass_ps_mask(f, 0xA1) == 0, 1)) {
    _mm256_storeu_si256((__m256i*)dst, (__m256i)_mm512_cvtneps_pbh(f));
    return 0;
  }
#endif
  uint32_t out[16];
#pragma GCC unroll 4
  for (int k = 0; k < TP_PARTS; ++k) {
    tp_nu b = (tp_nu)src->v[k];
    tp_nu r = (b + 0x7FFFu + ((b >> 16) & 1u)) >> 16;
    tp_ni nan = src->v[k] != src->v[k];  // -1 in nan lanes
    r = (r & ~(tp_nu)nan) | ((tp_nu)nan & 0x7FC0u);
    memcpy(out + k * TP_NATIVE, &r, sizeof r);
  }
#if defined(__AVX512F__)
  _mm256_storeu_si256((__m256i*)dst, _mm512_cvtepi32_epi16(_mm512_loadu_si512(out)));
#else
  for (int i = 0; i < 16; ++i) dst[i] = (uint16_t)out[i];
#endif
  return 0;
}

// ---- partial (tail) moves: the first n lanes, 0 <= n <= 16; loads zero the other lanes ----
#if defined(__AVX2__)  // also where AVX512F has no AVX512BW: the 16-bit tails below
// AVX2's masked moves are of 32-bit lanes: lane i of the half starting at lane `from` is on where i + from < n.
TP_INLINE __m256i tp_lanes_below(int32_t n, int32_t from) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(n - from), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}
#endif

TP_HELPER void* tp_loadn_f32(float* src, tp_v16* dst, int32_t n) {
#if defined(__AVX512F__)
  _mm512_storeu_ps((float*)dst, _mm512_maskz_loadu_ps((__mmask16)((1u << n) - 1u), src));
#elif defined(__AVX2__)
  _mm256_storeu_ps((float*)dst, _mm256_maskload_ps(src, tp_lanes_below(n, 0)));
  _mm256_storeu_ps((float*)dst + 8, _mm256_maskload_ps(src + 8, tp_lanes_below(n, 8)));
#else
  float f[16] = {0};
  memcpy(f, src, n * sizeof(float));
  memcpy(dst, f, 64);
#endif
  return 0;
}

TP_HELPER void* tp_storen_f32(tp_v16* src, float* dst, int32_t n) {
#if defined(__AVX512F__)
  _mm512_mask_storeu_ps(dst, (__mmask16)((1u << n) - 1u), _mm512_loadu_ps((const float*)src));
#elif defined(__AVX2__)
  _mm256_maskstore_ps(dst, tp_lanes_below(n, 0), _mm256_loadu_ps((const float*)src));
  _mm256_maskstore_ps(dst + 8, tp_lanes_below(n, 8), _mm256_loadu_ps((const float*)src + 8));
#else
  memcpy(dst, src, n * sizeof(float));
#endif
  return 0;
}

// A row's tail runs these once per pass: with AVX512BW or AVX2 they are masked moves (a variable-length memcpy is a
// libc call, and its 2-byte writes read back as one 32-byte load stall store forwarding: together they made a
// row of D = 15 cost 4x a row of D = 16).
#if defined(TP_AVX512BW)
#define TP_PARTIAL_U16(tag)                                                                  \
  TP_HELPER void* tp_loadn_##tag(uint16_t* src, tp_v16* dst, int32_t n) {            \
    uint16_t h[16];                                                                          \
    _mm256_storeu_si256((__m256i*)h, _mm256_maskz_loadu_epi16((__mmask16)((1u << n) - 1u), src)); \
    return tp_load_##tag(h, dst);                                                            \
  }                                                                                          \
  TP_HELPER void* tp_storen_##tag(tp_v16* src, uint16_t* dst, int32_t n) {           \
    uint16_t h[16];                                                                          \
    tp_store_##tag(src, h);                                                                  \
    _mm256_mask_storeu_epi16(dst, (__mmask16)((1u << n) - 1u), _mm256_loadu_si256((const __m256i*)h)); \
    return 0;                                                                                \
  }
#elif defined(__AVX2__)
// AVX2: the first n / 2 pairs of 16-bit lanes as masked 32-bit moves, an odd last lane on its own (blended in
// from a broadcast on load; one 2-byte store): no libc call, no memset of a staging buffer.
#define TP_PARTIAL_U16(tag)                                                                  \
  TP_HELPER void* tp_loadn_##tag(uint16_t* src, tp_v16* dst, int32_t n) {            \
    __m256i r = _mm256_maskload_epi32((const int*)src, tp_lanes_below(n >> 1, 0));           \
    if (n & 1) {                                                                             \
      const __m256i at = _mm256_cmpeq_epi16(_mm256_set1_epi16((short)(n - 1)),               \
          _mm256_setr_epi16(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15));          \
      r = _mm256_blendv_epi8(r, _mm256_set1_epi16((short)src[n - 1]), at);                   \
    }                                                                                        \
    uint16_t h[16];                                                                          \
    _mm256_storeu_si256((__m256i*)h, r);                                                     \
    return tp_load_##tag(h, dst);                                                            \
  }                                                                                          \
  TP_HELPER void* tp_storen_##tag(tp_v16* src, uint16_t* dst, int32_t n) {           \
    uint16_t h[16];                                                                          \
    tp_store_##tag(src, h);                                                                  \
    _mm256_maskstore_epi32((int*)dst, tp_lanes_below(n >> 1, 0), _mm256_loadu_si256((const __m256i*)h)); \
    if (n & 1) dst[n - 1] = h[n - 1];                                                        \
    return 0;                                                                                \
  }
#else
#define TP_PARTIAL_U16(tag)                                                                  \
  TP_HELPER void* tp_loadn_##tag(uint16_t* src, tp_v16* dst, int32_t n) {            \
    uint16_t h[16] = {0};                                                                    \
    memcpy(h, src, n * sizeof(uint16_t));                                                    \
    return tp_load_##tag(h, dst);                                                            \
  }                                                                                          \
  TP_HELPER void* tp_storen_##tag(tp_v16* src, uint16_t* dst, int32_t n) {           \
    uint16_t h[16];                                                                          \
    tp_store_##tag(src, h);                                                                  \
    memcpy(dst, h, n * sizeof(uint16_t));                                                    \
    return 0;                                                                                \
  }
#endif
TP_PARTIAL_U16(f16)
TP_PARTIAL_U16(bf16)
TP_PARTIAL_U16(bf16s)
#undef TP_PARTIAL_U16

// 16 fp32 lanes rounded to a 16-bit storage dtype and widened back: the value a tensor of that dtype would
// hold (rms_norm's "llama" casting rounds x * rstd to x's dtype before the weight multiplies it).
#define TP_ROUND_U16(tag)                                  \
  TP_HELPER tp_v16 tp_round_##tag(tp_v16 v) {      \
    uint16_t h[16];                                        \
    tp_store_##tag(&v, h);                                 \
    tp_load_##tag(h, &v);                                  \
    return v;                                              \
  }
TP_ROUND_U16(f16)
TP_ROUND_U16(bf16)
TP_ROUND_U16(bf16s)
#undef TP_ROUND_U16
TP_HELPER tp_v16 tp_round_f32(tp_v16 v) { return v; }

// acc keeps its lanes >= n and takes fresh's lanes < n: a partial step adds only real elements, whatever
// the op's term gives for the zero padding.
TP_HELPER void* tp_keep_lanes(tp_v16* acc, tp_v16* fresh, int32_t n) {
#if defined(__AVX512F__)
  const __m512 a = _mm512_loadu_ps((const float*)acc), f = _mm512_loadu_ps((const float*)fresh);
  _mm512_storeu_ps((float*)acc, _mm512_mask_mov_ps(a, (__mmask16)((1u << n) - 1u), f));
#else
  float a[16], f[16];
  memcpy(a, acc, 64);
  memcpy(f, fresh, 64);
  for (int i = 0; i < 16; ++i) a[i] = i < n ? f[i] : a[i];  // a fixed trip count: a packed select
  memcpy(acc, a, 64);
#endif
  return 0;
}

// The 32 lanes of a row sum (lo = lanes 0-15, hi = 16-31) added as a pairwise tree: 32 -> 16 -> 8 -> 4 ->
// 2 -> 1, a fixed order, so a row's sum has the same bits on every ISA with FMA.
TP_HELPER float tp_tree32(tp_v16 lo, tp_v16 hi) {
  tp_v16 s = lo + hi;
  float t[16];
  memcpy(t, &s, 64);
  for (int i = 0; i < 8; ++i) t[i] += t[i + 8];
  for (int i = 0; i < 4; ++i) t[i] += t[i + 4];
  for (int i = 0; i < 2; ++i) t[i] += t[i + 2];
  return t[0] + t[1];
}

// Row sums of products in fp64: 16 lanes of fp32 widened and multiplied exactly (24-bit mantissas: a product
// fits in 53 bits), accumulated in two sets of 16 fp64 lanes (each two tp_v16 slots, 128 bytes; two sets for
// two independent FMA chains per 32 columns, the speed of the fp32 row sum in cache), then added as a fixed
// pairwise tree. Its error (about D/16 * 2^-53 relative to the sum of |terms|) is far below fp32's half ulp:
// a sum of squares rounded once is the correctly rounded sum but for near-ties (rms_norm's and l2norm's rstd
// round once where torch's fp32 chain rounds four times), and a dot product keeps the bits that an fp32 one
// cancels away.
typedef double tp_nd __attribute__((vector_size(64)));
typedef float tp_n8 __attribute__((vector_size(32)));
// An fp64 accumulator's i-th 8 lanes, read and written in place: plain vector moves, where a memcpy of the whole
// accumulator (128 or 256 bytes) became a libc call in code g++ judged cold (the AVX2 builds of cross_entropy).
typedef double tp_nd_at __attribute__((vector_size(64), may_alias, aligned(4)));
TP_INLINE tp_nd tp_nd_get(const tp_v16* acc, int i) { return ((const tp_nd_at*)acc)[i]; }
TP_INLINE void tp_nd_put(tp_v16* acc, int i, tp_nd v) { ((tp_nd_at*)acc)[i] = v; }
TP_INLINE void tp_nd_get2(const tp_v16* acc, tp_nd* s) {
  s[0] = tp_nd_get(acc, 0);
  s[1] = tp_nd_get(acc, 1);
}
TP_INLINE void tp_nd_put2(tp_v16* acc, const tp_nd* s) {
  tp_nd_put(acc, 0, s[0]);
  tp_nd_put(acc, 1, s[1]);
}

// The 16 fp32 lanes of v as two 8-lane fp64 vectors.
TP_INLINE void tp_widen16(const tp_v16* v, tp_nd* lo, tp_nd* hi) {
#if defined(__AVX512F__)  // two whole-register widenings (g++'s generic one splits them into four 128-bit ones)
  *lo = (tp_nd)_mm512_cvtps_pd(_mm256_loadu_ps((const float*)v));
  *hi = (tp_nd)_mm512_cvtps_pd(_mm256_loadu_ps((const float*)v + 8));
#else
  tp_n8 h[2];
  memcpy(h, v, 64);
  *lo = __builtin_convertvector(h[0], tp_nd);
  *hi = __builtin_convertvector(h[1], tp_nd);
#endif
}

// Two 8-lane fp64 vectors rounded to fp32 as one 16-lane value (the inverse of tp_widen16). Written as two
// 32-byte stores and a 64-byte reload (a memcpy of the halves), the reload waits for store forwarding, which
// fails across two stores: measured 1.5x the map's time (tp_resid64's loop, AMD EPYC Zen 4).
TP_INLINE tp_v16 tp_narrow16(tp_nd lo, tp_nd hi) {
  tp_v16 out;
#if defined(__AVX512F__)
  __m512d w = _mm512_insertf64x4(_mm512_castpd256_pd512(_mm256_castps_pd(_mm512_cvtpd_ps((__m512d)lo))),
                                 _mm256_castps_pd(_mm512_cvtpd_ps((__m512d)hi)), 1);
  memcpy(&out, &w, 64);
#else
  tp_n8 h[2] = {__builtin_convertvector(lo, tp_n8), __builtin_convertvector(hi, tp_n8)};
  memcpy(&out, h, 64);
#endif
  return out;
}

TP_HELPER void* tp_dot64_zero(tp_v16* acc) {
  const tp_nd zero = {};
  tp_nd_put(acc, 0, zero);  // four stores, not a loop (which g++ makes a memset call)
  tp_nd_put(acc, 1, zero);
  tp_nd_put(acc, 2, zero);
  tp_nd_put(acc, 3, zero);
  return 0;
}
// acc += a * a: tp_dot64_add of a square, a widened once (written as a product of a with itself, g++ widened
// the same 16 lanes twice: four conversions per 16 lanes where two do).
TP_HELPER void* tp_dot64_sq(tp_v16* acc, tp_v16* a) {
  tp_nd s[2], alo, ahi;
  tp_nd_get2(acc, s);
  tp_widen16(a, &alo, &ahi);
  s[0] += alo * alo;
  s[1] += ahi * ahi;
  tp_nd_put2(acc, s);
  return 0;
}
// acc (one set: 16 fp64 lanes) += a * b, lane by lane, exact products.
TP_HELPER void* tp_dot64_add(tp_v16* acc, tp_v16* a, tp_v16* b) {
  tp_nd s[2], alo, ahi, blo, bhi;
  tp_nd_get2(acc, s);
  tp_widen16(a, &alo, &ahi);
  tp_widen16(b, &blo, &bhi);
  s[0] += alo * blo;
  s[1] += ahi * bhi;
  tp_nd_put2(acc, s);
  return 0;
}
// acc += u * u lane by lane in fp64, u = x * z / (1 + e): a gate's activation output in fp64 (z = v, e = exp(-v):
// silu; z = 1: sigmoid) from the fp32 exp, whose error the quotient damps (by e / (1 + e)). In fp32 the quotient
// and the product round twice more: at D = 1 the rstd is 1 / |u| and kept those roundings, level with torch's
// (gated_rms_norm's L1 case 4457, MERE ratio median 1.00 over 1000 seeds; 0.59 with u so formed). 1 / (1 + e)
// is the fp32 quotient refined by one Newton step in fp64 (no fp64 division).
TP_HELPER void* tp_dot64_gated_sq(tp_v16* acc, tp_v16* x, tp_v16* z, tp_v16* e) {
  tp_v16 q;
#pragma GCC unroll 4
  for (int i = 0; i < TP_PARTS; ++i) q.v[i] = 1.0f / (1.0f + e->v[i]);
  tp_nd s[2], xl, xh, zl, zh, el, eh, ql, qh;
  tp_nd_get2(acc, s);
  tp_widen16(x, &xl, &xh);
  tp_widen16(z, &zl, &zh);
  tp_widen16(e, &el, &eh);
  tp_widen16(&q, &ql, &qh);
  tp_nd dl = 1.0 + el, dh = 1.0 + eh;
  const tp_nd zero = {};
  ql = ql == zero ? ql : ql + ql * (1.0 - dl * ql);  // q = 0 (e = inf) stays 0: the step would give 0 * nan
  qh = qh == zero ? qh : qh + qh * (1.0 - dh * qh);
  tp_nd ul = xl * zl * ql, uh = xh * zh * qh;
  s[0] += ul * ul;
  s[1] += uh * uh;
  tp_nd_put2(acc, s);
  return 0;
}

typedef double tp_n4d __attribute__((vector_size(32)));
// The set's 32 lanes summed by a fixed tree: lane i + lane i + 16, then i + 8, then i + 4, as whole vectors (written
// as scalar loops, g++ packed the tree for some dtypes' kernels and left it 30 scalar adds in others).
TP_HELPER double tp_dot64_total(tp_v16* acc) {
  const tp_nd a[4] = {tp_nd_get(acc, 0), tp_nd_get(acc, 1), tp_nd_get(acc, 2), tp_nd_get(acc, 3)};
  tp_nd s = (a[0] + a[2]) + (a[1] + a[3]);
  tp_n4d h[2];
  memcpy(h, &s, 64);
  tp_n4d q = h[0] + h[1];
  return (q[0] + q[2]) + (q[1] + q[3]);
}

// a * b + c per lane with one rounding (packed FMA where the ISA has it; libm's exact fma otherwise).
TP_INLINE tp_nd tp_fma_nd(tp_nd a, tp_nd b, tp_nd c) {
#if defined(__AVX512F__)
  return (tp_nd)_mm512_fmadd_pd((__m512d)a, (__m512d)b, (__m512d)c);
#elif defined(__FMA__)
  __m256d x[2], y[2], z[2];
  memcpy(x, &a, 64);
  memcpy(y, &b, 64);
  memcpy(z, &c, 64);
  x[0] = _mm256_fmadd_pd(x[0], y[0], z[0]);
  x[1] = _mm256_fmadd_pd(x[1], y[1], z[1]);
  tp_nd r;
  memcpy(&r, x, 64);
  return r;
#else
  tp_nd r;
  for (int i = 0; i < 8; ++i) r[i] = fma(a[i], b[i], c[i]);
  return r;
#endif
}

// scale * (eps * g + (ss * g - x * d)) per lane in fp64, rounded once to fp32. ss * g - x * d is formed from the
// exact product x * d = hi + lo (FMA): where it vanishes exactly it is 0, not the rounding error of two large
// products, so eps * g survives (l2norm at D = 1: ss = x^2 and d = x * g are exact, and dx = rstd * eps * g /
// (x^2 + eps) comes out right even where eps / x^2 is below fp64's 2^-53).
TP_HELPER tp_v16 tp_resid64(tp_v16 g, tp_v16 x, double ss, double d, double eps, double scale) {
  tp_nd gv[2], xv[2];
  tp_widen16(&g, &gv[0], &gv[1]);
  tp_widen16(&x, &xv[0], &xv[1]);
  const tp_nd S = (tp_nd){} + ss, Dv = (tp_nd){} + d, E = (tp_nd){} + eps;
  tp_nd h[2];
#pragma GCC unroll 2
  for (int i = 0; i < 2; ++i) {
    tp_nd hi = xv[i] * Dv;
    tp_nd lo = tp_fma_nd(xv[i], Dv, -hi);
    tp_nd t = tp_fma_nd(S, gv[i], -hi) - lo;
    h[i] = scale * tp_fma_nd(E, gv[i], t);
  }
  return tp_narrow16(h[0], h[1]);
}

// a * b + c per native fp32 register with one rounding (packed FMA where the ISA has it; fmaf otherwise).
TP_INLINE tp_nf tp_fma_nf(tp_nf a, tp_nf b, tp_nf c) {
#if defined(__AVX512F__)
  return (tp_nf)_mm512_fmadd_ps((__m512)a, (__m512)b, (__m512)c);
#elif defined(__FMA__)
  return (tp_nf)_mm256_fmadd_ps((__m256)a, (__m256)b, (__m256)c);
#else
  tp_nf r;
  for (int i = 0; i < TP_NATIVE; ++i) r[i] = fmaf(a[i], b[i], c[i]);
  return r;
#endif
}

// acc (one set: 16 fp64 lanes) += (a^2 + b^2) + (c^2 + d^2), the block formed in fp32 (a^2 and c^2 rounded, each
// FMA and the add once more: at most 3 roundings of a sum of positive terms, relative error below 3 * 2^-24 for
// every D, as no block's error carries into the next), then widened: two conversions per 64 columns where
// tp_dot64_sq takes eight (on Zen 4 the 512-bit conversions are what the sum loop waits on). FMAs with
// one rounding on every ISA, so the bits do not depend on it.
TP_HELPER void* tp_dot64_sq4(tp_v16* acc, tp_v16* a, tp_v16* b, tp_v16* c, tp_v16* d) {
  tp_v16 q;
#pragma GCC unroll 4
  for (int i = 0; i < TP_PARTS; ++i)
    q.v[i] = tp_fma_nf(b->v[i], b->v[i], a->v[i] * a->v[i]) + tp_fma_nf(d->v[i], d->v[i], c->v[i] * c->v[i]);
  tp_nd s[2], lo, hi;
  tp_nd_get2(acc, s);
  tp_widen16(&q, &lo, &hi);
  s[0] += lo;
  s[1] += hi;
  tp_nd_put2(acc, s);
  return 0;
}

// The same dx as rstd * (g - x * k), k = d / (ss + eps) from the row's fp64 sums: g - x * k in fp64 with one
// rounding (FMA), times rstd, rounded to fp32. Its error against tp_resid64's is k's own rounding, 2^-53 |x k|
// per lane: below fp32's resolution of dx wherever |x k| < 2^28 |g - x k|, which holds for every lane of a row
// whose x and g are not nearly parallel, up to the lanes that cancel on their own (where torch's fp32 form
// leaves 2^-24 |x k|). Half tp_resid64's instructions: no exact product, no eps term.
TP_HELPER tp_v16 tp_resid_k64(tp_v16 g, tp_v16 x, double k, double rstd) {
  tp_nd gv[2], xv[2];
  tp_widen16(&g, &gv[0], &gv[1]);
  tp_widen16(&x, &xv[0], &xv[1]);
  const tp_nd K = (tp_nd){} - k, R = (tp_nd){} + rstd;
  return tp_narrow16(R * tp_fma_nd(xv[0], K, gv[0]), R * tp_fma_nd(xv[1], K, gv[1]));
}

// rstd * (g - x * k) in fp32 with k and rstd each an fp32 pair (kh + kl, rh + rl) from their fp64 values: g - x * kh is
// exact before its one rounding (FMA), x * kl then takes off k's remainder, and the product with rstd rounds
// once more: about 1.5 fp32 ulps plus 2^-48 |x k| (torch's fp32 form: 2^-24 |x k|). For dx of 16-bit dtypes,
// whose rounding is 2^15 times coarser, the same as tp_resid_k64's but for near-ties; no conversions to fp64
// (on Zen 4, 512-bit conversions are what tp_resid_k64's loop waits on: 2.9x this loop's time on bf16).
TP_HELPER tp_v16 tp_resid_pair(tp_v16 g, tp_v16 x, tp_v16 kh, tp_v16 kl, tp_v16 rh, tp_v16 rl) {
  tp_v16 out;
#pragma GCC unroll 4
  for (int i = 0; i < TP_PARTS; ++i) {
    tp_nf t = tp_fma_nf(-x.v[i], kl.v[i], tp_fma_nf(-x.v[i], kh.v[i], g.v[i]));
    out.v[i] = tp_fma_nf(t, rh.v[i], t * rl.v[i]);
  }
  return out;
}

// A model of an approximate hardware rsqrt (Ascend A2/A3's vector rsqrt has about 3e-3 relative error):
// the correctly rounded 1/sqrt(s), then truncated to 8 fraction bits, so its relative error lies in
// [0, 2^-8) = [0, 3.9e-3), mean about 2e-3. Newton-Raphson steps y <- y * (1.5 - 0.5 * s * y * y) in the
// kernel then refine it (error e -> 1.5 e^2: about 2e-5 after one step, fp32 rounding after two).
TP_HELPER float tp_rsqrt_approx(float s) {
  float r = 1.0f / sqrtf(s);
  uint32_t b;
  memcpy(&b, &r, 4);
  if ((b & 0x7F800000u) != 0x7F800000u) b &= ~((1u << 15) - 1u);  // keep inf/nan as they are
  memcpy(&r, &b, 4);
  return r;
}

// ---- streaming (non-temporal) stores for outputs far larger than the caches ----
// A plain store first reads the destination line (read-for-ownership), so a kernel writing y moves 3 units
// of memory where a copy with streaming stores moves 2. Streamed where the destination is aligned to the
// register width, plain stores otherwise; the driver ends with a fence so the lines are visible on return.
TP_HELPER void* tp_store_f32_nt(tp_v16* src, float* dst) {
#if defined(__AVX512F__)
  if (((uintptr_t)dst & 63) == 0) {
    _mm512_stream_ps(dst, _mm512_loadu_ps((const float*)src));
    return 0;
  }
#elif defined(__AVX__)
  if (((uintptr_t)dst & 31) == 0) {
    _mm256_stream_ps(dst, _mm256_loadu_ps((const float*)src));
    _mm256_stream_ps(dst + 8, _mm256_loadu_ps((const float*)src + 8));
    return 0;
  }
#endif
  return tp_store_f32(src, dst);
}

inline void tp_stream32(const uint16_t* h, uint16_t* dst) {  // 16 x uint16 = 32 bytes
#if defined(__AVX__)
  if (((uintptr_t)dst & 31) == 0) {
    _mm256_stream_si256((__m256i*)dst, _mm256_loadu_si256((const __m256i*)h));
    return;
  }
#elif defined(__SSE2__)
  if (((uintptr_t)dst & 15) == 0) {
    _mm_stream_si128((__m128i*)dst, _mm_loadu_si128((const __m128i*)h));
    _mm_stream_si128((__m128i*)dst + 1, _mm_loadu_si128((const __m128i*)h + 1));
    return;
  }
#endif
  memcpy(dst, h, 32);
}

TP_HELPER void* tp_store_f16_nt(tp_v16* src, uint16_t* dst) {
  uint16_t h[16];
  tp_store_f16(src, h);
  tp_stream32(h, dst);
  return 0;
}

TP_HELPER void* tp_store_bf16_nt(tp_v16* src, uint16_t* dst) {
  uint16_t h[16];
  tp_store_bf16(src, h);
  tp_stream32(h, dst);
  return 0;
}

TP_HELPER void tp_store_fence() {
#if defined(__SSE2__)
  _mm_sfence();
#endif
}

// The exact rounding error of t = a + b (Knuth's TwoSum, no branch, no ordering of |a| and |b|): a + b - t.
TP_INLINE tp_nf tp_two_sum_err_n(tp_nf a, tp_nf b, tp_nf t) {
  tp_nf bb = t - a;
  return (a - (t - bb)) + (b - bb);
}
TP_HELPER tp_v16 tp_two_sum_err(tp_v16 a, tp_v16 b, tp_v16 t) {
  tp_v16 e;
#pragma GCC unroll 4
  for (int i = 0; i < TP_PARTS; ++i) e.v[i] = tp_two_sum_err_n(a.v[i], b.v[i], t.v[i]);
  return e;
}

// A partial's compensation is nan once the running sum t is inf (inf - inf in its TwoSum), and would turn an
// inf column sum (what torch's sum gives) into nan: where t is not finite, the compensation is 0.
TP_HELPER tp_v16 tp_finite_comp(tp_v16 c, tp_v16 t) {
  tp_v16 r;
#pragma GCC unroll 4
  for (int i = 0; i < TP_PARTS; ++i) {
    tp_ni finite = (t.v[i] - t.v[i]) == 0;  // false for inf and nan
    r.v[i] = (tp_nf)((tp_ni)c.v[i] & finite);
  }
  return r;
}

// (x - (m + ml)) * r per lane, rounded once but for near-ties: the centred value of a normalization. x - m is
// formed as an exact pair d + e (Knuth's TwoSum: 6 adds, no branch), then d * r + (e - ml) * r is one FMA, so
// neither the difference nor the product rounds on its own (written (x - m) * r, both do: two roundings per
// element, what lost to torch's fp32 layer_norm at L1). ml: the low part of an fp64 mean given as an fp32 pair
// (0 for a given fp32 mean). Where d is inf or nan (x is, or x - m overflows), e is 0: the pair's error terms
// would be inf - inf.
TP_INLINE tp_nf tp_difference(tp_nf x, tp_nf m, tp_nf* e) {  // d = x - m rounded, *e its exact error
  tp_nf d = x - m;
  *e = (tp_nf)((tp_ni)tp_two_sum_err_n(x, -m, d) & ((d - d) == 0));
  return d;
}
TP_HELPER tp_v16 tp_centered(tp_v16 x, tp_v16 m, tp_v16 ml, tp_v16 r) {
  tp_v16 out;
#pragma GCC unroll 4
  for (int i = 0; i < TP_PARTS; ++i) {
    tp_nf e, d = tp_difference(x.v[i], m.v[i], &e);
    out.v[i] = tp_fma_nf(d, r.v[i], (e - ml.v[i]) * r.v[i]);
  }
  return out;
}

// tp_centered with the scale given as an fp32 pair rh + rl (an fp64 rstd): d * rh + (d * rl + (e - ml) * rh), the
// small terms first, then one FMA. Scaling by the rounded rstd alone leaves its rounding (up to 2^-25, the same
// for a whole row) in every centred value: what layer_norm's fp32 dweight kept against the golden on two rows.
TP_HELPER tp_v16 tp_centered_pair(tp_v16 x, tp_v16 m, tp_v16 ml, tp_v16 rh, tp_v16 rl) {
  tp_v16 out;
#pragma GCC unroll 4
  for (int i = 0; i < TP_PARTS; ++i) {
    tp_nf e, d = tp_difference(x.v[i], m.v[i], &e);
    tp_nf lo = tp_fma_nf(d, rl.v[i], (e - ml.v[i]) * rh.v[i]);
    lo = (tp_nf)((tp_ni)lo & ((lo - lo) == 0));  // d inf: its terms alone (inf * rh), not inf - inf
    out.v[i] = tp_fma_nf(d, rh.v[i], lo);
  }
  return out;
}

// g * x * (rh + rl) per lane, rounded once but for near-ties: a gradient's term through a row scale given as
// an fp32 pair (rl: the low part of an fp64 rstd; 0 for a given fp32 one). x * rh is formed as an exact pair
// p + q (FMA), x * rl joins the low part, and g * p + g * q is one FMA. Written g * (x * rh), the term rounds
// twice and keeps rh's own rounding: both showed as first-seed failures of fp32 dweight at L0. Where g * q is
// not finite (g or x is inf or nan: q's FMA gives inf - inf, or g * q is inf * 0), it is 0, so the term is
// g * p as the plain product gives it (an inf dy column sums to inf, not nan).
TP_HELPER tp_v16 tp_scaled_product(tp_v16 g, tp_v16 x, tp_v16 rh, tp_v16 rl) {
  tp_v16 out;
#pragma GCC unroll 4
  for (int i = 0; i < TP_PARTS; ++i) {
    tp_nf p = x.v[i] * rh.v[i];
    tp_nf t = g.v[i] * tp_fma_nf(x.v[i], rl.v[i], tp_fma_nf(x.v[i], rh.v[i], -p));
    t = (tp_nf)((tp_ni)t & ((t - t) == 0));
    out.v[i] = tp_fma_nf(g.v[i], p, t);
  }
  return out;
}

// Per-block partials of a gradient reduced across rows (nb blocks of [sum; compensation], 2 x d floats each,
// compensated sums over the block's rows by the kernel): each block folded to sum - compensation and the blocks
// summed in fp64, in block order, rounded once to out: the same bits for any thread count (threads split
// columns). The fold and the tree over blocks were fp32 before, a rounding per level: at D = 12 over 4560 rows
// (add_rms_norm's L1 case 9060) that lost to torch's fp32 column sum (median RMSE ratio 1.1 over 1000 seeds)
// where the exact sum of the same terms, rounded once, beats it (0.66).
// One thread (or few columns) runs inline (tp_parallel_for, threads.h).
TP_HELPER void tp_reduce_partials(float* part, int64_t nb, int64_t d, float* out, int32_t nthreads) {
  auto columns = [&](int64_t c0) {
    const int64_t c1 = c0 + 64 < d ? c0 + 64 : d;
    double acc[64] = {0.0};
    for (int64_t b = 0; b < nb; ++b)
      for (int64_t c = c0; c < c1; ++c) acc[c - c0] += (double)part[2 * b * d + c] - (double)part[(2 * b + 1) * d + c];
    for (int64_t c = c0; c < c1; ++c) out[c] = (float)acc[c - c0];
  };
  tp_parallel_ranges(d < 256 ? 1 : nthreads, (d + 63) / 64, [&](int64_t lo, int64_t hi) {
    for (int64_t g = lo; g < hi; ++g) columns(g * 64);
  });
}

// exp of each lane, packed (libm's expf is a scalar call per lane). x = n ln2 + r with n = round(x / ln2) (the
// 1.5 * 2^23 shift rounds to nearest), r = x - n * C1 - n * C2 (C1 = 0.693359375 has 9 significant bits: n * C1
// is exact for |n| <= 2^15, so r keeps its bits whether or not g++ fuses the products), |r| <= 0.35; e^r as its
// Taylor polynomial of degree 7 (the truncation r^8 / 8! < 6e-9, a tenth of fp32's half ulp at 1), evaluated
// by Horner; 2^n applied as two powers 2^(n/2) so neither overflows nor goes subnormal before the product
// (e^x down to fp32's subnormals, 2^128 * 0.98 up to its max). Measured against fp64 exp: within 2 ulp
// (tests/backends/test_cpu_simd.py). x < -104 gives 0, x > 89 inf, nan stays nan.
TP_INLINE tp_nf tp_exp_n(tp_nf x) {
  const tp_nf lo = (tp_nf){} - 104.0f, hi = (tp_nf){} + 89.0f, shift = (tp_nf){} + 12582912.0f;
  tp_nf xc = x < lo ? lo : (x > hi ? hi : x);
  tp_nf n = (xc * 1.44269504088896341f + shift) - shift;
  tp_nf r = (xc - n * 0.693359375f) - n * -2.12194440e-4f;
  tp_nf p = (tp_nf){} + (1.0f / 5040.0f);
  p = p * r + (1.0f / 720.0f);
  p = p * r + (1.0f / 120.0f);
  p = p * r + (1.0f / 24.0f);
  p = p * r + (1.0f / 6.0f);
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
#if defined(__AVX512F__)
  // p * 2^n in one instruction, rounded once: the same bits as the two exact scalings below (p * s1 is exact;
  // the product with s2 rounds once, into the subnormals where e is that small).
  tp_nf e = (tp_nf)_mm512_scalef_ps((__m512)p, (__m512)n);
#else
  tp_ni k = __builtin_convertvector(n, tp_ni);
  tp_ni k1 = k >> 1, k2 = k - (k >> 1);
  tp_nf s1 = (tp_nf)((k1 + 127) << 23), s2 = (tp_nf)((k2 + 127) << 23);
  tp_nf e = (p * s1) * s2;
#endif
  e = x < lo ? (tp_nf){} : e;
  return x != x ? x : e;
}
TP_HELPER tp_v16 tp_exp(tp_v16 x) {
  tp_v16 r;
#pragma GCC unroll 4
  for (int i = 0; i < TP_PARTS; ++i) r.v[i] = tp_exp_n(x.v[i]);
  return r;
}

// Lane-wise max (a nan in a lane stays there: a row with a nan gives a nan softmax, as torch's), and the max of
// 16 lanes as a fixed tree.
TP_HELPER tp_v16 tp_max(tp_v16 a, tp_v16 b) {
  tp_v16 r;
#pragma GCC unroll 4
  for (int i = 0; i < TP_PARTS; ++i) r.v[i] = (a.v[i] > b.v[i] || a.v[i] != a.v[i]) ? a.v[i] : b.v[i];
  return r;
}
TP_HELPER float tp_hmax(tp_v16 v) {
  float t[16];
  memcpy(t, &v, 64);
  for (int w = 8; w > 0; w /= 2)
    for (int i = 0; i < w; ++i) t[i] = (t[i] > t[i + w] || t[i] != t[i]) ? t[i] : t[i + w];
  return t[0];
}

// A row statistic that torch's Welford update leaves nan where the row holds inf (inf - inf): layer_norm's mean.
TP_HELPER double tp_nan_if_inf(double v) { return isinf(v) ? NAN : v; }
