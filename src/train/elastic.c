/* elastic.c — data parallelism that goes on when ranks are lost or join (--elastic): the last
 * step's state kept on every rank; after a change the communicator regroups, the strategy and
 * trainer are built again for the new world, the state spreads from a rank with the latest and
 * the epoch goes on from the same image, resharded; one line per change.
 * Not here: the regroup (src/comm/boot/elastic.c), a run (trainer.c), the exchange (dp/).
 * Proved by tests/cli/test_train_elastic.c. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/env.h"
#include "base/err.h"
#include "base/log.h"
#include "base/util.h"
#include "train/job.h"
#include "train/trainer_internal.h"

/* One rank's part of the job between its runs. */
typedef struct {
    const sh_job_opts *o;
    shoal_comm *c;             /* the current generation's */
    int max_world;
    sh_dataset *train_set, *test_set; /* opened once, lent to every run */
    /* The last completed step: parameters, statistics, optimizer state, then where it stood. */
    float *block;
    size_t nblock;
    int64_t steps, epoch, image;
    uint64_t rng[4];
    int valid;
    uint64_t kept_ns;
    uint64_t stalled_ns;       /* training last went on: the last kept step, or the run's end */
    int runs;
    uint64_t start_ns;
    uint64_t keep_ns, keeps;   /* time spent copying, and how often */
} elastic_job;

enum { META_STEPS, META_EPOCH, META_IMAGE, META_RNG, META_NBLOCK = META_RNG + 4, NMETA };

static size_t block_count(sh_trainer *t, float **stats, size_t *nstats, float **optim, size_t *noptim)
{
    *stats = sh_net_stats(t->net, nstats);
    *optim = sh_optim_state(t->opt, noptim);
    return t->nparams + *nstats + *noptim;
}

static shoal_result ensure_block(elastic_job *ej, size_t n)
{
    if (ej->nblock == n && ej->block) return SHOAL_OK;
    free(ej->block);
    ej->block = NULL;
    ej->nblock = 0;
    SH_TRY(sh_calloc(n + 1, sizeof(float), (void **)&ej->block));
    ej->nblock = n;
    return SHOAL_OK;
}

/* The trainer's hook after every completed step: a copy of what a regroup restores (the
 * first call allocates; the model's size never changes within a job). */
static void keep_state(void *ctx, sh_trainer *t)
{
    elastic_job *ej = ctx;
    uint64_t t0 = sh_now_ns();
    float *stats, *optim;
    size_t ns, no, n = block_count(t, &stats, &ns, &optim, &no);
    if (ensure_block(ej, n) != SHOAL_OK) {
        ej->valid = 0; /* this rank then brings no progress to the regroup: another spreads it */
        return;
    }
    memcpy(ej->block, t->params, t->nparams * sizeof(float));
    if (ns) memcpy(ej->block + t->nparams, stats, ns * sizeof(float));
    if (no) memcpy(ej->block + t->nparams + ns, optim, no * sizeof(float));
    ej->steps = t->steps_done;
    ej->epoch = sh_loader_epoch(t->loader);
    ej->image = sh_loader_image(t->loader);
    sh_net_rng_get(t->net, ej->rng);
    ej->valid = 1;
    ej->kept_ns = sh_now_ns();
    ej->keep_ns += ej->kept_ns - t0;
    ej->keeps++;
}

/* The trainer's vote: rank 0 asks the store (at most every 200 ms) whether ranks wait to
 * join while there is room; the vote spreads it so that every rank regroups at one step. */
static int regroup_wanted(void *ctx)
{
    elastic_job *ej = ctx;
    return shoal_comm_rank(ej->c) == 0 && shoal_comm_world(ej->c) < ej->max_world && shoal_comm_joiners(ej->c) > 0;
}

/* Steps planned from where the state stands, as trainer.c's plan from the start. */
static int64_t replan(const sh_trainer *t)
{
    const sh_train_opts *o = &t->opts;
    int64_t planned;
    if (o->epochs > 0) planned = t->steps_done + sh_loader_steps_left(t->loader, o->epochs);
    else if (o->max_steps > 0) planned = o->max_steps;
    else if (t->cfg->max_batches > 0) planned = t->cfg->max_batches;
    else planned = t->steps_done + sh_loader_steps_left(t->loader, 1);
    if (o->max_steps > 0 && o->max_steps < planned) planned = o->max_steps;
    return planned;
}

