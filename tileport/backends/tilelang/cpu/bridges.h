// tileport CPU runtime prelude: dtype bridges called from TileLang kernels via T.call_extern.
//
// Why these exist: TileLang's C codegen cannot print bfloat16 at all, and a vectorized half->float cast
// prints `(float4)half4`, which g++ rejects. Kernels therefore keep fp16/bf16 tensors as uint16 storage and
// convert 8 lanes at a time here (F16C / AVX2 where present, scalar otherwise). Every helper is extern "C"
// and returns what the codegen's own declaration says (`void*` for a "handle" call), or the symbol clashes.
// Rounding: fp32 -> fp16 and fp32 -> bf16 both round to nearest even, bit-exact with torch (bf16 NaN -> 0x7FC0).
#include <math.h>
#include <stdint.h>
#include <string.h>
#include <omp.h>
#if defined(__AVX2__) && defined(__F16C__)
#include <immintrin.h>
#define TP_X86_SIMD 1
#endif

extern "C" inline float tp_load1_f16(uint16_t v) {
#ifdef TP_X86_SIMD
  return _cvtsh_ss(v);
#else
  half h;
  memcpy(&h, &v, 2);
  return (float)h;
#endif
}

extern "C" inline uint16_t tp_store1_f16(float f) {
#ifdef TP_X86_SIMD
  return _cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT);
#else
  half h(f);
  uint16_t v;
  memcpy(&v, &h, 2);
  return v;
#endif
}

extern "C" inline float tp_load1_bf16(uint16_t v) {
  uint32_t b = ((uint32_t)v) << 16;
  float f;
  memcpy(&f, &b, 4);
  return f;
}

extern "C" inline uint16_t tp_store1_bf16(float f) {
  if (f != f) return 0x7FC0;
  uint32_t b;
  memcpy(&b, &f, 4);
  return (uint16_t)((b + 0x7FFFu + ((b >> 16) & 1u)) >> 16);
}

// fp32 goes through the same 8-lane calls: unaligned 256-bit moves whatever the row stride (TileLang
// serializes its own vector loads when it cannot prove 16-byte alignment, e.g. for odd D).
extern "C" inline void* tp_load8_f32(float* src, float* dst) {
  memcpy(dst, src, 8 * sizeof(float));
  return 0;
}

extern "C" inline void* tp_store8_f32(float* src, float* dst) {
  memcpy(dst, src, 8 * sizeof(float));
  return 0;
}

extern "C" inline void* tp_load8_f16(uint16_t* src, float* dst) {
#ifdef TP_X86_SIMD
  _mm256_storeu_ps(dst, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i*)src)));
#else
  for (int i = 0; i < 8; ++i) dst[i] = tp_load1_f16(src[i]);
#endif
  return 0;
}

extern "C" inline void* tp_store8_f16(float* src, uint16_t* dst) {
#ifdef TP_X86_SIMD
  _mm_storeu_si128((__m128i*)dst, _mm256_cvtps_ph(_mm256_loadu_ps(src), _MM_FROUND_TO_NEAREST_INT));
#else
  for (int i = 0; i < 8; ++i) dst[i] = tp_store1_f16(src[i]);
#endif
  return 0;
}

extern "C" inline void* tp_load8_bf16(uint16_t* src, float* dst) {
#ifdef TP_X86_SIMD
  __m256i v = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i*)src));
  _mm256_storeu_si256((__m256i*)dst, _mm256_slli_epi32(v, 16));
#else
  for (int i = 0; i < 8; ++i) dst[i] = tp_load1_bf16(src[i]);
#endif
  return 0;
}

