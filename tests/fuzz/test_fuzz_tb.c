/* test_fuzz_tb.c — the fuzz target fuzz_tb.c as a test of `make test`: its seed corpus and a
 * few seconds of deterministic mutations through tests/fuzz/driver.c (gcc; no clang needed). */
#define FUZZ_NAME "tb"
#include "fuzz_tb.c"
#include "driver.c"
