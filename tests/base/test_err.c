/* test_err.c — proves src/base/err.c and src/base/env.c and src/base/util.c. */
#include <stdlib.h>
#include <string.h>

#include "base/env.h"
#include "base/err.h"
#include "base/util.h"
#include "check.h"

static shoal_result inner(int x)
{
    if (x > 2) return SH_FAIL(SHOAL_ERR_INVALID, "x is %d, want at most 2", x);
    return SHOAL_OK;
}

static shoal_result outer(int x)
{
    SH_TRY(inner(x));
    return SHOAL_OK;
}

static void fail_stores_message_location_and_breadcrumb(void)
{
    sh_err_clear();
    CHECK(outer(1) == SHOAL_OK, "outer(1) should succeed");
    CHECK_RC(outer(5), SHOAL_ERR_INVALID);
    CHECK(strcmp(shoal_last_error_message(), "x is 5, want at most 2") == 0, "message: %s",
          shoal_last_error_message());
    CHECK(strstr(shoal_last_error(), "src/base/../../tests/base/test_err.c") != NULL ||
              strstr(shoal_last_error(), "test_err.c:") != NULL,
          "location missing: %s", shoal_last_error());
    CHECK(strstr(shoal_last_error(), "\n  from ") != NULL, "breadcrumb missing: %s",
          shoal_last_error());
}

static void prefix_adds_context_to_message(void)
{
    (void)SH_FAIL(SHOAL_ERR_PEER, "no data");
    sh_err_prefix("rank %d: ", 3);
    CHECK(strcmp(shoal_last_error_message(), "rank 3: no data") == 0, "got %s",
          shoal_last_error_message());
}

/* The communicator names its rank, and so does the training rank around it: the message
 * names it once ("rank 1: rank 1: allreduce" was the bug); a new error starts afresh. */
static void rank_prefix_names_the_rank_once(void)
{
    (void)SH_FAIL(SHOAL_ERR_PEER, "allreduce with rank 2: the peer exited");
    sh_err_prefix_rank(1);
    sh_err_prefix_rank(1);
    CHECK(strcmp(shoal_last_error_message(), "rank 1: allreduce with rank 2: the peer exited") == 0, "got %s",
          shoal_last_error_message());
    CHECK(strstr(shoal_last_error(), "rank 1: rank 1") == NULL, "full text: %s", shoal_last_error());
    (void)SH_FAIL(SHOAL_ERR_PEER, "no data");
    sh_err_prefix_rank(1);
    CHECK(strcmp(shoal_last_error_message(), "rank 1: no data") == 0, "got %s", shoal_last_error_message());
}

static void env_long_reads_default_and_rejects_garbage(void)
{
    long v = 0;
    unsetenv("SHOAL_TIMEOUT");
    CHECK_OK(sh_env_long("SHOAL_TIMEOUT", &v));
    CHECK(v == 60000, "default timeout %ld", v);
    setenv("SHOAL_TIMEOUT", "12x", 1);
    CHECK_RC(sh_env_long("SHOAL_TIMEOUT", &v), SHOAL_ERR_INVALID);
    CHECK(strstr(shoal_last_error_message(), "SHOAL_TIMEOUT") != NULL, "names variable: %s",
          shoal_last_error_message());
    setenv("SHOAL_TIMEOUT", "0", 1);
    CHECK_RC(sh_env_long("SHOAL_TIMEOUT", &v), SHOAL_ERR_INVALID);
    setenv("SHOAL_TIMEOUT", "250", 1);
    CHECK_OK(sh_env_long("SHOAL_TIMEOUT", &v));
    CHECK(v == 250, "got %ld", v);
    unsetenv("SHOAL_TIMEOUT");
}

static void crc32c_matches_known_vector(void)
{
    /* RFC 3720 test vector: CRC-32C of "123456789" is 0xE3069283 */
    CHECK(sh_crc32c(0, "123456789", 9) == 0xE3069283u, "crc %08x", sh_crc32c(0, "123456789", 9));
    /* continuing a CRC equals one pass */
    uint32_t a = sh_crc32c(sh_crc32c(0, "12345", 5), "6789", 4);
    CHECK(a == 0xE3069283u, "chained crc %08x", a);
}

static void rng_is_deterministic_and_in_range(void)
{
    sh_rng a, b;
    sh_rng_seed(&a, 42);
    sh_rng_seed(&b, 42);
    int same = 1, in_range = 1;
    for (int i = 0; i < 1000; i++) {
        if (sh_rng_u64(&a) != sh_rng_u64(&b)) same = 0;
        float f = sh_rng_float(&a);
        if (f < 0 || f >= 1) in_range = 0;
        if (sh_rng_below(&b, 7) >= 7) in_range = 0;
        sh_rng_u64(&a), sh_rng_u64(&b);
    }
    CHECK(same, "same seed gives same sequence");
    CHECK(in_range, "values in range");
}

int main(void)
{
    check_begin("test_err", 30);
    RUN(fail_stores_message_location_and_breadcrumb);
    RUN(prefix_adds_context_to_message);
    RUN(rank_prefix_names_the_rank_once);
    RUN(env_long_reads_default_and_rejects_garbage);
    RUN(crc32c_matches_known_vector);
    RUN(rng_is_deterministic_and_in_range);
    return check_end();
}
