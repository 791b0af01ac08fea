/* test_fuzz_cfg.c — the fuzz target fuzz_cfg.c as a test of `make test`: its seed corpus and a
 * few seconds of deterministic mutations through tests/fuzz/driver.c (gcc; no clang needed). */
#define FUZZ_NAME "cfg"
#include "fuzz_cfg.c"
#include "driver.c"
