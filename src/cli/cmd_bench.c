/* cmd_bench.c — placeholder until the subcommand lands; answers --help so the CLI table is whole.
 * Not here: the subcommand itself. Proved by tests/cli/test_cli.c. */
#include <stdio.h>
#include <string.h>
#include "cli/cli.h"
int sh_cmd_bench(int argc, char **argv)
{
    if (argc > 1 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
        printf("usage: shoal bench ... (not built yet)\n");
        return SH_EXIT_OK;
    }
    fprintf(stderr, "shoal bench: not built yet\n");
    return SH_EXIT_FAIL;
}
