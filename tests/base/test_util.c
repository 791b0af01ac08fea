/* test_util.c — proves src/base/util.c: CRC-32C against published vectors and a bit-at-a-time
 * reference, xoshiro256** and its splitmix64 seeding against published outputs, the
 * distributions of the generator, checked allocation refusing impossible sizes, the
 * monotonic clock and the peak-RSS reading.
 * Not here: what the modules do with these (checkpoint CRCs are in tests/io). */
#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/err.h"
#include "base/util.h"
#include "check.h"

/* The definition, one bit at a time: independent of util.c's slicing-by-8 tables. */
static uint32_t crc32c_bitwise(uint32_t crc, const uint8_t *p, size_t n)
{
    crc = ~crc;
    while (n--) {
        crc ^= *p++;
        for (int k = 0; k < 8; k++) crc = crc & 1 ? (crc >> 1) ^ 0x82F63B78u : crc >> 1;
    }
    return ~crc;
}

static void crc32c_matches_rfc3720_vectors(void)
{
    CHECK(sh_crc32c(0, "123456789", 9) == 0xE3069283u, "\"123456789\": %08x",
          sh_crc32c(0, "123456789", 9));
    uint8_t buf[32];
    memset(buf, 0, sizeof buf);
    CHECK(sh_crc32c(0, buf, 32) == 0x8A9136AAu, "32 zeros: %08x", sh_crc32c(0, buf, 32));
    memset(buf, 0xff, sizeof buf);
    CHECK(sh_crc32c(0, buf, 32) == 0x62A8AB43u, "32 x 0xff: %08x", sh_crc32c(0, buf, 32));
    for (int i = 0; i < 32; i++) buf[i] = (uint8_t)i;
    CHECK(sh_crc32c(0, buf, 32) == 0x46DD794Eu, "0..31: %08x", sh_crc32c(0, buf, 32));
    for (int i = 0; i < 32; i++) buf[i] = (uint8_t)(31 - i);
    CHECK(sh_crc32c(0, buf, 32) == 0x113FDB5Cu, "31..0: %08x", sh_crc32c(0, buf, 32));
    /* RFC 3720 B.4: an iSCSI read command PDU */
    static const uint8_t pdu[48] = {0x01, 0xc0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
                                    0x14, 0, 0, 0, 0, 0, 0x04, 0, 0, 0, 0, 0x14, 0, 0, 0, 0x18,
                                    0x28, 0, 0, 0, 0, 0, 0, 0, 0x02, 0, 0, 0, 0, 0, 0, 0};
    CHECK(sh_crc32c(0, pdu, sizeof pdu) == 0xD9963A56u, "iSCSI PDU: %08x",
          sh_crc32c(0, pdu, sizeof pdu));
    CHECK(sh_crc32c(0, "", 0) == 0, "empty input: %08x", sh_crc32c(0, "", 0));
    CHECK(sh_crc32c(0x12345678u, buf, 0) == 0x12345678u, "no bytes leave the crc as it was");
}

/* Every length 0..80 at every alignment 0..7 (the slicing loop and its byte tail), and every
 * split point of a chained computation, against the bitwise definition. */
static void crc32c_matches_bitwise_at_every_length_alignment_and_split(void)
{
    uint8_t data[96];
    sh_rng r;
    sh_rng_seed(&r, 7);
    for (size_t i = 0; i < sizeof data; i++) data[i] = (uint8_t)sh_rng_u64(&r);
    int bad_len = 0, bad_split = 0;
    size_t first_len = 0, first_off = 0;
    for (size_t off = 0; off < 8; off++)
        for (size_t len = 0; len <= 80; len++) {
            uint32_t want = crc32c_bitwise(0, data + off, len);
            if (sh_crc32c(0, data + off, len) != want && !bad_len++) first_len = len, first_off = off;
            for (size_t cut = 0; cut <= len; cut++) {
                uint32_t a = sh_crc32c(sh_crc32c(0, data + off, cut), data + off + cut, len - cut);
                if (a != want) bad_split++;
            }
        }
    CHECK(bad_len == 0, "%d lengths differ from the bitwise crc, first len %zu offset %zu",
          bad_len, first_len, first_off);
    CHECK(bad_split == 0, "%d chained computations differ from one pass", bad_split);
    /* a single flipped bit changes the crc */
    uint32_t before = sh_crc32c(0, data, 64);
    data[13] ^= 0x10;
    CHECK(sh_crc32c(0, data, 64) != before, "a flipped bit went unnoticed");
}

