/* pretrain.c — greedy layer-wise pretraining of a net's [rbm] layers, bottom up, each through the
 * ordinary trainer (alone or data-parallel), its weights handed to the next; resumable (the
 * checkpoint's cfg hash names its stage).
 * Not here: CD-k (src/nn/layer_rbm.c), the step and checkpoints (trainer.c, snapshot.c), flags
 * (src/cli/cmd_pretrain.c). Proved by tests/cli/test_pretrain.c. */
#include "train/pretrain.h"

#include <inttypes.h>
#include <string.h>

#include "base/err.h"
#include "base/util.h"
#include "nn/layer.h"
#include "train/dp/allreduce.h"
#include "train/job.h"
#include "train/snapshot.h"

void sh_pretrain_opts_default(sh_pretrain_opts *o)
{
    memset(o, 0, sizeof *o);
    sh_train_opts_default(&o->train);
    o->bucket_mb = 1;
}

typedef struct {
    const sh_pretrain_opts *o;
    shoal_comm *comm;           /* NULL: alone */
    sh_cfg *cfg;
    sh_net *whole;              /* the whole net at one image: each stage's weights land here */
    int rbms[SH_PRETRAIN_MAX_RBMS], nrbms;
    int batch;                  /* this rank's */
} run;

static shoal_result stage_hash(run *r, int s, uint64_t *out)
{
    sh_net *n = NULL;
    SH_TRY(sh_net_create_pretrain(r->cfg, 1, r->o->train.seed, r->rbms[s], &n));
    *out = sh_net_cfg_hash(n);
    sh_net_destroy(n);
    return SHOAL_OK;
}

/* The stage a checkpoint continues, from its cfg hash. */
static shoal_result find_stage(run *r, const char *path, int *stage)
{
    sh_snapshot_meta m;
    SH_TRY(sh_snapshot_read_meta(path, &m));
    uint64_t h = sh_snapshot_meta_cfg_hash(&m);
    if (h == sh_net_cfg_hash(r->whole))
        return SH_FAIL(SHOAL_ERR_INVALID, "%s holds %s's pretrained weights already (pretraining ended); fine-tune "
                       "them with shoal train %s --weights %s", path, r->o->train.cfg_path, r->o->train.cfg_path, path);
    for (int s = 0; s < r->nrbms; s++) {
        uint64_t hs = 0;
        SH_TRY(stage_hash(r, s, &hs));
        if (hs == h) {
            *stage = s;
            return SHOAL_OK;
        }
    }
    return SH_FAIL(SHOAL_ERR_FORMAT, "%s is not a pretraining checkpoint of %s (cfg hash %016" PRIx64 "); resume "
                   "from the file shoal pretrain --save wrote for this cfg, unchanged", path, r->o->train.cfg_path, h);
}

/* Copy the first count floats of the parameter and statistics blocks from a to b. */
static void copy_prefix(sh_net *from, sh_net *to)
{
    size_t np = sh_net_nparams(from) < sh_net_nparams(to) ? sh_net_nparams(from) : sh_net_nparams(to);
    size_t sa = 0, sb = 0;
    float *st_from = sh_net_stats(from, &sa), *st_to = sh_net_stats(to, &sb);
    memcpy(sh_net_params(to), sh_net_params(from), np * sizeof(float));
    if (sa && sb) memcpy(st_to, st_from, (sa < sb ? sa : sb) * sizeof(float));
}

static void describe(run *r, int s, const sh_net *n, FILE *out)
{
    const sh_layer *l = sh_net_layer((sh_net *)n, r->rbms[s]);
    const sh_rbm_opts *o = &l->rbm;
    fprintf(out, "pretrain %s: [rbm] layer %d (%d of %d, line %d): %d hidden units over %zu %s visible units, "
            "%sCD-%d, learning rate %g, momentum %g, decay %g%s\n", r->o->train.cfg_path, r->rbms[s], s + 1,
            r->nrbms, l->line, l->out_shape.c, l->inputs, o->gaussian ? "Gaussian" : "binary",
            o->persistent ? "persistent " : "", o->cd_k, (double)o->learning_rate, (double)o->momentum,
            (double)o->decay, o->sparsity > 0 ? ", sparsity target" : "");
    fflush(out);
}

