/* cmd_launch.c — `shoal launch -n N [--output-dir DIR] [--] CMD ARGS...`: its flag table.
 * Not here: starting and watching the ranks (launch.c), parsing (flags.c).
 * Proved by tests/cli/test_launch.c. */
#include <limits.h>
#include <stddef.h>
#include <stdio.h>

#include "cli/cli.h"
#include "cli/flags.h"
#include "cli/launch.h"

static const char usage_text[] =
    "usage: shoal launch -n N [--nnodes H --node-rank K --master-addr ADDR]\n"
    "                    [--output-dir DIR] [--grace-ms MS] [--] CMD ARGS...\n\n"
    "Start N ranks of CMD on this machine, as torchrun does: each gets SHOAL_RANK,\n"
    "SHOAL_WORLD_SIZE, SHOAL_LOCAL_RANK, SHOAL_LOCAL_SIZE, SHOAL_MASTER_ADDR,\n"
    "SHOAL_MASTER_PORT (a free port unless set) and a fresh secret SHOAL_JOB_KEY.\n"
    "Output lines are prefixed \"[rank K] \" (or written to DIR/rank-K.out and .err).\n"
    "SIGINT, SIGTERM and SIGHUP are forwarded to every rank. When a rank fails, the\n"
    "others are stopped (SIGTERM, then SIGKILL after --grace-ms) and shoal launch exits\n"
    "with that rank's code, naming it. Each rank runs in its own process group: what a\n"
    "rank starts is ended with the job. mpirun, mpiexec and srun work too: shoal reads\n"
    "their variables.\n";

#define AT(field) offsetof(sh_launch_opts, field)

static const sh_flag flags[] = {
    {"nranks", 'n', "N", SH_FLAG_INT, AT(nranks), 1, 4096, "Ranks", "ranks to start on this machine (required)",
     NULL, "takes a rank count from 1 to 4096", NULL},
    {"output-dir", 0, "DIR", SH_FLAG_STR, AT(output_dir), 0, 0, "Ranks",
     "write rank K's output to DIR/rank-K.out and .err instead of prefixing its lines", NULL, NULL, NULL},
    {"grace-ms", 0, "MS", SH_FLAG_INT, AT(grace_ms), 0, INT_MAX, "Ranks",
     "after a rank fails, the others get SIGTERM and then SIGKILL after MS milliseconds (default 3000)",
     NULL, "takes milliseconds", NULL},
    {"nnodes", 0, "H", SH_FLAG_INT, AT(nnodes), 1, 4096, "Several machines (as torchrun)",
     "run one launcher per machine with the same --nnodes H and -n N; the ranks of machine K are K*N .. "
     "K*N+N-1 of H*N, and SHOAL_JOB_KEY must be set to the same 64 hex digits on every machine",
     NULL, "takes a number from 1 to 4096", NULL},
    {"node-rank", 0, "K", SH_FLAG_INT, AT(node_rank), 0, 4096, "Several machines (as torchrun)",
     "this machine's place, 0..H-1", NULL, "takes a number from 0 to 4096", NULL},
    {"master-addr", 0, "ADDR", SH_FLAG_STR, AT(master_addr), 0, 0, "Several machines (as torchrun)",
     "node 0's address (or SHOAL_MASTER_ADDR); the port is SHOAL_MASTER_PORT (default 29500)", NULL, NULL,
     NULL},
};

/* The first argument that is not a flag starts the command. */
static int command_starts(void *dst, const char *arg, const char *cmd)
{
    (void)dst, (void)arg, (void)cmd;
    return SH_FLAGS_STOP;
}

static const sh_flag_table table = {
    .cmd = "launch", .usage = usage_text, .flags = flags, .nflags = sizeof flags / sizeof flags[0],
    .bare_unknown = 1, .dashdash_stops = 1, .positional = command_starts,
};

int sh_cmd_launch(int argc, char **argv)
{
    sh_launch_opts o = {.nranks = 0, .output_dir = NULL, .grace_ms = 3000, .tag = "launch"};
    int i = 1;
    int rc = sh_flags_parse(&table, argc, argv, 1, &o, &i);
    if (rc) return rc == SH_FLAGS_HELP ? SH_EXIT_OK : rc;
    if (o.nranks == 0) return sh_cli_usage_error("launch", "-n N is required");
    if (o.nnodes <= 1 && o.node_rank > 0)
        return sh_cli_usage_error("launch", "--node-rank %d needs --nnodes (more than one machine)", o.node_rank);
    if (i >= argc) return sh_cli_usage_error("launch", "no command to run");
    return sh_launch_run(&o, argv + i);
}
