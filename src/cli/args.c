/* args.c — the flag-parsing helpers every subcommand shares: "--name value" or
 * "--name=value", and integers checked against their bounds.
 * Not here: what a flag means (each cmd_*.c), usage messages (main.c's sh_cli_usage_error).
 * Proved by tests/cli/test_cli.c and tests/cli/test_train_cli.c (flags in both spellings). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "base/cpus.h"
#include "cli/cli.h"
#include "shoal/comm.h"

int sh_cli_threads(int requested)
{
    shoal_job_env e;
    shoal_job_env_read(&e); /* cannot fail with an argument */
    return sh_cpus_threads_per_rank(requested, e.local_world, NULL);
}

int sh_cli_take_value(int argc, char **argv, int *i, const char *name, const char **val)
{
    const char *a = argv[*i];
    size_t n = strlen(name);
    if (strncmp(a, name, n) != 0) return 0;
    if (a[n] == '=') {
        *val = a + n + 1;
        return 1;
    }
    if (a[n] != 0) return 0;
    if (*i + 1 >= argc) return -1;
    *val = argv[++*i];
    return 1;
}

int sh_cli_parse_i64(const char *s, int64_t min, int64_t max, int64_t *out)
{
    char *end = NULL;
    errno = 0;
    long long x = strtoll(s, &end, 10);
    if (errno || end == s || *end || x < min || x > max) return 0;
    *out = x;
    return 1;
}

int sh_cli_parse_int(const char *s, int min, int max, int *out)
{
    int64_t x = 0;
    if (!sh_cli_parse_i64(s, min, max, &x)) return 0;
    *out = (int)x;
    return 1;
}