/* Seeding is splitmix64 (published outputs for seed 0) and the step is xoshiro256**
 * (published outputs from state {1, 2, 3, 4}): the same sequence on every machine. */
static void rng_matches_published_xoshiro256starstar_and_splitmix64(void)
{
    sh_rng r;
    sh_rng_seed(&r, 0);
    static const uint64_t sm0[4] = {0xe220a8397b1dcdafull, 0x6e789e6aa1b965f4ull,
                                    0x06c45d188009454full, 0xf88bb8a8724c81ecull};
    for (int i = 0; i < 4; i++)
        CHECK(r.s[i] == sm0[i], "seed 0: state word %d is %016llx, want %016llx", i,
              (unsigned long long)r.s[i], (unsigned long long)sm0[i]);
    r.s[0] = 1, r.s[1] = 2, r.s[2] = 3, r.s[3] = 4;
    static const uint64_t want[6] = {11520ull, 0ull, 1509978240ull, 1215971899390074240ull,
                                     1216172134540287360ull, 607988272756665600ull};
    for (int i = 0; i < 6; i++) {
        uint64_t got = sh_rng_u64(&r);
        CHECK(got == want[i], "output %d from {1,2,3,4}: %llu, want %llu", i,
              (unsigned long long)got, (unsigned long long)want[i]);
    }
}

static void rng_same_seed_same_stream_different_seeds_differ(void)
{
    enum { N = 1000 };
    sh_rng a, b, c;
    sh_rng_seed(&a, 12345);
    sh_rng_seed(&b, 12345);
    sh_rng_seed(&c, 12346);
    int same_ab = 0, same_ac = 0;
    for (int i = 0; i < N; i++) {
        uint64_t x = sh_rng_u64(&a), y = sh_rng_u64(&b), z = sh_rng_u64(&c);
        same_ab += x == y;
        same_ac += x == z;
    }
    CHECK(same_ab == N, "same seed: %d of %d outputs equal", same_ab, N);
    CHECK(same_ac == 0, "seeds 12345 and 12346: %d of %d outputs equal", same_ac, N);
    /* the float, bounded and normal draws are deterministic too */
    sh_rng_seed(&a, 99);
    sh_rng_seed(&b, 99);
    int same = 1;
    for (int i = 0; i < N; i++) {
        if (sh_rng_float(&a) != sh_rng_float(&b)) same = 0;
        if (sh_rng_below(&a, 1000003) != sh_rng_below(&b, 1000003)) same = 0;
        if (sh_rng_normal(&a) != sh_rng_normal(&b)) same = 0;
    }
    CHECK(same, "float/below/normal differ between two generators with seed 99");
}

static void rng_float_and_below_are_uniform_in_range(void)
{
    enum { N = 70000, K = 7 };
    sh_rng r;
    sh_rng_seed(&r, 2024);
    int out = 0, counts[K] = {0};
    double sum = 0;
    float lo = 1, hi = 0;
    for (int i = 0; i < N; i++) {
        float f = sh_rng_float(&r);
        if (!(f >= 0.0f && f < 1.0f)) out++;
        lo = f < lo ? f : lo;
        hi = f > hi ? f : hi;
        sum += f;
        uint64_t k = sh_rng_below(&r, K);
        if (k >= K) out++;
        else counts[k]++;
    }
    CHECK(out == 0, "%d draws outside [0,1) or [0,%d)", out, K);
    CHECK_NEAR(sum / N, 0.5, 0.01);
    CHECK(lo < 0.001f && hi > 0.999f, "floats span [%g, %g]", lo, hi);
    /* chi-square with 6 degrees of freedom: 22.5 is the 0.999 quantile */
    double chi = 0, e = (double)N / K;
    for (int k = 0; k < K; k++) chi += (counts[k] - e) * (counts[k] - e) / e;
    CHECK(chi < 22.5, "below(7) is not uniform: chi-square %.1f", chi);
    CHECK(sh_rng_below(&r, 0) == 0 && sh_rng_below(&r, 1) == 0, "below(0) and below(1) are 0");
    /* a bound above 2^63 reaches its top half */
    uint64_t big = (UINT64_C(1) << 63) + 12345, top = 0;
    for (int i = 0; i < 64; i++) {
        uint64_t x = sh_rng_below(&r, big);
        CHECK(x < big, "below(2^63+12345) gave %llu", (unsigned long long)x);
        if (x >= UINT64_C(1) << 62) top++;
    }
    CHECK(top > 16, "below(2^63+12345): only %llu of 64 draws above 2^62", (unsigned long long)top);
}

