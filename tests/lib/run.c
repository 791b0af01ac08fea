/* run.c — run a shell command from a test and capture its output (see run.h).
 * Not here: rank harnesses (ranks.c).
 * Used by the tests that drive binaries; proved through them. */
#include "run.h"

#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>

int sh_test_run(const char *cmd, char *out, size_t out_nbytes)
{
    if (out_nbytes) out[0] = 0;
    FILE *p = popen(cmd, "r");
    if (!p) return -1;
    size_t n = out_nbytes ? fread(out, 1, out_nbytes - 1, p) : 0;
    if (out_nbytes) out[n] = 0;
    int st = pclose(p);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

const char *sh_test_shoal_bin(void)
{
    const char *bin = getenv("SHOAL_BIN");
    return bin && *bin ? bin : "build/shoal";
}
