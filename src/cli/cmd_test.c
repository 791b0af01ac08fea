/* cmd_test.c — placeholder until the subcommand lands (being written this session). */
#include <stdio.h>
#include "cli/cli.h"
int sh_cmd_test(int argc, char **argv)
{
    (void)argc; (void)argv;
    fprintf(stderr, "shoal test: not built yet\n");
    return SH_EXIT_FAIL;
}