extern "C" inline void* tp_store8_bf16(float* src, uint16_t* dst) {
#if defined(__AVX512BF16__) && defined(__AVX512VL__) && defined(__AVX512BW__)
  // One instruction rounds 8 lanes to nearest even (AVX512-BF16); nan lanes are set to 0x7FC0 as torch does.
  // vcvtneps2bf16 flushes denormal inputs to zero: |y| < 1.2e-38, far below the standard's error bounds.
  __m256 f = _mm256_loadu_ps(src);
  __m128i r = (__m128i)_mm256_cvtneps_pbh(f);
  r = _mm_mask_mov_epi16(r, _mm256_cmp_ps_mask(f, f, _CMP_UNORD_Q), _mm_set1_epi16(0x7FC0));
  _mm_storeu_si128((__m128i*)dst, r);
#elif defined(TP_X86_SIMD)
  __m256 f = _mm256_loadu_ps(src);
  __m256i b = _mm256_castps_si256(f);
  __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(b, 16), _mm256_set1_epi32(1));
  __m256i r = _mm256_srli_epi32(_mm256_add_epi32(b, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7FFF))), 16);
  __m256i nan = _mm256_castps_si256(_mm256_cmp_ps(f, f, _CMP_UNORD_Q));
  r = _mm256_blendv_epi8(r, _mm256_set1_epi32(0x7FC0), nan);
  // packus works per 128-bit lane: gather the two low quadwords, then store 8 x uint16.
  __m256i p = _mm256_permute4x64_epi64(_mm256_packus_epi32(r, r), 0x08);
  _mm_storeu_si128((__m128i*)dst, _mm256_castsi256_si128(p));
#else
  for (int i = 0; i < 8; ++i) dst[i] = tp_store1_bf16(src[i]);
#endif
  return 0;
}

// A model of an approximate hardware rsqrt (Ascend A2/A3's vector rsqrt has about 3e-3 relative error):
// the correctly rounded 1/sqrt(s), then truncated to 8 fraction bits, so its relative error lies in
// [0, 2^-8) = [0, 3.9e-3), mean about 2e-3. Newton-Raphson steps y <- y * (1.5 - 0.5 * s * y * y) in the
// kernel then refine it (error e -> 1.5 e^2: about 2e-5 after one step, fp32 rounding after two).
extern "C" inline float tp_rsqrt_approx(float s) {
  float r = 1.0f / sqrtf(s);
  uint32_t b;
  memcpy(&b, &r, 4);
  if ((b & 0x7F800000u) != 0x7F800000u) b &= ~((1u << 15) - 1u);  // keep inf/nan as they are
  memcpy(&r, &b, 4);
  return r;
}

// Streaming (non-temporal) 8-lane stores for outputs far larger than the caches: a plain store first reads
// the destination line (read-for-ownership), so a kernel writing y moves 3 units of memory where a copy
// with streaming stores moves 2. Used when the destination is 16-byte aligned, plain stores otherwise; the
// driver ends with an sfence so the streamed lines are visible when the call returns.
extern "C" inline void* tp_store8_f32_nt(float* src, float* dst) {
#ifdef TP_X86_SIMD
  if (((uintptr_t)dst & 31) == 0) {
    _mm256_stream_ps(dst, _mm256_loadu_ps(src));
    return 0;
  }
#endif
  return tp_store8_f32(src, dst);
}

extern "C" inline void* tp_store8_u16_nt(uint16_t* tmp, uint16_t* dst) {
#ifdef TP_X86_SIMD
  if (((uintptr_t)dst & 15) == 0) {
    _mm_stream_si128((__m128i*)dst, _mm_loadu_si128((const __m128i*)tmp));
    return 0;
  }
#endif
  memcpy(dst, tmp, 16);
  return 0;
}

extern "C" inline void* tp_store8_f16_nt(float* src, uint16_t* dst) {
  uint16_t tmp[8];
  tp_store8_f16(src, tmp);
  return tp_store8_u16_nt(tmp, dst);
}

extern "C" inline void* tp_store8_bf16_nt(float* src, uint16_t* dst) {
  uint16_t tmp[8];
  tp_store8_bf16(src, tmp);
  return tp_store8_u16_nt(tmp, dst);
}

extern "C" inline void tp_store_fence() {
#ifdef TP_X86_SIMD
  _mm_sfence();
#endif
}
