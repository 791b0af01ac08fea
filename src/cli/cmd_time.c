/* cmd_time.c — placeholder until the subcommand lands (being written this session). */
#include <stdio.h>
#include "cli/cli.h"
int sh_cmd_time(int argc, char **argv)
{
    (void)argc; (void)argv;
    fprintf(stderr, "shoal time: not built yet\n");
    return SH_EXIT_FAIL;
}