/* The latest state, from the rank that holds it to every rank (joiners too), into the
 * trainer; every rank keeps it as its own from then on. */
static shoal_result spread_state(elastic_job *ej, sh_trainer *t, int root)
{
    float *stats, *optim;
    size_t ns, no, n = block_count(t, &stats, &ns, &optim, &no);
    int64_t meta[NMETA] = {ej->steps, ej->epoch, ej->image, 0, 0, 0, 0, (int64_t)ej->nblock};
    for (int i = 0; i < 4; i++) meta[META_RNG + i] = (int64_t)ej->rng[i];
    SH_TRY(shoal_broadcast(ej->c, meta, meta, NMETA, SHOAL_INT64, root));
    if (meta[META_NBLOCK] != (int64_t)n)
        return SH_FAIL(SHOAL_ERR_MISMATCH, "elastic: rank %d holds a state of %" PRId64 " floats but this model has "
                       "%zu; every rank must train the same model", root, meta[META_NBLOCK], n);
    SH_TRY(ensure_block(ej, n));
    SH_TRY(shoal_broadcast(ej->c, ej->block, ej->block, n, SHOAL_FLOAT32, root));
    ej->steps = meta[META_STEPS];
    ej->epoch = meta[META_EPOCH];
    ej->image = meta[META_IMAGE];
    for (int i = 0; i < 4; i++) ej->rng[i] = (uint64_t)meta[META_RNG + i];
    ej->valid = 1;
    memcpy(t->params, ej->block, t->nparams * sizeof(float));
    if (ns) memcpy(stats, ej->block + t->nparams, ns * sizeof(float));
    if (no) memcpy(optim, ej->block + t->nparams + ns, no * sizeof(float));
    sh_net_rng_set(t->net, ej->rng);
    t->steps_done = ej->steps;
    SH_TRY(sh_loader_seek_image(t->loader, ej->epoch, ej->image));
    t->steps_planned = replan(t);
    return SHOAL_OK;
}

/* "rank 2", "ranks 2, 3" (of n, the first of them listed). */
static int name_ranks(char *buf, size_t cap, const int *ranks, int n)
{
    int len = snprintf(buf, cap, "rank%s ", n == 1 ? "" : "s");
    for (int i = 0; i < n && i < SHOAL_TRAIN_CHANGE_RANKS && len < (int)cap; i++)
        len += snprintf(buf + len, cap - (size_t)len, "%s%d", i ? ", " : "", ranks[i]);
    if (n > SHOAL_TRAIN_CHANGE_RANKS && len < (int)cap) len += snprintf(buf + len, cap - (size_t)len, " (%d in all)", n);
    return len;
}

/* The change's one line, on the new lead's output. */
static void print_change(const sh_trainer *t, const shoal_train_change *ch)
{
    if (shoal_comm_rank(((const elastic_job *)t->opts.elastic_ctx)->c) != 0) return; /* also under --quiet: not progress */
    char who[400] = "";
    int len = 0;
    if (ch->nleft) len += name_ranks(who, sizeof who, ch->left, ch->nleft), len += snprintf(who + len, sizeof who - (size_t)len, " left");
    if (ch->nleft && ch->njoined) len += snprintf(who + len, sizeof who - (size_t)len, " and ");
    if (ch->njoined && len < (int)sizeof who) {
        len += name_ranks(who + len, sizeof who - (size_t)len, ch->joined, ch->njoined);
        snprintf(who + len, sizeof who - (size_t)len, " joined");
    }
    fprintf(t->opts.out, "elastic: %s after step %" PRId64 "; training goes on with %d rank%s (paused %.1f s)\n", who,
            ch->step, ch->world, ch->world == 1 ? "" : "s", ch->pause_s);
    fflush(t->opts.out);
}

