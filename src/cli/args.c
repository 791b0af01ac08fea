/* args.c — the flag-parsing helpers every subcommand shares: "--name value" or
 * "--name=value", integers checked against their bounds, the model file and --help, each
 * with its usage error; and the threads and weights a one-process subcommand gives its net.
 * Not here: what a flag means (each cmd_*.c), printing usage errors (main.c's
 * sh_cli_usage_error).
 * Proved by tests/cli/test_cli.c and tests/cli/test_train_cli.c (flags in both spellings). */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/cpus.h"
#include "cli/cli.h"
#include "shoal/comm.h"
#include "train/snapshot.h"

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

int sh_cli_help(const sh_cli_args *a, const char *usage)
{
    const char *s = a->argv[a->i];
    if (strcmp(s, "--help") != 0 && strcmp(s, "-h") != 0) return 0;
    fputs(usage, stdout);
    return 1;
}

int sh_cli_arg_cfg(sh_cli_args *a, const char **cfg)
{
    const char *s = a->argv[a->i];
    if (s[0] == '-') return 0;
    if (*cfg) {
        sh_cli_usage_error(a->cmd, "unexpected argument \"%s\"", s);
        a->bad = 1;
    } else {
        *cfg = s;
    }
    return 1;
}

int sh_cli_flag_str(sh_cli_args *a, const char *name, const char *what, const char **out)
{
    const char *v = NULL;
    int got = sh_cli_take_value(a->argc, a->argv, &a->i, name, &v);
    if (got == 0) return 0;
    if (got < 0) {
        sh_cli_usage_error(a->cmd, "%s needs %s", name, what);
        a->bad = 1;
    } else {
        *out = v;
    }
    return 1;
}

int sh_cli_flag_int(sh_cli_args *a, const char *name, int min, int max, int *out)
{
    const char *v = NULL;
    int got = sh_cli_take_value(a->argc, a->argv, &a->i, name, &v);
    if (got == 0) return 0;
    if (got < 0 || !sh_cli_parse_int(v, min, max, out)) {
        sh_cli_usage_error(a->cmd, "%s needs an integer in %d..%d", name, min, max);
        a->bad = 1;
    }
    return 1;
}

int sh_cli_flag_i64(sh_cli_args *a, const char *name, int64_t min, int64_t max, int64_t *out)
{
    const char *v = NULL;
    int got = sh_cli_take_value(a->argc, a->argv, &a->i, name, &v);
    if (got == 0) return 0;
    if (got < 0 || !sh_cli_parse_i64(v, min, max, out)) {
        sh_cli_usage_error(a->cmd, "%s needs an integer >= %" PRId64, name, min);
        a->bad = 1;
    }
    return 1;
}

shoal_result sh_cli_net_weights(sh_net *net, int threads, const char *weights)
{
    sh_net_set_threads(net, threads);
    return weights ? sh_snapshot_load_weights(net, weights) : SHOAL_OK;
}
