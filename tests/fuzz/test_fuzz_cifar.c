/* test_fuzz_cifar.c — the fuzz target fuzz_cifar.c as a test of `make test`: its seed corpus and a
 * few seconds of deterministic mutations through tests/fuzz/driver.c (gcc; no clang needed). */
#define FUZZ_NAME "cifar"
#include "fuzz_cifar.c"
#include "driver.c"
