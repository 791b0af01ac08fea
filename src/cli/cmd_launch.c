/* cmd_launch.c — `shoal launch -n N [--output-dir DIR] [--] CMD ARGS...`.
 * Not here: starting and watching the ranks (launch.c).
 * Proved by tests/cli/test_launch.c. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/launch.h"

static void usage(FILE *f)
{
    fprintf(f,
            "usage: shoal launch -n N [--nnodes H --node-rank K --master-addr ADDR]\n"
            "                    [--output-dir DIR] [--grace-ms MS] [--] CMD ARGS...\n\n"
            "Start N ranks of CMD on this machine, as torchrun does: each gets SHOAL_RANK,\n"
            "SHOAL_WORLD_SIZE, SHOAL_LOCAL_RANK, SHOAL_LOCAL_SIZE, SHOAL_MASTER_ADDR,\n"
            "SHOAL_MASTER_PORT (a free port unless set) and a fresh secret SHOAL_JOB_KEY.\n"
            "Output lines are prefixed \"[rank K] \" (or written to DIR/rank-K.out and .err).\n"
            "SIGINT, SIGTERM and SIGHUP are forwarded to every rank. When a rank fails, the\n"
            "others are stopped (SIGTERM, then SIGKILL after --grace-ms, default 3000) and\n"
            "shoal launch exits with that rank's code, naming it. Each rank runs in its own\n"
            "process group: what a rank starts is ended with the job.\n"
            "Several machines (as torchrun): run one launcher per machine with the same\n"
            "--nnodes H and -n N, its own --node-rank K (0..H-1) and node 0's address as\n"
            "--master-addr (or SHOAL_MASTER_ADDR); the ranks are K*N .. K*N+N-1 of H*N, the\n"
            "port is SHOAL_MASTER_PORT (default 29500), and SHOAL_JOB_KEY must be set to the\n"
            "same 64 hex digits on every machine. mpirun, mpiexec and srun work too: shoal\n"
            "reads their variables.\n");
}

int sh_cmd_launch(int argc, char **argv)
{
    sh_launch_opts o = {.nranks = 0, .output_dir = NULL, .grace_ms = 3000, .tag = "launch"};
    int i = 1;
    for (; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return SH_EXIT_OK;
        }
        if (!strcmp(a, "--")) {
            i++;
            break;
        }
        if (a[0] != '-') break;
        if (i + 1 >= argc) return sh_cli_usage_error("launch", "%s needs a value", a);
        char *end = NULL;
        if (!strcmp(a, "-n") || !strcmp(a, "--nranks")) {
            long v = strtol(argv[++i], &end, 10);
            if (!end || *end || v < 1 || v > 4096)
                return sh_cli_usage_error("launch", "-n takes a rank count from 1 to 4096, not \"%s\"", argv[i]);
            o.nranks = (int)v;
        } else if (!strcmp(a, "--nnodes") || !strcmp(a, "--node-rank")) {
            long v = strtol(argv[++i], &end, 10);
            if (!end || *end || v < 0 || v > 4096)
                return sh_cli_usage_error("launch", "%s takes a number from %d to 4096, not \"%s\"", a,
                                          a[2] == 'n' && a[3] == 'n' ? 1 : 0, argv[i]);
            if (!strcmp(a, "--nnodes")) {
                if (v < 1) return sh_cli_usage_error("launch", "--nnodes takes a number from 1 to 4096, not 0");
                o.nnodes = (int)v;
            } else {
                o.node_rank = (int)v;
            }
        } else if (!strcmp(a, "--master-addr")) {
            o.master_addr = argv[++i];
        } else if (!strcmp(a, "--output-dir")) {
            o.output_dir = argv[++i];
        } else if (!strcmp(a, "--grace-ms")) {
            long v = strtol(argv[++i], &end, 10);
            if (!end || *end || v < 0) return sh_cli_usage_error("launch", "--grace-ms takes milliseconds");
            o.grace_ms = (int)v;
        } else {
            return sh_cli_usage_error("launch", "unknown option %s", a);
        }
    }
    if (o.nranks == 0) return sh_cli_usage_error("launch", "-n N is required");
    if (o.nnodes <= 1 && o.node_rank > 0)
        return sh_cli_usage_error("launch", "--node-rank %d needs --nnodes (more than one machine)", o.node_rank);
    if (i >= argc) return sh_cli_usage_error("launch", "no command to run");
    return sh_launch_run(&o, argv + i);
}
