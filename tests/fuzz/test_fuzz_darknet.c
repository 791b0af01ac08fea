/* test_fuzz_darknet.c — the fuzz target fuzz_darknet.c as a test of `make test`: its seed corpus and a
 * few seconds of deterministic mutations through tests/fuzz/driver.c (gcc; no clang needed). */
#define FUZZ_NAME "darknet"
#include "fuzz_darknet.c"
#include "driver.c"
