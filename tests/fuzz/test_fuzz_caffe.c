/* test_fuzz_caffe.c — the fuzz target fuzz_caffe.c as a test of `make test`: its seed corpus and
 * a few seconds of deterministic mutations through tests/fuzz/driver.c (gcc; no clang needed). */
#define FUZZ_NAME "caffe"
#include "fuzz_caffe.c"
#include "driver.c"
