/* args.c — what the subcommands share besides their flag tables: whole numbers checked
 * against their bounds, the kernel threads of a one-process subcommand, and the note that
 * tells shoal launch a rank's stdout is the job's result.
 * Not here: flag tables and --help (flags.c), printing usage errors (main.c's
 * sh_cli_usage_error).
 * Proved by tests/cli/test_flags.c and tests/cli/test_train_cli.c. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "base/cpus.h"
#include "base/env.h"
#include "cli/cli.h"
#include "shoal/comm.h"

int sh_cli_threads(int requested)
{
    shoal_job_env e;
    shoal_job_env_read(&e); /* cannot fail with an argument */
    return sh_cpus_threads_per_rank(requested, e.local_world, NULL);
}

void sh_cli_stdout_is_result(void)
{
    long fd = -1;
    shoal_job_env e;
    if (!sh_env_is_set("SHOAL_LAUNCH_FD") || sh_env_long("SHOAL_LAUNCH_FD", &fd) != SHOAL_OK || fd < 0) return;
    if (shoal_job_env_read(&e) != SHOAL_OK) return;
    char line[32];
    int n = snprintf(line, sizeof line, "plain %d\n", e.rank);
    fflush(stdout);
    if (write((int)fd, line, (size_t)n) < 0) { /* no launcher listening: nothing to tell */
    }
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
