/* plan/auto.c — `shoal train --parallel auto`: at start-up every rank probes the links
 * (allreduces within its host and across hosts) and times the model's layers on its own
 * share of the cores, as it will train; rank 0 predicts every layout (plan/choose.c), prints
 * the table and its choice, and broadcasts it; every rank then takes that layout.
 * Not here: the model and the candidates (plan/cost.c, choose.c), running the layout (job.c).
 * Proved by tests/cli/test_plan_cli.c. */
#include "train/plan/auto.h"

#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "base/util.h"
#include "train/plan/plan.h"

enum { V_OK, V_KIND, V_S, V_M, V_T, V_SCHEME, V_CODEC, V_SFB, NV };

/* The choice into the job's options, as the flags would set them. */
static void apply(const int64_t *v, sh_job_opts *o)
{
    static const char *const codecs[SH_PLAN_NCODECS] = {"fp16", "1bit", "topk:0.01"};
    o->sfb = (int)v[V_SFB];
    if (v[V_CODEC] >= 0 && v[V_CODEC] < SH_PLAN_NCODECS) (void)shoal_codec_parse(codecs[v[V_CODEC]], &o->codec);
    switch ((sh_plan_kind)v[V_KIND]) {
    case SH_PLAN_DP: o->layout = SH_LAYOUT_DATA_PARALLEL; break;
    case SH_PLAN_PIPE:
        o->tensor_ranks = v[V_T] > 1 ? (int)v[V_T] : 0;
        if (v[V_S] > 1) {
            o->layout = SH_LAYOUT_PIPELINE;
            o->stages = (int)v[V_S];
            o->micro_batches = (int)v[V_M];
        } else {
            o->layout = SH_LAYOUT_TENSOR;
        }
        break;
    case SH_PLAN_HYBRID:
        o->layout = SH_LAYOUT_HYBRID;
        o->hybrid = (sh_hybrid_scheme)v[V_SCHEME];
        break;
    }
}

shoal_result sh_plan_auto(shoal_comm *c, sh_job_opts *o)
{
    sh_plan_cluster cl;
    SH_TRY(sh_plan_cluster_probe(c, &cl));
    sh_plan_model m;
    shoal_result mine = sh_plan_model_measure(o->train.cfg_path, o->train.batch, o->train.threads,
                                              cl.ranks_per_host, &m);
    int64_t v[NV] = {0};
    if (shoal_comm_rank(c) == 0 && mine == SHOAL_OK) {
        sh_plan_list *list = NULL;
        mine = sh_calloc(1, sizeof *list, (void **)&list);
        if (mine == SHOAL_OK) {
            sh_plan_enumerate(&m, &cl, list);
            if (o->layout_out) {
                fprintf(o->layout_out, "--parallel auto: every layout predicted from this machine's layer times "
                        "and the probed links\n");
                sh_plan_print(&m, &cl, list, o->layout_out);
                fflush(o->layout_out);
            }
            if (list->best >= 0) {
                const sh_plan_layout *b = &list->l[list->best];
                int64_t w[NV] = {1, b->kind, b->S, b->M, b->T, b->scheme, b->codec, b->sfb};
                memcpy(v, w, sizeof v);
            } else {
                mine = SH_FAIL(SHOAL_ERR_INVALID, "--parallel auto: no layout runs %s on %d ranks; choose one "
                               "yourself", o->train.cfg_path, shoal_comm_world(c));
            }
        }
        free(list);
    }
    if (mine == SHOAL_OK || shoal_comm_rank(c) == 0) { /* rank 0 always answers: v[V_OK] 0 on its failure */
        shoal_result rc = shoal_broadcast(c, v, v, NV, SHOAL_INT64, 0);
        if (mine == SHOAL_OK) mine = rc;
    }
    if (m.net) sh_plan_model_fini(&m);
    SH_TRY(mine);
    if (!v[V_OK]) return SH_FAIL(SHOAL_ERR_PEER, "--parallel auto: rank 0 could not plan the layout; its message "
                                 "says why");
    apply(v, o);
    return SHOAL_OK;
}
