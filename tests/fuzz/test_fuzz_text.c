/* test_fuzz_text.c — the fuzz target fuzz_text.c as a test of `make test`: its seed corpus and a
 * few seconds of deterministic mutations through tests/fuzz/driver.c (gcc; no clang needed). */
#define FUZZ_NAME "text"
#include "fuzz_text.c"
#include "driver.c"