/* A change into the report: counts, and the first SHOAL_TRAIN_CHANGES_MAX in full. */
static shoal_train_change *record_change(sh_job_report *r, const shoal_regroup *g, int64_t mine_done, int in_flight)
{
    sh_elastic_report *e = &r->elastic;
    e->ranks_left += g->nleft;
    e->ranks_joined += g->njoined;
    int i = e->nchanges++;
    if (i >= SH_ELASTIC_CHANGES_MAX) return NULL;
    shoal_train_change *ch = &e->changes[i];
    memset(ch, 0, sizeof *ch);
    ch->step = g->progress < 0 ? 0 : g->progress;
    ch->world = g->world;
    ch->nleft = g->nleft;
    ch->njoined = g->njoined;
    for (int k = 0; k < SHOAL_TRAIN_CHANGE_RANKS; k++) {
        if (k < g->nleft && k < SHOAL_REGROUP_LIST_MAX) ch->left[k] = g->left[k];
        if (k < g->njoined && k < SHOAL_REGROUP_LIST_MAX) ch->joined[k] = g->joined[k];
    }
    int64_t redone = mine_done + (in_flight ? 1 : 0) - ch->step; /* this rank's steps begun and not kept */
    ch->steps_redone = redone > 0 ? (int)redone : 0;
    return ch;
}

/* One run of the trainer on the current generation: build, take the state (after a
 * change), train until the end, a lost rank or an agreed regroup. */
static shoal_result run_generation(elastic_job *ej, sh_job_report *r, const shoal_regroup *g, shoal_train_change *ch,
                                   sh_train_report *rep)
{
    const sh_job_opts *o = ej->o;
    shoal_comm *c = ej->c;
    int world = shoal_comm_world(c), batch = 0;
    shoal_result rc = sh_job_replica_batch(o, world, &batch);
    if (rc != SHOAL_OK) return rc;
    sh_train_opts wo = o->train;
    wo.local_ranks = shoal_comm_local_world(c);
    if (!o->strong_scaling && o->lr_linear) wo.lr_scale = (double)world;
    sh_strategy *st = NULL;
    sh_net *net = NULL;
    rc = sh_job_dp_create(o, c, batch, &st, &net);
    if (rc != SHOAL_OK) {
        sh_net_destroy(net);
        sh_strategy_destroy(st);
        return rc;
    }
    st->job_rank = shoal_comm_job_rank(c, shoal_comm_rank(c)); /* fault drills name the job's ranks */
    wo.job_logs = wo.logdir != NULL;
    if (shoal_comm_rank(c) != 0) wo.logdir = NULL;
    wo.strategy = st;
    wo.keep_state = keep_state;
    wo.regroup_wanted = regroup_wanted;
    wo.elastic_ctx = ej;
    wo.train_set = ej->train_set;
    wo.test_set = ej->test_set;
    wo.quiet_start = ej->runs > 0 || g->generation > 0;
    if (wo.time_limit_s > 0) { /* the job's limit, not each run's */
        double left = wo.time_limit_s - (double)(sh_now_ns() - ej->start_ns) * 1e-9;
        wo.time_limit_s = left > 1e-3 ? left : 1e-3;
    }
    if (ej->runs > 0 || g->generation > 0) { /* the state comes from the job, not from files */
        wo.resume_path = NULL;
        wo.weights_path = NULL;
    }
    sh_trainer *t = NULL;
    rc = sh_trainer_create_with_net(&wo, net, &t); /* takes net */
    if (rc == SHOAL_OK && g->generation > 0 && g->progress >= 0) rc = spread_state(ej, t, g->progress_rank);
    if (rc == SHOAL_OK && ch) {
        ch->pause_s = (double)(sh_now_ns() - ej->stalled_ns) * 1e-9;
        print_change(t, ch);
    }
    if (rc == SHOAL_OK && t->tb) {
        rc = sh_tb_scalar(t->tb, "elastic/world", t->steps_done, (float)world);
        if (rc == SHOAL_OK) rc = sh_tb_scalar(t->tb, "elastic/changes", t->steps_done, (float)r->elastic.nchanges);
        if (rc == SHOAL_OK && ch) rc = sh_tb_scalar(t->tb, "elastic/pause_s", t->steps_done, (float)ch->pause_s);
    }
    ej->runs++;
    if (rc == SHOAL_OK) rc = sh_trainer_run(t, rep);
    int reports = 0;
    if (rc == SHOAL_OK && !rep->regroup) rc = sh_job_dp_finish(o, c, st, r, &reports);
    sh_trainer_destroy(t);
    sh_strategy_destroy(st);
    return rc;
}

