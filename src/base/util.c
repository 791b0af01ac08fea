/* util.c — checked allocation, monotonic time, CRC-32C, xoshiro256** and peak RSS.
 * Not here: anything with policy; these are mechanisms.
 * Proved by tests/base/test_util.c. */
#include "base/util.h"

#include <ctype.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "base/err.h"

shoal_result sh_calloc(size_t count, size_t nbytes_each, void **out)
{
    *out = NULL;
    if (count && nbytes_each > SIZE_MAX / count)
        return SH_FAIL(SHOAL_ERR_NOMEM, "allocation of %zu x %zu bytes overflows", count,
                       nbytes_each);
    void *p = calloc(count ? count : 1, nbytes_each ? nbytes_each : 1);
    if (!p)
        return SH_FAIL(SHOAL_ERR_NOMEM, "out of memory allocating %zu bytes",
                       count * nbytes_each);
    *out = p;
    return SHOAL_OK;
}

/* Cache-line alignment: also what AVX-512 loads like best. */
#define ALIGN_NBYTES 64
#define HUGE_NBYTES ((size_t)2 << 20)
#define HUGE_MIN_NBYTES ((size_t)4 << 20)

shoal_result sh_alloc_aligned(size_t nbytes, void **out)
{
    *out = NULL;
    /* Large blocks (weights, gradients, optimizer state, activations) on 2 MiB pages where
     * the kernel offers them on request: fewer TLB misses for the GEMMs and sweeps, and
     * fewer pages to pin when a peer copies them across processes. */
    size_t align = nbytes >= HUGE_MIN_NBYTES ? HUGE_NBYTES : ALIGN_NBYTES;
    /* rounding SIZE_MAX up would wrap to 0 and hand back a 64-byte block */
    if (nbytes > SIZE_MAX - (align - 1))
        return SH_FAIL(SHOAL_ERR_NOMEM, "allocation of %zu bytes is larger than memory can be",
                       nbytes);
    size_t rounded = (nbytes + align - 1) / align * align;
    if (rounded == 0) rounded = ALIGN_NBYTES;
    void *p = aligned_alloc(align, rounded);
    if (!p) return SH_FAIL(SHOAL_ERR_NOMEM, "out of memory allocating %zu bytes", nbytes);
    if (align == HUGE_NBYTES) madvise(p, rounded, MADV_HUGEPAGE); /* a hint: refusal is fine */
    memset(p, 0, rounded);
    *out = p;
    return SHOAL_OK;
}

void sh_free_aligned(void *p) { free(p); }

uint64_t sh_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static uint32_t crc_table[8][256];
static int crc_ready;

static void crc_init(void)
{
    /* 0x82F63B78: the reflected Castagnoli polynomial (iSCSI, ext4, btrfs). */
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = c & 1 ? (c >> 1) ^ 0x82F63B78u : c >> 1;
        crc_table[0][i] = c;
    }
    for (int t = 1; t < 8; t++)
        for (int i = 0; i < 256; i++)
            crc_table[t][i] = (crc_table[t - 1][i] >> 8) ^ crc_table[0][crc_table[t - 1][i] & 0xff];
    __atomic_store_n(&crc_ready, 1, __ATOMIC_RELEASE);
}

uint32_t sh_crc32c(uint32_t crc, const void *data, size_t nbytes)
{
    if (!__atomic_load_n(&crc_ready, __ATOMIC_ACQUIRE)) crc_init();
    const uint8_t *p = data;
    crc = ~crc;
    /* slicing-by-8: eight table look-ups per 8 bytes */
    while (nbytes >= 8) {
        uint64_t v;
        memcpy(&v, p, 8);
        v ^= crc;
        crc = crc_table[7][v & 0xff] ^ crc_table[6][(v >> 8) & 0xff] ^
              crc_table[5][(v >> 16) & 0xff] ^ crc_table[4][(v >> 24) & 0xff] ^
              crc_table[3][(v >> 32) & 0xff] ^ crc_table[2][(v >> 40) & 0xff] ^
              crc_table[1][(v >> 48) & 0xff] ^ crc_table[0][v >> 56];
        p += 8;
        nbytes -= 8;
    }
    while (nbytes--) crc = (crc >> 8) ^ crc_table[0][(crc ^ *p++) & 0xff];
    return ~crc;
}

static uint64_t splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

void sh_rng_seed(sh_rng *r, uint64_t seed)
{
    for (int i = 0; i < 4; i++) r->s[i] = splitmix64(&seed);
}

static inline uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

uint64_t sh_rng_u64(sh_rng *r)
{
    uint64_t *s = r->s;
    uint64_t result = rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
}

float sh_rng_float(sh_rng *r) { return (float)(sh_rng_u64(r) >> 40) * (1.0f / 16777216.0f); }

uint64_t sh_rng_below(sh_rng *r, uint64_t n)
{
    if (n <= 1) return 0;
    /* rejection keeps it unbiased */
    uint64_t limit = UINT64_MAX - UINT64_MAX % n;
    uint64_t x;
    do x = sh_rng_u64(r);
    while (x >= limit);
    return x % n;
}

float sh_rng_normal(sh_rng *r)
{
    double u1 = ((double)(sh_rng_u64(r) >> 11) + 1.0) * (1.0 / 9007199254740993.0);
    double u2 = (double)(sh_rng_u64(r) >> 11) * (1.0 / 9007199254740992.0);
    return (float)(sqrt(-2.0 * log(u1)) * cos(2.0 * 3.14159265358979323846 * u2));
}

size_t sh_peak_rss_nbytes(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    if (!f) return 0;
    char line[256];
    size_t kb = 0;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "VmHWM: %zu kB", &kb) == 1) break;
    fclose(f);
    return kb * 1024;
}

double sh_sum_squares(const float *v, size_t n)
{
    double part[8] = {0}, sq = 0;
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int k = 0; k < 8; k++) part[k] += (double)v[i + k] * v[i + k];
    for (; i < n; i++) sq += (double)v[i] * v[i];
    for (int k = 0; k < 8; k++) sq += part[k];
    return sq;
}

int sh_edit_distance(const char *a, const char *b)
{
    enum { MAXLEN = 64 };
    size_t na = strlen(a), nb = strlen(b);
    if (na >= MAXLEN || nb >= MAXLEN) return INT_MAX;
    int d[MAXLEN + 1][MAXLEN + 1];
    for (size_t i = 0; i <= na; i++) d[i][0] = (int)i;
    for (size_t j = 0; j <= nb; j++) d[0][j] = (int)j;
    for (size_t i = 1; i <= na; i++)
        for (size_t j = 1; j <= nb; j++) {
            int ai = tolower((unsigned char)a[i - 1]), bj = tolower((unsigned char)b[j - 1]);
            int best = d[i - 1][j - 1] + (ai != bj);
            if (d[i - 1][j] + 1 < best) best = d[i - 1][j] + 1;
            if (d[i][j - 1] + 1 < best) best = d[i][j - 1] + 1;
            if (i > 1 && j > 1 && ai == tolower((unsigned char)b[j - 2]) &&
                tolower((unsigned char)a[i - 2]) == bj && d[i - 2][j - 2] + 1 < best)
                best = d[i - 2][j - 2] + 1;
            d[i][j] = best;
        }
    return d[na][nb];
}
