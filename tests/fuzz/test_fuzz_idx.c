/* test_fuzz_idx.c — the fuzz target fuzz_idx.c as a test of `make test`: its seed corpus and a
 * few seconds of deterministic mutations through tests/fuzz/driver.c (gcc; no clang needed). */
#define FUZZ_NAME "idx"
#include "fuzz_idx.c"
#include "driver.c"
