/* test_fuzz_auth.c — the fuzz target fuzz_auth.c as a test of `make test`: its seed corpus and a
 * few seconds of deterministic mutations through tests/fuzz/driver.c (gcc; no clang needed). */
#define FUZZ_NAME "auth"
#include "fuzz_auth.c"
#include "driver.c"
