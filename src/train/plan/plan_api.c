/* plan/plan_api.c — the public `shoal plan` (shoal/train.h): its options checked, the model
 * measured, the cluster described by the link given, the table printed.
 * Not here: the model, the candidates, measuring (plan/cost.c, choose.c, measure.c).
 * Proved by tests/cli/test_plan_cli.c. */
#include "shoal/train.h"

#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "base/util.h"
#include "train/plan/plan.h"

void shoal_plan_opts_default(shoal_plan_opts *o)
{
    if (!o) return;
    memset(o, 0, sizeof *o);
    o->hosts = o->ranks_per_host = 1;
    o->latency_us = -1;
}

shoal_result shoal_plan_print(const shoal_plan_opts *o, FILE *out)
{
    if (!o || !out) return SH_FAIL(SHOAL_ERR_INVALID, "shoal_plan_print: %s is NULL", o ? "out" : "o");
    if (!o->cfg_path) return SH_FAIL(SHOAL_ERR_INVALID, "shoal plan: no model file (.cfg) given");
    if (o->hosts < 1 || o->ranks_per_host < 1 || o->batch < 0 || o->threads < 0)
        return SH_FAIL(SHOAL_ERR_INVALID, "shoal plan: --hosts %d, --ranks-per-host %d, --batch %d, --threads %d: "
                       "hosts and ranks must be >= 1, batch and threads >= 0", o->hosts, o->ranks_per_host,
                       o->batch, o->threads);
    sh_plan_cluster cl;
    SH_TRY(sh_plan_cluster_for_link(o->hosts, o->ranks_per_host, o->link ? o->link : "10gbit", o->latency_us, &cl));
    if (o->cores > 0) cl.cores = o->cores;
    int threads = o->threads;
    if (!threads) threads = cl.cores / o->ranks_per_host > 0 ? cl.cores / o->ranks_per_host : 1;
    sh_plan_model m;
    SH_TRY(sh_plan_model_measure(o->cfg_path, o->batch, threads, o->ranks_per_host, &m));
    sh_plan_list *list = NULL;
    shoal_result rc = sh_calloc(1, sizeof *list, (void **)&list);
    if (rc == SHOAL_OK) {
        sh_plan_enumerate(&m, &cl, list);
        if (o->json) sh_plan_print_json(&m, &cl, list, out);
        else sh_plan_print(&m, &cl, list, out);
    }
    free(list);
    sh_plan_model_fini(&m);
    return rc;
}