/* This run's report into the job's: its figures, the evaluations after the earlier runs'. */
static void merge_report(const elastic_job *ej, sh_train_report *job, const sh_train_report *run, uint64_t run_ns)
{
    sh_epoch_point hist[SH_HISTORY_MAX];
    int n = job->nhistory;
    double before = (double)(run_ns - ej->start_ns) * 1e-9; /* the run's clock starts there */
    memcpy(hist, job->history, sizeof hist);
    for (int i = 0; i < run->nhistory && n < SH_HISTORY_MAX; i++) {
        hist[n] = run->history[i];
        hist[n++].seconds += before;
    }
    *job = *run;
    memcpy(job->history, hist, sizeof hist);
    job->nhistory = n;
    job->seconds = (double)(sh_now_ns() - ej->start_ns) * 1e-9;
}

/* A lost rank shows as one of these; the others end the job. */
static int lost_rank(shoal_result rc)
{
    return rc == SHOAL_ERR_PEER || rc == SHOAL_ERR_TIMEOUT || rc == SHOAL_ERR_BROKEN;
}

static shoal_result open_sets(elastic_job *ej)
{
    const char *dir = ej->o->train.data_dir ? ej->o->train.data_dir : sh_env_str("SHOAL_DATA_DIR");
    struct stat st;
    if (!dir) return SHOAL_OK; /* the trainer names what is missing */
    if (stat(dir, &st) == 0 && S_ISREG(st.st_mode))
        return SH_FAIL(SHOAL_ERR_INVALID, "--elastic: %s is character-level text, whose streams cannot be shared "
                       "out again among another number of ranks mid-epoch; train it without --elastic", dir);
    SH_TRY(sh_dataset_open_dir(dir, 1, &ej->train_set));
    return sh_dataset_open_dir(dir, 0, &ej->test_set);
}

shoal_result sh_elastic_run(const sh_job_opts *o, shoal_comm **cp, sh_job_report *r)
{
    elastic_job ej;
    memset(&ej, 0, sizeof ej);
    ej.o = o;
    ej.c = *cp;
    ej.start_ns = sh_now_ns();
    shoal_job_env env;
    (void)shoal_job_env_read(&env);
    ej.max_world = o->elastic_max > 0 ? o->elastic_max : env.world;
    r->elastic.on = 1;
    shoal_regroup g;
    shoal_result rc = shoal_comm_last_regroup(ej.c, &g);
    for (int n = o->elastic_min; rc == SHOAL_OK && o->strong_scaling && n <= ej.max_world; n++) {
        int batch = 0; /* every world the job may have must split the global batch: said now, not then */
        if (sh_job_replica_batch(o, n, &batch) != SHOAL_OK) {
            char why[600];
            snprintf(why, sizeof why, "%s", shoal_last_error_message()); /* SH_FAIL writes where it reads */
            rc = SH_FAIL(SHOAL_ERR_INVALID, "--elastic %d:%d with %s", o->elastic_min, ej.max_world, why);
        }
    }
    if (rc == SHOAL_OK) rc = open_sets(&ej);
    shoal_train_change *ch = NULL;
    while (rc == SHOAL_OK) {
        sh_train_report rep;
        memset(&rep, 0, sizeof rep);
        uint64_t run_ns = sh_now_ns();
        rc = run_generation(&ej, r, &g, ch, &rep);
        if (rc == SHOAL_OK) merge_report(&ej, &r->train, &rep, run_ns);
        if (rc == SHOAL_OK && !rep.regroup) break; /* the end */
        if (rc != SHOAL_OK && !lost_rank(rc)) break;
        int failed = rc != SHOAL_OK;
        if (failed) SH_LOG_I("train", "elastic: %s; regrouping", shoal_last_error_message());
        int64_t done = ej.valid ? ej.steps : -1;
        ej.stalled_ns = ej.valid && ej.kept_ns ? ej.kept_ns : sh_now_ns(); /* no step yet: from now */
        rc = shoal_comm_regroup(cp, done, &g);
        ej.c = *cp;
        if (rc != SHOAL_OK) {
            char why[1024];
            snprintf(why, sizeof why, "%s", shoal_last_error_message());
            rc = SH_FAIL(rc, "--elastic: after step %" PRId64 ": %s", done < 0 ? (int64_t)0 : done, why);
            break;
        }
        r->rank = g.rank;
        r->world = g.world;
        ch = record_change(r, &g, done, failed);
    }
    r->reporter = rc == SHOAL_OK && r->rank == 0;
    r->elastic.keep_ms = ej.keeps ? (double)ej.keep_ns * 1e-6 / (double)ej.keeps : 0;
    free(ej.block);
    sh_dataset_destroy(ej.test_set);
    sh_dataset_destroy(ej.train_set);
    return rc;
}
