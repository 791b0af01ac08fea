/* test_glibc_rand.c — proves src/base/glibc_rand.h: after the same seed it draws what the C
 * library's srand()/rand() draw (where the C library is glibc), the seeds 0 and 1 alike, and
 * seeds above 2^31 as glibc keeps them (an int32). */
#include <stdint.h>
#include <stdlib.h>

#include "base/glibc_rand.h"
#include "check.h"

static void draws_what_glibc_rand_draws(void)
{
#ifdef __GLIBC__
    static const uint32_t seeds[] = {0, 1, 7, 12345, 2147483647u, 3000000000u, 4294967295u};
    CHECK(RAND_MAX == SH_GLIBC_RAND_MAX, "RAND_MAX %d", RAND_MAX);
    for (size_t s = 0; s < sizeof seeds / sizeof seeds[0]; s++) {
        sh_glibc_rand g;
        sh_glibc_rand_seed(&g, seeds[s]);
        srand(seeds[s]);
        int first_bad = -1;
        for (int k = 0; k < 100000 && first_bad < 0; k++)
            if ((int)sh_glibc_rand_next(&g) != rand()) first_bad = k;
        CHECK(first_bad < 0, "seed %u: draw %d differs from rand()'s", seeds[s], first_bad);
    }
#else
    printf("test_glibc_rand: the C library is not glibc: nothing to compare with\n");
#endif
}

static void seed_zero_is_seed_one(void)
{
    sh_glibc_rand a, b;
    sh_glibc_rand_seed(&a, 0);
    sh_glibc_rand_seed(&b, 1);
    int same = 1;
    for (int k = 0; k < 1000; k++) same &= sh_glibc_rand_next(&a) == sh_glibc_rand_next(&b);
    CHECK(same, "seeds 0 and 1 differ");
}

int main(void)
{
    check_begin("test_glibc_rand", 30);
    RUN(draws_what_glibc_rand_draws);
    RUN(seed_zero_is_seed_one);
    return check_end();
}
