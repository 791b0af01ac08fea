/* glibc_rand.h — glibc's rand() rebuilt (stdlib/random_r.c, the default TYPE_3 generator), so
 * that shoal can draw the numbers a C program seeded with srand(N) draws, on any libc:
 * `shoal generate --sampler darknet` repeats `darknet rnn generate -srand N`.
 * The generator: r[0] = seed (0 taken as 1), r[i] = 16807 r[i-1] mod 2^31 - 1 for i < 31,
 * r[31..33] = r[0..2], then r[i] = r[i-3] + r[i-31] mod 2^32; the k-th rand() (k from 0) is
 * r[k + 344] >> 1, in [0, SH_GLIBC_RAND_MAX].
 * Not here: what is drawn with it (src/cli/cmd_generate.c).
 * Proved by tests/base/test_glibc_rand.c (against the C library's rand() where it is glibc). */
#ifndef SH_GLIBC_RAND_H
#define SH_GLIBC_RAND_H

#include <stdint.h>

#define SH_GLIBC_RAND_MAX 2147483647

typedef struct {
    uint32_t s[31]; /* r[i-31..i-1], r[j] at slot j mod 31 */
    uint64_t i;     /* index of the next r */
} sh_glibc_rand;

static inline uint32_t sh_glibc_rand_next(sh_glibc_rand *g)
{
    uint32_t v = g->s[g->i % 31] + g->s[(g->i - 3) % 31]; /* slot i mod 31 holds r[i-31] */
    g->s[g->i % 31] = v;
    g->i++;
    return v >> 1;
}

/* srand(seed): glibc keeps the seed as an int32 */
static inline void sh_glibc_rand_seed(sh_glibc_rand *g, uint32_t seed)
{
    int32_t w = seed ? (int32_t)seed : 1;
    g->s[0] = (uint32_t)w;
    for (int i = 1; i < 31; i++) { /* 16807 w mod 2^31 - 1 without overflow (Schrage) */
        int32_t hi = w / 127773, lo = w % 127773;
        w = 16807 * lo - 2836 * hi;
        if (w < 0) w += SH_GLIBC_RAND_MAX;
        g->s[i] = (uint32_t)w;
    }
    g->i = 34; /* r[31..33] = r[0..2], already in their slots */
    for (int k = 34; k < 344; k++) (void)sh_glibc_rand_next(g);
}

#endif
