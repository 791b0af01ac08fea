/* test_portable.c — proves the Makefile's builds that travel: base/hot.h's kernels chosen at run
 * time on the real binary ($SHOAL_BIN), under qemu-x86_64 with older CPUs: on a Nehalem
 * (x86-64-v2: SSE4.2, no AVX) it runs and picks its plain kernels, on a Haswell (AVX2, FMA)
 * its v3 clones, and both train to what this CPU trains to (a -march=native build dies there
 * with SIGILL; skipped where qemu-x86_64 (qemu-user) is missing or the build is NATIVE=1); and
 * libshoal.so's SONAME: a program linked with -lshoal records libshoal.so.0 and runs. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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

/* libshoal.so -> libshoal.so.0 -> libshoal.so.0.1.0; a program records the SONAME. */
static void library_has_a_soname(void)
{
    char lib[1024], cmd[4096], root[1024];
    if (!getcwd(root, sizeof root)) snprintf(root, sizeof root, ".");
    snprintf(lib, sizeof lib, "%s", sh_test_shoal_bin());
    char *slash = strrchr(lib, '/');
    if (slash) *slash = 0;
    else snprintf(lib, sizeof lib, ".");
    snprintf(cmd, sizeof cmd, "readelf -d %s/libshoal.so | grep SONAME", lib);
    int rc = sh_test_run(cmd, out, sizeof out);
    CHECK(rc == 0 && strstr(out, "[libshoal.so.0]"), "SONAME: %s", out);
    snprintf(cmd, sizeof cmd, "cd %s && printf '#include <shoal/comm.h>\\n#include <stdio.h>\\nint main(void) { "
             "puts(shoal_dtype_name(SHOAL_FLOAT32)); return 0; }\\n' > so.c && cc -I%s/include so.c -L%s -lshoal "
             "-o so && readelf -d so | grep -c 'NEEDED.*libshoal.so.0]' && LD_LIBRARY_PATH=%s ./so", dir, root, lib, lib);
    rc = sh_test_run(cmd, out, sizeof out);
    CHECK(rc == 0 && !strcmp(out, "1\nfloat32\n"), "a program on libshoal.so.0: exit %d: %s", rc, out);
}

int main(void)
{
    check_begin("test_portable", 240);
    if (check_under_san()) { /* qemu under ASan's shadow memory, and a program without it: not here */
        printf("test_portable: skipped under sanitizers\n");
        return check_end();
    }
    if (tiny_make_dir(dir, sizeof dir)) {
        CHECK(0, "could not write the tiny dataset");
        return check_end();
    }
    RUN(library_has_a_soname);
    char cmd[1024], v[4096];
    snprintf(cmd, sizeof cmd, "%s --version", sh_test_shoal_bin());
    if (system("command -v qemu-x86_64 >/dev/null 2>&1") != 0)
        printf("test_portable: skipped older CPUs: qemu-x86_64 is missing (apt-get install qemu-user; "
               "scripts/deps.sh)\n");
    else if (sh_test_run(cmd, v, sizeof v) != 0 || strstr(v, "-march=native"))
        printf("test_portable: skipped older CPUs: a NATIVE=1 build runs only on CPUs like this one\n");
    else
        RUN(runs_on_older_cpus_with_their_kernels);
    tiny_remove_dir(dir);
    return check_end();
}
