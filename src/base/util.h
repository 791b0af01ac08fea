/* util.h — small shared helpers: checked allocation, monotonic time, CRC-32C, a seeded
 * random generator. Each is a few lines; together they are the base every module uses.
 * Proved by tests/base/test_util.c. */
#ifndef SH_UTIL_H
#define SH_UTIL_H

#include <stddef.h>
#include <stdint.h>
#include "shoal/result.h"

/* Allocation that fails with SHOAL_ERR_NOMEM and a message naming what it was for. */
shoal_result sh_calloc(size_t count, size_t nbytes_each, void **out);
/* 64-byte aligned, zeroed; free with sh_free_aligned. */
shoal_result sh_alloc_aligned(size_t nbytes, void **out);
void sh_free_aligned(void *p);

/* Monotonic clock. */
uint64_t sh_now_ns(void);
static inline double sh_now_s(void) { return (double)sh_now_ns() * 1e-9; }

/* CRC-32C (Castagnoli); crc = 0 to start, feed the previous value to continue. */
uint32_t sh_crc32c(uint32_t crc, const void *data, size_t nbytes);

/* xoshiro256** seeded through splitmix64: same seed, same sequence, on every machine. */
typedef struct { uint64_t s[4]; } sh_rng;
void sh_rng_seed(sh_rng *r, uint64_t seed);
uint64_t sh_rng_u64(sh_rng *r);
/* Uniform in [0, 1). */
float sh_rng_float(sh_rng *r);
/* Uniform integer in [0, n). */
uint64_t sh_rng_below(sh_rng *r, uint64_t n);
/* Standard normal (Box-Muller). */
float sh_rng_normal(sh_rng *r);

/* Peak resident set size of this process in bytes (from /proc/self/status VmHWM). */
size_t sh_peak_rss_nbytes(void);

/* The sum of v[i]^2 in double, over eight partial sums (the loop vectorizes). */
double sh_sum_squares(const float *v, size_t n);

/* Edits (insertions, deletions, substitutions, swaps of neighbours) that turn a into b,
 * letters compared without case; INT_MAX past 63 characters: "did you mean". */
int sh_edit_distance(const char *a, const char *b);

#endif
