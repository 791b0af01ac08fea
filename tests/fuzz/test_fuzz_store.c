/* test_fuzz_store.c — the fuzz target fuzz_store.c as a test of `make test`: its seed corpus and a
 * few seconds of deterministic mutations through tests/fuzz/driver.c (gcc; no clang needed). */
#define FUZZ_NAME "store"
#include "fuzz_store.c"
#include "driver.c"