static void rng_normal_has_zero_mean_unit_variance(void)
{
    enum { N = 100000 };
    sh_rng r;
    sh_rng_seed(&r, 5);
    double s = 0, s2 = 0;
    int finite = 1;
    for (int i = 0; i < N; i++) {
        double x = sh_rng_normal(&r);
        if (!isfinite(x)) finite = 0;
        s += x;
        s2 += x * x;
    }
    double mean = s / N, var = s2 / N - mean * mean;
    CHECK(finite, "a normal draw is not finite");
    CHECK_NEAR(mean, 0.0, 0.02);
    CHECK_NEAR(var, 1.0, 0.03);
}

static void calloc_zeroes_and_refuses_impossible_sizes(void)
{
    void *p = NULL;
    CHECK_OK(sh_calloc(100, 8, &p));
    int zero = p != NULL;
    for (int i = 0; p && i < 800; i++) zero &= ((unsigned char *)p)[i] == 0;
    CHECK(zero, "sh_calloc(100, 8) not zeroed");
    free(p);
    p = NULL;
    CHECK_OK(sh_calloc(0, 8, &p));
    CHECK(p != NULL, "sh_calloc(0, 8) gives a pointer that can be freed");
    free(p);

    p = (void *)1;
    CHECK_RC(sh_calloc(SIZE_MAX / 2, 3, &p), SHOAL_ERR_NOMEM);
    CHECK(p == NULL, "out is NULL after a refusal");
    CHECK(strstr(shoal_last_error_message(), "overflows") != NULL, "message: %s",
          shoal_last_error_message());
    char want[64];
    snprintf(want, sizeof want, "%zu x 3 bytes", SIZE_MAX / 2);
    CHECK(strstr(shoal_last_error_message(), want) != NULL, "message names the size: %s",
          shoal_last_error_message());
}

/* An allocator that cannot return that much says so; it never hands back a smaller block.
 * (SIZE_MAX once rounded up to the alignment wrapped to 0 and came back as 64 bytes.) */
static void alloc_aligned_refuses_sizes_that_cannot_round_up(void)
{
    size_t sizes[] = {SIZE_MAX, SIZE_MAX - 63, SIZE_MAX - ((size_t)2 << 20) + 2};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        void *p = (void *)1;
        shoal_result rc = sh_alloc_aligned(sizes[i], &p);
        CHECK(rc == SHOAL_ERR_NOMEM, "sh_alloc_aligned(%zu) returned %s", sizes[i],
              shoal_result_name(rc));
        CHECK(p == NULL, "sh_alloc_aligned(%zu): out is not NULL", sizes[i]);
        if (rc == SHOAL_OK) sh_free_aligned(p);
        else {
            char want[32];
            snprintf(want, sizeof want, "%zu bytes", sizes[i]);
            CHECK(strstr(shoal_last_error_message(), want) != NULL, "message names the size: %s",
                  shoal_last_error_message());
        }
    }
}

static void alloc_aligned_is_aligned_and_zeroed(void)
{
    size_t sizes[] = {0, 1, 63, 64, 65, 4096, (size_t)4 << 20, ((size_t)4 << 20) + 1};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        void *p = NULL;
        CHECK_OK(sh_alloc_aligned(sizes[i], &p));
        if (!p) continue;
        CHECK((uintptr_t)p % 64 == 0, "size %zu: %p not 64-byte aligned", sizes[i], p);
        if (sizes[i] >= (size_t)4 << 20)
            CHECK((uintptr_t)p % ((size_t)2 << 20) == 0, "size %zu: %p not on a 2 MiB boundary",
                  sizes[i], p);
        size_t nonzero = 0;
        for (size_t b = 0; b < sizes[i]; b++) nonzero += ((unsigned char *)p)[b] != 0;
        CHECK(nonzero == 0, "size %zu: %zu bytes not zeroed", sizes[i], nonzero);
        memset(p, 0xab, sizes[i]); /* the whole size is writable (ASan checks the bounds) */
        sh_free_aligned(p);
    }
}

