/* test_fuzz_image.c — the fuzz target fuzz_image.c as a test of `make test`: its seed corpus
 * and a few seconds of deterministic mutations through tests/fuzz/driver.c (gcc; no clang). */
#define FUZZ_NAME "image"
#include "fuzz_image.c"
#include "driver.c"
