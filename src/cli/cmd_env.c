/* cmd_env.c — `shoal env`: print every environment variable shoal reads, with defaults.
 * Not here: the table itself (src/base/env.c).
 * Proved by tests/cli/test_cli.c. */
#include <stdio.h>
#include <string.h>

#include "base/env.h"
#include "cli/cli.h"

int sh_cmd_env(int argc, char **argv)
{
    if (argc > 1 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
        printf("usage: shoal env\n  print every environment variable shoal reads: name, default, "
               "current value, meaning\n");
        return SH_EXIT_OK;
    }
    if (argc > 1) return sh_cli_usage_error("env", "unexpected argument \"%s\"", argv[1]);
    sh_env_print(stdout);
    return SH_EXIT_OK;
}
