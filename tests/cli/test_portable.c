/* test_portable.c — proves the Makefile's portable build and base/hot.h's kernels chosen at run
 * time on the real binary ($SHOAL_BIN), under qemu-x86_64 with older CPUs: on a Nehalem
 * (x86-64-v2: SSE4.2, no AVX) it runs and picks its plain kernels, on a Haswell (AVX2, FMA)
 * its v3 clones, and both train to what this CPU trains to. A -march=native build dies there
 * with SIGILL. Skipped where qemu-x86_64 (qemu-user) is missing or the build is NATIVE=1. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "lib/run.h"
#include "train/tiny_data.h"

static char dir[256], out[1 << 16];

/* `shoal ARGS` in dir, under qemu with cpu (NULL: natively); its stdout (qemu's warnings about
 * the model's features go to stderr, dropped); the exit status. */
static int shoal_on(const char *cpu, const char *args)
{
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "cd %s && %s%s %s %s 2>/dev/null", dir, cpu ? "qemu-x86_64 -cpu " : "", cpu ? cpu : "",
             sh_test_shoal_bin(), args);
    return sh_test_run(cmd, out, sizeof out);
}

static void runs_on_older_cpus_with_their_kernels(void)
{
    const char *cpus[] = {"Nehalem", "Haswell"};
    const char *sets[] = {"this CPU has sse4.2\n", "this CPU has sse4.2 avx avx2 fma f16c\n"};
    char here[256] = "";
    int rc = shoal_on(NULL, "train mlp.cfg --data . --threads 1 --max-steps 40 --seed 2 --quiet");
    CHECK(rc == 0 && !strncmp(out, "test accuracy ", 14), "natively: exit %d: %s", rc, out);
    snprintf(here, sizeof here, "%.22s", out); /* "test accuracy NN.NN%," */
    for (int i = 0; i < 2; i++) {
        rc = shoal_on(cpus[i], "--version");
        CHECK(rc == 0 && strstr(out, sets[i]), "%s: exit %d (132: an illegal instruction): %s", cpus[i], rc, out);
        rc = shoal_on(cpus[i], "train mlp.cfg --data . --threads 1 --max-steps 40 --seed 2 --quiet");
        CHECK(rc == 0 && !strncmp(out, here, strlen(here)), "%s: exit %d: \"%s\", here \"%s\"", cpus[i], rc, out, here);
        rc = shoal_on(cpus[i], "time conv.cfg --iterations 2 --threads 1");
        CHECK(rc == 0 && strstr(out, "Average Forward-Backward"), "%s: exit %d: %s", cpus[i], rc, out);
    }
}

int main(void)
{
    check_begin("test_portable", 240);
    if (system("command -v qemu-x86_64 >/dev/null 2>&1") != 0) {
        printf("test_portable: skipped: qemu-x86_64 is missing (apt-get install qemu-user; scripts/deps.sh)\n");
        return check_end();
    }
    char cmd[1024], v[4096];
    snprintf(cmd, sizeof cmd, "%s --version", sh_test_shoal_bin());
    if (sh_test_run(cmd, v, sizeof v) != 0 || strstr(v, "-march=native")) {
        printf("test_portable: skipped: a NATIVE=1 build runs only on CPUs like this one\n");
        return check_end();
    }
    if (tiny_make_dir(dir, sizeof dir)) {
        CHECK(0, "could not write the tiny dataset");
        return check_end();
    }
    RUN(runs_on_older_cpus_with_their_kernels);
    tiny_remove_dir(dir);
    return check_end();
}