static void monotonic_clock_never_goes_backwards(void)
{
    uint64_t prev = sh_now_ns(), start = prev;
    int backwards = 0;
    for (int i = 0; i < 100000; i++) {
        uint64_t t = sh_now_ns();
        if (t < prev) backwards++;
        prev = t;
    }
    CHECK(backwards == 0, "the clock went backwards %d times", backwards);
    struct timespec ts = {0, 20 * 1000 * 1000};
    nanosleep(&ts, NULL);
    uint64_t slept = sh_now_ns() - prev;
    CHECK(slept >= 20000000ull && slept < 5000000000ull, "a 20 ms sleep measured %llu ns",
          (unsigned long long)slept);
    CHECK(prev > start, "the clock did not advance over 100000 reads");
    double s = sh_now_s(), ns = (double)sh_now_ns() * 1e-9;
    CHECK(ns >= s && ns - s < 1.0, "sh_now_s %.9f vs sh_now_ns %.9f", s, ns);
}

static void peak_rss_grows_when_memory_is_touched(void)
{
    size_t before = sh_peak_rss_nbytes();
    CHECK(before > 0, "peak RSS is 0 (cannot read /proc/self/status?)");
    size_t n = (size_t)64 << 20;
    char *p = malloc(n);
    CHECK(p != NULL, "malloc 64 MiB");
    if (!p) return;
    memset(p, 1, n);
    size_t after = sh_peak_rss_nbytes();
    CHECK(after >= before + (n / 2), "peak RSS %zu -> %zu after touching 64 MiB", before, after);
    free(p);
    /* a peak: it stays after the memory is returned (the kernel's counts are approximate to
     * a few pages, so compare against the growth, not the exact byte) */
    size_t later = sh_peak_rss_nbytes();
    CHECK(later >= before + (n / 2), "peak RSS fell after free: %zu -> %zu (before %zu)", after,
          later, before);
}

static void edit_distance_counts_edits_and_swaps_without_case(void)
{
    CHECK(sh_edit_distance("epochs", "epochs") == 0, "same");
    CHECK(sh_edit_distance("epoch", "epochs") == 1, "one insertion");
    CHECK(sh_edit_distance("EPOCHS", "epochs") == 0, "case");
    CHECK(sh_edit_distance("micro-bacthes", "micro-batches") == 1, "a swap of neighbours is one edit");
    CHECK(sh_edit_distance("", "ps") == 2, "from nothing");
    CHECK(sh_edit_distance("pipeline", "tensor") == 7, "%d", sh_edit_distance("pipeline", "tensor"));
    char longer[80];
    memset(longer, 'a', sizeof longer - 1);
    longer[sizeof longer - 1] = 0;
    CHECK(sh_edit_distance(longer, "a") == INT_MAX, "past 63 characters");
}

int main(void)
{
    check_begin("test_util", 60);
    RUN(crc32c_matches_rfc3720_vectors);
    RUN(crc32c_matches_bitwise_at_every_length_alignment_and_split);
    RUN(rng_matches_published_xoshiro256starstar_and_splitmix64);
    RUN(rng_same_seed_same_stream_different_seeds_differ);
    RUN(rng_float_and_below_are_uniform_in_range);
    RUN(rng_normal_has_zero_mean_unit_variance);
    RUN(calloc_zeroes_and_refuses_impossible_sizes);
    RUN(alloc_aligned_refuses_sizes_that_cannot_round_up);
    RUN(alloc_aligned_is_aligned_and_zeroed);
    RUN(monotonic_clock_never_goes_backwards);
    RUN(peak_rss_grows_when_memory_is_touched);
    RUN(edit_distance_counts_edits_and_swaps_without_case);
    return check_end();
}
