/* half.h — whole-array float32 <-> float16 / bfloat16 conversions for the compressed
 * allreduce (round to nearest even; NaN stays a quiet NaN): F16C where the CPU has it,
 * else reduce.c's scalar conversions (the same results: tests/comm/test_reduce.c). Only
 * allreduce.c and codec.c include it.
 * Proved by tests/comm/test_compress.c (round trips against a reference). */
#ifndef SH_COMPRESS_HALF_H
#define SH_COMPRESS_HALF_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "comm/reduce.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#ifdef __clang__
#include <cpuid.h>
#endif
#define SH_HALF_X86 1

__attribute__((target("avx,f16c"))) static void sh_half_f16c_encode(const float *x, uint16_t *h, size_t n)
{
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(void *)(h + i), _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT));
    for (; i < n; i++) h[i] = sh_f32_to_f16(x[i]);
}

__attribute__((target("avx,f16c"))) static void sh_half_f16c_decode(const uint16_t *h, float *x, size_t n)
{
    size_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(x + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)(h + i))));
    for (; i < n; i++) x[i] = sh_f16_to_f32(h[i]);
}

static int sh_half_has_f16c(void)
{
    static int known = -1; /* a race writes the same value */
#ifdef __clang__ /* its __builtin_cpu_supports may not know "f16c": CPUID 1 ECX bits 27-29
                  * (OSXSAVE, AVX, F16C), and the OS saving the YMM registers (XCR0 bits 1-2) */
    if (known < 0) {
        unsigned a, b, c, d, lo, hi;
        int ok = __get_cpuid(1, &a, &b, &c, &d) && ((c >> 27) & 7u) == 7u;
        if (ok) {
            __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
            ok = (lo & 6u) == 6u;
        }
        known = ok;
    }
#else
    if (known < 0) known = __builtin_cpu_supports("f16c") && __builtin_cpu_supports("avx");
#endif
    return known;
}
#endif

/* h[i] = x[i] as float16 (bf = 0) or bfloat16 (bf = 1), i < n */
static inline void sh_half_encode(int bf, const float *x, uint16_t *h, size_t n)
{
    if (bf) {
        for (size_t i = 0; i < n; i++) { /* branch-free form of sh_f32_to_bf16 */
            uint32_t u;
            memcpy(&u, &x[i], sizeof u);
            uint32_t r = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
            uint32_t nan = (u >> 16) | 0x40u;
            h[i] = (uint16_t)((u & 0x7fffffffu) > 0x7f800000u ? nan : r);
        }
        return;
    }
#ifdef SH_HALF_X86
    if (sh_half_has_f16c()) {
        sh_half_f16c_encode(x, h, n);
        return;
    }
#endif
    for (size_t i = 0; i < n; i++) h[i] = sh_f32_to_f16(x[i]);
}

static inline void sh_half_decode(int bf, const uint16_t *h, float *x, size_t n)
{
    if (bf) {
        for (size_t i = 0; i < n; i++) {
            uint32_t u = (uint32_t)h[i] << 16;
            memcpy(&x[i], &u, sizeof u);
        }
        return;
    }
#ifdef SH_HALF_X86
    if (sh_half_has_f16c()) {
        sh_half_f16c_decode(h, x, n);
        return;
    }
#endif
    for (size_t i = 0; i < n; i++) x[i] = sh_f16_to_f32(h[i]);
}

#endif