static shoal_result run_stage(run *r, int s, const char *resume, sh_pretrain_stage *rep)
{
    const sh_pretrain_opts *po = r->o;
    sh_train_opts o = po->train;
    sh_net *n = NULL;
    sh_strategy *st = NULL;
    sh_trainer *t = NULL;
    char logdir[1024];
    SH_TRY(sh_net_create_pretrain(r->cfg, r->batch, o.seed, r->rbms[s], &n));
    if (!resume) copy_prefix(r->whole, n); /* the stages below, trained */
    o.resume_path = resume;
    o.weights_path = NULL;
    o.save_darknet_path = NULL;
    o.save_path = o.save_every_steps > 0 ? po->train.save_path : NULL; /* the stage's checkpoints */
    o.batch = r->batch;
    int rank = r->comm ? shoal_comm_rank(r->comm) : 0;
    if (o.logdir) { /* one run directory per [rbm] */
        snprintf(logdir, sizeof logdir, "%s/rbm%d", po->train.logdir, r->rbms[s]);
        o.job_logs = 1;
        o.logdir = rank == 0 ? logdir : NULL;
    }
    if (rank == 0 && !o.quiet) describe(r, s, n, o.out ? o.out : stdout);
    if (po->before_stage) po->before_stage(o.hook_ctx, s, r->rbms[s]);
    shoal_result rc = SHOAL_OK;
    if (r->comm) {
        o.local_ranks = shoal_comm_local_world(r->comm);
        sh_dp_opts dopts = {po->bucket_mb, r->batch};
        rc = sh_strategy_allreduce_create(r->comm, &dopts, &st);
        o.strategy = st;
    }
    if (rc == SHOAL_OK) {
        rc = sh_trainer_create_with_net(&o, n, &t); /* takes n */
        n = NULL;
    }
    if (rc == SHOAL_OK) rc = sh_trainer_run(t, &rep->train);
    if (rc == SHOAL_OK) copy_prefix(sh_trainer_net(t), r->whole);
    rep->layer = r->rbms[s];
    rep->resumed = resume != NULL;
    sh_trainer_destroy(t);
    sh_strategy_destroy(st);
    sh_net_destroy(n);
    return rc;
}

static shoal_result pretrain(run *r, sh_pretrain_report *rep)
{
    const sh_pretrain_opts *o = r->o;
    SH_TRY(sh_cfg_load(o->train.cfg_path, &r->cfg));
    SH_TRY(sh_net_create(r->cfg, 1, o->train.seed, &r->whole));
    r->batch = o->train.batch > 0 ? o->train.batch : sh_net_get_config(r->whole)->batch;
    r->nrbms = sh_net_rbm_layers(r->whole, NULL);
    if (r->nrbms == 0)
        return SH_FAIL(SHOAL_ERR_INVALID, "%s has no [rbm] layer: pretraining trains a deep belief net's [rbm] "
                       "layers one after the other; add [rbm] sections (output=N hidden units)", o->train.cfg_path);
    if (r->nrbms > SH_PRETRAIN_MAX_RBMS)
        return SH_FAIL(SHOAL_ERR_INVALID, "%s has %d [rbm] layers; pretraining takes at most %d", o->train.cfg_path,
                       r->nrbms, SH_PRETRAIN_MAX_RBMS);
    sh_net_rbm_layers(r->whole, r->rbms);
    rep->nstages = r->nrbms;
    int first = 0;
    if (o->train.resume_path) SH_TRY(find_stage(r, o->train.resume_path, &first));
    rep->first = first;
    for (int s = first; s < r->nrbms; s++) {
        SH_TRY(run_stage(r, s, s == first ? o->train.resume_path : NULL, &rep->stages[s]));
        rep->last = s;
        if (rep->stages[s].train.stopped) { /* the trainer saved this stage's checkpoint */
            rep->stopped = 1;
            return SHOAL_OK;
        }
    }
    int rank = r->comm ? shoal_comm_rank(r->comm) : 0;
    if (o->train.save_path && rank == 0) {
        SH_TRY(sh_snapshot_save_weights(r->whole, o->train.save_path));
        snprintf(rep->saved_path, sizeof rep->saved_path, "%s", o->train.save_path);
    }
    return SHOAL_OK;
}

shoal_result sh_pretrain_run(const sh_pretrain_opts *o, sh_pretrain_report *rep)
{
    memset(rep, 0, sizeof *rep);
    rep->world = 1;
    run r = {.o = o};
    uint64_t t0 = sh_now_ns();
    shoal_result rc = SHOAL_OK;
    if (sh_job_is_launched()) {
        SH_TRY(shoal_comm_create(NULL, &r.comm));
        rep->rank = shoal_comm_rank(r.comm);
        rep->world = shoal_comm_world(r.comm);
    }
    rc = pretrain(&r, rep);
    if (rc != SHOAL_OK && r.comm) sh_err_prefix_rank(rep->rank);
    rep->seconds = (double)(sh_now_ns() - t0) * 1e-9;
    sh_net_destroy(r.whole);
    sh_cfg_destroy(r.cfg);
    shoal_comm_destroy(r.comm);
    return rc;
}
