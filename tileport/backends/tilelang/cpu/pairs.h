// tileport CPU prelude of kernels over pairs or halves of a head's last dimension (rotary embeddings), after
// simd.h (its 16-lane type tp_v16 and dtype bridges).
//
// Products rounded on their own: the build contracts a * b - c * d into an FMA (-ffp-contract=fast), which
// rounds once where torch's composite rounds each product, so tp_mul_rounded hides each product from the
// compiler (an empty asm statement holding it in a register) and the sum of two of them cannot fuse.
// Interleaved pairs (x[2i], x[2i + 1]) are split into an even and an odd vector in registers, from the
// tensor in place: no de-interleaved copy. Copies of the columns a rotation leaves alone move the bits.

#if defined(__x86_64__) || defined(__i386__)
#define TP_OPAQUE(r) __asm__("" : "+v"(r))
#elif defined(__aarch64__)
#define TP_OPAQUE(r) __asm__("" : "+w"(r))
#else
#define TP_OPAQUE(r) __asm__("" : "+m"(r))
#endif

// a * b per lane, each product rounded to fp32 before any use (never fused into an add).
TP_HELPER tp_v16 tp_mul_rounded(tp_v16 a, tp_v16 b) {
  tp_v16 r;
#pragma GCC unroll 4
  for (int i = 0; i < TP_PARTS; ++i) {
    tp_nf p = a.v[i] * b.v[i];
    TP_OPAQUE(p);
    r.v[i] = p;
  }
  return r;
}

// Lane selectors of one native register for splitting 2 x TP_NATIVE consecutive lanes into even and odd ones,
// and for interleaving two registers' lanes back (the low and high halves of the pairs).
#if TP_NATIVE == 16
#define TP_EVEN {0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30}
#define TP_ODD {1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31}
#define TP_ZIP_LO {0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23}
#define TP_ZIP_HI {8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31}
#elif TP_NATIVE == 8
#define TP_EVEN {0, 2, 4, 6, 8, 10, 12, 14}
#define TP_ODD {1, 3, 5, 7, 9, 11, 13, 15}
#define TP_ZIP_LO {0, 8, 1, 9, 2, 10, 3, 11}
#define TP_ZIP_HI {4, 12, 5, 13, 6, 14, 7, 15}
#else
#define TP_EVEN {0, 2, 4, 6}
#define TP_ODD {1, 3, 5, 7}
#define TP_ZIP_LO {0, 4, 1, 5}
#define TP_ZIP_HI {2, 6, 3, 7}
#endif

// 32 consecutive lanes (lo: 0-15, hi: 16-31) as their even and odd lanes.
static inline void tp_unzip(const tp_v16& lo, const tp_v16& hi, tp_v16* even, tp_v16* odd) {
  const tp_nf* u[2] = {lo.v, hi.v};
#pragma GCC unroll 4
  for (int i = 0; i < TP_PARTS; ++i) {
    const tp_nf a = u[(2 * i) / TP_PARTS][(2 * i) % TP_PARTS], b = u[(2 * i + 1) / TP_PARTS][(2 * i + 1) % TP_PARTS];
    even->v[i] = __builtin_shuffle(a, b, (tp_ni)TP_EVEN);
    odd->v[i] = __builtin_shuffle(a, b, (tp_ni)TP_ODD);
  }
}

// The inverse: even and odd lanes interleaved into 32 consecutive lanes.
static inline void tp_zip(const tp_v16& even, const tp_v16& odd, tp_v16* lo, tp_v16* hi) {
  tp_nf* u[2] = {lo->v, hi->v};
#pragma GCC unroll 4
  for (int i = 0; i < TP_PARTS; ++i) {
    u[(2 * i) / TP_PARTS][(2 * i) % TP_PARTS] = __builtin_shuffle(even.v[i], odd.v[i], (tp_ni)TP_ZIP_LO);
    u[(2 * i + 1) / TP_PARTS][(2 * i + 1) % TP_PARTS] = __builtin_shuffle(even.v[i], odd.v[i], (tp_ni)TP_ZIP_HI);
  }
}

// 16 interleaved pairs from src (32 elements) as fp32: first and second of each pair; the *n forms move the
// first n pairs (0 <= n <= 16) and zero the other lanes. Stores write pairs back interleaved, rounded to the
// storage dtype; the _nt form with streaming stores (simd.h's, where the destination is aligned).
#define TP_PAIRS(tag, T)                                                                                 \
  TP_HELPER void* tp_load_pairs_##tag(T* src, tp_v16* first, tp_v16* second) {                  \
    tp_v16 lo, hi;                                                                                       \
    tp_load_##tag(src, &lo);                                                                             \
    tp_load_##tag(src + 16, &hi);                                                                        \
    tp_unzip(lo, hi, first, second);                                                                     \
    return 0;                                                                                            \
  }                                                                                                      \
  TP_HELPER void* tp_loadn_pairs_##tag(T* src, tp_v16* first, tp_v16* second, int32_t n) {       \
    tp_v16 lo, hi = tp_v16(0.0f);                                                                        \
    tp_loadn_##tag(src, &lo, 2 * n < 16 ? 2 * n : 16);                                                   \
    if (n > 8) tp_loadn_##tag(src + 16, &hi, 2 * n - 16);                                                \
    tp_unzip(lo, hi, first, second);                                                                     \
    return 0;                                                                                            \
  }                                                                                                      \
  TP_HELPER void* tp_store_pairs_##tag(tp_v16* first, tp_v16* second, T* dst) {                  \
    tp_v16 lo, hi;                                                                                       \
    tp_zip(*first, *second, &lo, &hi);                                                                   \
    tp_store_##tag(&lo, dst);                                                                            \
    tp_store_##tag(&hi, dst + 16);                                                                       \
    return 0;                                                                                            \
  }                                                                                                      \
  TP_HELPER void* tp_storen_pairs_##tag(tp_v16* first, tp_v16* second, T* dst, int32_t n) {      \
    tp_v16 lo, hi;                                                                                       \
    tp_zip(*first, *second, &lo, &hi);                                                                   \
    tp_storen_##tag(&lo, dst, 2 * n < 16 ? 2 * n : 16);                                                  \
    if (n > 8) tp_storen_##tag(&hi, dst + 16, 2 * n - 16);                                               \
    return 0;                                                                                            \
  }                                                                                                      \
  TP_HELPER void* tp_store_pairs_##tag##_nt(tp_v16* first, tp_v16* second, T* dst) {             \
    tp_v16 lo, hi;                                                                                       \
    tp_zip(*first, *second, &lo, &hi);                                                                   \
    tp_store_##tag##_nt(&lo, dst);                                                                       \
    tp_store_##tag##_nt(&hi, dst + 16);                                                                  \
    return 0;                                                                                            \
  }                                                                                                      \
  TP_HELPER void* tp_copy_##tag(T* src, T* dst, int32_t n) {                                     \
    memcpy(dst, src, (size_t)n * sizeof(T));                                                             \
    return 0;                                                                                            \
  }
TP_PAIRS(f32, float)
TP_PAIRS(f16, uint16_t)
TP_PAIRS(bf16, uint16_t)
#undef TP_PAIRS
