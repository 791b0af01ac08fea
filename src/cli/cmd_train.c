/* cmd_train.c — placeholder until the subcommand lands (being written this session). */
#include <stdio.h>
#include "cli/cli.h"
int sh_cmd_train(int argc, char **argv)
{
    (void)argc; (void)argv;
    fprintf(stderr, "shoal train: not built yet\n");
    return SH_EXIT_FAIL;
}
