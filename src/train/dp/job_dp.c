/* dp/job_dp.c — the job's data-parallel row: which data-parallel strategy the options pick
 * (allreduce with its buckets and codec, --hogwild, --quorum, --solver lbfgs) and the figures
 * each leaves in the report; L-BFGS's options from the job's, alone or over ranks.
 * Not here: the roles and their runner (job.c), the strategies themselves (dp/, solver/).
 * Proved by tests/cli/test_train_dp.c, test_train_stragglers.c, test_train_lbfgs.c. */
#include "train/job.h"

#include "base/err.h"
#include "train/solver/sandblaster.h"

shoal_result sh_job_dp_lbfgs_create(const sh_job_opts *o, shoal_comm *c, sh_strategy **st)
{
    sh_lbfgs_opts lo;
    sh_lbfgs_opts_default(&lo);
    if (o->lbfgs_history > 0) lo.history = o->lbfgs_history;
    return sh_strategy_lbfgs_create(c, &lo, st);
}

shoal_result sh_job_dp_create(const sh_job_opts *o, shoal_comm *c, int batch, sh_strategy **st, sh_net **net)
{
    SH_TRY(sh_job_whole_net(o, &batch, net));
    /* --solver lbfgs: the ranks sum their shards for rank 0's L-BFGS (solver/sandblaster.c) */
    if (o->lbfgs) return sh_job_dp_lbfgs_create(o, c, st);
    if (o->hogwild) return sh_strategy_hogwild_create(c, batch, st);
    if (o->quorum > 0) return sh_strategy_quorum_create(c, batch, o->quorum, st);
    sh_dp_opts dopts = {o->bucket_mb, batch};
    SH_TRY(sh_strategy_allreduce_create(c, &dopts, st));
    if (o->elastic_min > 0) sh_strategy_allreduce_elastic(*st);
    sh_strategy_allreduce_compress(*st, &o->codec, o->sfb, o->train.cfg_path);
    return SHOAL_OK;
}

/* Every rank's figures, and images/s from the work every rank did (these ranks step at their
 * own rates: rank 0 counted its own steps x every rank's batch). */
static void straggler_figures(const sh_job_opts *o, sh_strategy *st, sh_job_report *r)
{
    if (o->hogwild) {
        sh_strategy_hogwild_stats(st, &r->hogwild);
        r->has_hogwild = 1;
        if (r->hogwild.images_per_s > 0) r->train.images_per_s = r->hogwild.images_per_s;
        return;
    }
    sh_strategy_quorum_stats(st, &r->quorum);
    r->has_quorum = 1;
    if (r->quorum.images_per_s > 0) r->train.images_per_s = r->quorum.images_per_s;
}

shoal_result sh_job_dp_finish(const sh_job_opts *o, shoal_comm *c, sh_strategy *st, sh_job_report *r, int *reports)
{
    (void)c, (void)reports;
    if (o->lbfgs) return SHOAL_OK;
    if (o->hogwild || o->quorum > 0) {
        straggler_figures(o, st, r);
        return SHOAL_OK;
    }
    sh_strategy_allreduce_profile(st, &r->dp_profile);
    r->has_dp_profile = o->train.profile;
    r->has_comm_stats = r->dp_profile.compressed;
    return SHOAL_OK;
}
