/* cmd_plan.c — `shoal plan CFG --hosts H --ranks-per-host R --link L`: the images/s every
 * layout would reach there, predicted from this machine's layer times and the link, without
 * training (the library's shoal_plan_print).
 * Not here: the model and its measurements (src/train/plan/), parsing (flags.c).
 * Proved by tests/cli/test_plan_cli.c. */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>

#include "cli/cli.h"
#include "cli/flags.h"
#include "shoal/train.h"

static const char usage_text[] =
    "usage: shoal plan CFG [--hosts H] [--ranks-per-host R] [--link 1gbit|10gbit|RATE] [options]\n"
    "\n"
    "Predict the images/s of every layout shoal train can run CFG in on H hosts like this one,\n"
    "R ranks each, joined by a link of the given rate: data parallelism (plain, fp16, 1bit,\n"
    "topk:0.01, --sfb), pipelines, tensor parallelism, both, and the hybrid schemes. It times\n"
    "the model's layers here (on a rank's share of this machine's cores), models the links and\n"
    "the collectives as shoal runs them, prints one line per layout, fastest first, and the\n"
    "choice --parallel auto would make; it trains nothing, so any size (256 hosts) can be asked.\n";

static const char tail_text[] =
    "The prediction is a model (docs/plan.md): compute as measured here, shared memory from a\n"
    "memcpy measurement (SHOAL_PLAN_SHM_MBS overrides), the network from --link and\n"
    "--latency-us. Hosts are assumed alike: as many cores as this one.\n";

typedef struct {
    shoal_plan_opts o;
    const char *cfg;
    int latency_set;
    int latency_us;
} plan_cli;

static int set_cfg(void *dst, const char *arg, const char *cmd)
{
    plan_cli *p = dst;
    if (p->cfg) return sh_cli_usage_error(cmd, "unexpected argument \"%s\"", arg);
    p->cfg = arg;
    return 0;
}

#define AT(field) offsetof(plan_cli, field)

static const sh_flag flags[] = {
    {"hosts", 0, "H", SH_FLAG_INT, AT(o.hosts), 1, 1 << 16, "Cluster", "hosts like this one (default 1)", NULL,
     NULL, NULL},
    {"ranks-per-host", 0, "R", SH_FLAG_INT, AT(o.ranks_per_host), 1, 4096, "Cluster",
     "ranks on each host (default 1)", NULL, NULL, NULL},
    {"link", 0, "RATE", SH_FLAG_STR, AT(o.link), 0, 0, "Cluster",
     "each host's network link: 1gbit, 10gbit, or a rate such as 2.5gbit, 800mbit, 300MB/s (default 10gbit)",
     NULL, NULL, NULL},
    {"latency-us", 0, "US", SH_FLAG_INT, AT(latency_us), 0, 10000000, "Cluster",
     "a message's latency across hosts in microseconds (default 50)", NULL, NULL, NULL},
    {"batch", 0, "N", SH_FLAG_INT, AT(o.batch), 1, 1 << 20, "Model",
     "images a replica takes per step, as shoal train --batch (default: the cfg's batch)", NULL, NULL, NULL},
    {"threads", 0, "N", SH_FLAG_INT, AT(o.threads), 1, 1024, "Model",
     "kernel threads a rank (default: this machine's CPUs shared by the ranks of a host)", NULL, NULL, NULL},
    {"cores", 0, "C", SH_FLAG_INT, AT(o.cores), 1, 1 << 16, "Cluster",
     "cores each host has (default: this machine's; on an emulated cluster sharing one machine, its cores "
     "divided by the hosts)", NULL, NULL, NULL},
    {"json", 0, NULL, SH_FLAG_SWITCH, AT(o.json), 0, 0, "Output",
     "one JSON object: the cluster, the measured times, every layout (layout, flags, images_per_s, step_ms, "
     "compute_ms, comm_ms, bubble_ms) and the choice", NULL, NULL, NULL},
};

static const sh_flag_table table = {
    .cmd = "plan", .usage = usage_text, .tail = tail_text, .flags = flags, .nflags = sizeof flags / sizeof flags[0],
    .style = SH_FLAGS_EXPECTED, .positional = set_cfg,
};

int sh_cmd_plan(int argc, char **argv)
{
    plan_cli p = {0};
    shoal_plan_opts_default(&p.o);
    p.latency_us = -1;
    int code = sh_flags_parse(&table, argc, argv, 1, &p, NULL);
    if (code) return code == SH_FLAGS_HELP ? SH_EXIT_OK : code;
    if (!p.cfg) return sh_cli_usage_error("plan", "missing the model file CFG");
    p.o.cfg_path = p.cfg;
    p.o.latency_us = p.latency_us;
    shoal_result rc = shoal_plan_print(&p.o, stdout);
    if (rc == SHOAL_ERR_INVALID) return sh_cli_usage_error("plan", "%s", shoal_last_error_message());
    return rc == SHOAL_OK ? SH_EXIT_OK : sh_cli_fail(rc);
}
