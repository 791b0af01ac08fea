/* test_fuzz_plot.c — the fuzz target fuzz_plot.c as a test of `make test`: its seed corpus and a
 * few seconds of deterministic mutations through tests/fuzz/driver.c (gcc; no clang needed). */
#define FUZZ_NAME "plot"
#include "fuzz_plot.c"
#include "driver.c"
