/* test_fuzz_checkpoint.c — the fuzz target fuzz_checkpoint.c as a test of `make test`: its seed corpus and a
 * few seconds of deterministic mutations through tests/fuzz/driver.c (gcc; no clang needed). */
#define FUZZ_NAME "checkpoint"
#include "fuzz_checkpoint.c"
#include "driver.c"
