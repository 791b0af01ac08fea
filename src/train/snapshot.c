/* snapshot.c — a run's checkpoint (meta, params, stats, optim, every rank's rnn_state), each
 * rank's own state beside it (PATH.worker<k>), the whole model from the parts and back, and
 * the checks that refuse another model's checkpoint, impossible counts and weights holding NaN
 * or inf before anything is overwritten.
 * Not here: the file formats (src/io/checkpoint.c, nn/darknet_weights.c), when to save (trainer.c).
 * Proved by tests/train/test_snapshot.c, test_pipeline.c (parts), tests/cli/test_train_compress.c. */
#include "train/snapshot.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/err.h"
#include "base/file_kind.h"
#include "base/log.h"
#include "base/util.h"
#include "io/checkpoint.h"
#include "nn/caffe/caffe.h"
#include "nn/darknet_weights.h"
#include "train/trainer_internal.h"

/* Slots of the "meta" section: fixed-width integers, so the section has one size forever
 * and a newer layout is recognised by its version. */
enum {
    META_VERSION = 0,
    META_CFG_HASH,
    META_STEPS_DONE,      /* completed steps over the whole training */
    META_LOADER_EPOCH,    /* where the training loader stands */
    META_LOADER_STEP,
    META_SEED,
    META_RNG0,            /* dropout's generator: 4 words */
    META_RNG1,
    META_RNG2,
    META_RNG3,
    META_NPARAMS,
    META_GLOBAL_BATCH,
    META_NSTATS,
    META_NOPTIM,
    META_WORLD,
    META_NSTATE,          /* recurrent state floats per rank; section "rnn_state" holds
                             world of them (0 in checkpoints of feed-forward nets) */
    META_RANK_STATE,      /* unused: older checkpoints held the ranks' residuals inside
                             ("rankstate"); they are not read */
    META_RANK_FILES,      /* floats of per-rank state (error-feedback residuals) each rank
                             keeps in a file of its own, PATH.worker<rank>; 0: none */
    META_DATA_HASH,       /* the training pictures' names and labels (the loader's position
                             means nothing on other files); 0: data without a fingerprint */
    META_SOLVER_NBYTES,   /* bytes of the "solver" section (an L-BFGS iterate and history);
                             0: none */
    META_COUNT_V1 = 16,   /* version 1's section: slots up to META_WORLD */
    META_COUNT = 32       /* the rest are spare, zero */
};

static shoal_result read_meta(const char *path, uint64_t meta[META_COUNT])
{
    sh_ckpt_section s = {"meta", meta, sizeof(uint64_t) * META_COUNT};
    memset(meta, 0, sizeof(uint64_t) * META_COUNT);
    if (sh_ckpt_load(path, &s, 1) != SHOAL_OK) {
        /* a version-1 file's shorter meta: its slots past META_WORLD read as zero */
        char first[512];
        snprintf(first, sizeof first, "%s", shoal_last_error_message());
        s.nbytes = sizeof(uint64_t) * META_COUNT_V1;
        memset(meta, 0, sizeof(uint64_t) * META_COUNT);
        if (sh_ckpt_load(path, &s, 1) != SHOAL_OK || meta[META_VERSION] != 1)
            return SH_FAIL(SHOAL_ERR_FORMAT, "%s", first);
        return SHOAL_OK;
    }
    if (meta[META_VERSION] != SH_SNAPSHOT_VERSION)
        return SH_FAIL(SHOAL_ERR_FORMAT,
                       "checkpoint %s: training-state version %" PRIu64 ", this shoal reads %d; "
                       "use the shoal that wrote it",
                       path, meta[META_VERSION], SH_SNAPSHOT_VERSION);
    return SHOAL_OK;
}

/* Weights of a run that diverged: the first layer holding NaN or inf is named, so that
 * testing or training from them stops here instead of measuring chance without a word. */
static shoal_result check_finite(sh_net *net, const char *path)
{
    const float *p = sh_net_params(net);
    for (int i = 0; i < sh_net_nlayers(net); i++) {
        size_t off = 0, count = 0, nan = 0, inf = 0;
        sh_net_layer_params(net, i, &off, &count);
        for (size_t k = off; k < off + count; k++) {
            nan += isnan(p[k]) != 0;
            inf += isinf(p[k]) != 0;
        }
        if (!nan && !inf) continue;
        char what[96];
        if (nan && inf) snprintf(what, sizeof what, "%zu NaN and %zu infinite", nan, inf);
        else snprintf(what, sizeof what, "%zu %s", nan ? nan : inf, nan ? "NaN" : "infinite");
        return SH_FAIL(SHOAL_ERR_FORMAT, "weights %s: layer %d (%s) holds %s values of %zu: the run that wrote "
                       "them diverged; use an earlier checkpoint, or train again with a lower learning_rate",
                       path, i, sh_net_layer_name(net, i), what, count);
    }
    return SHOAL_OK;
}

/* The same for a whole model's weights read for one part (a pipeline stage's or tensor rank's
 * net holds only its own layers' weights, so the layers cannot be walked there). */
static shoal_result check_finite_flat(const float *p, size_t n, const char *path)
{
    size_t bad = 0;
    for (size_t k = 0; k < n; k++) bad += !isfinite(p[k]);
    if (!bad) return SHOAL_OK;
    return SH_FAIL(SHOAL_ERR_FORMAT, "weights %s: %zu of its %zu weights are NaN or infinite: the run that wrote "
                   "them diverged; use an earlier checkpoint, or train again with a lower learning_rate", path, bad, n);
}

/* Counts no run makes (a damaged or hand-made file): more steps than fit in an int64 with
 * room, or a data position past the steps done (each step reads one batch). */
static shoal_result check_counts(const char *path, const uint64_t meta[META_COUNT])
{
    uint64_t steps = meta[META_STEPS_DONE], epoch = meta[META_LOADER_EPOCH], step = meta[META_LOADER_STEP];
    if (steps < (1ull << 48) && epoch <= steps && step <= steps) return SHOAL_OK;
    return SH_FAIL(SHOAL_ERR_FORMAT, "checkpoint %s: %" PRId64 " steps done at epoch %" PRId64 ", step %" PRId64
                   ": no run makes these counts (a damaged or hand-made file); resume from another checkpoint, "
                   "or start afresh from its weights with --weights", path, (int64_t)steps, (int64_t)epoch,
                   (int64_t)step);
}

/* The whole model's counts: this rank's, or the sum of the parts. */
static void whole_counts(sh_net *net, const sh_model_part *part, size_t *nparams, size_t *nstats)
{
    (void)sh_net_stats(net, nstats);
    *nparams = sh_net_nparams(net);
    if (!part) return;
    *nparams = part->nparams_whole;
    *nstats = part->nstats_whole;
}

/* Optimizer state: `per` moments of count floats each, then `extra` scalars (Adam's step). */
static void optim_shape(const sh_optim *opt, size_t count, size_t *per, size_t *extra)
{
    size_t n = 0;
    (void)sh_optim_state((sh_optim *)opt, &n);
    *per = count ? sh_optim_moments(opt) / count : 0;
    if (!count) *per = n > 0 ? 2 : 0; /* a part without parameters: Adam keeps only its step */
    *extra = n - *per * count;
}

/* The same model: same cfg content and parameter count. */
static shoal_result check_model_part(const char *path, const uint64_t meta[META_COUNT], sh_net *net,
                                     const sh_model_part *part)
{
    size_t nparams, nstats;
    whole_counts(net, part, &nparams, &nstats);
    if (meta[META_NPARAMS] != nparams || meta[META_NSTATS] != nstats)
        return SH_FAIL(SHOAL_ERR_FORMAT,
                       "checkpoint %s holds %" PRIu64 " parameters and %" PRIu64
                       " statistics but this model has %zu and %zu; was it saved from another "
                       "model? use the .cfg it was trained with",
                       path, meta[META_NPARAMS], meta[META_NSTATS], nparams, nstats);
    if (meta[META_CFG_HASH] != sh_net_cfg_hash(net))
        return SH_FAIL(SHOAL_ERR_FORMAT,
                       "checkpoint %s was saved from another model file (cfg hash %016" PRIx64
                       ", this one %016" PRIx64 "); use the .cfg it was trained with, unchanged",
                       path, meta[META_CFG_HASH], sh_net_cfg_hash(net));
    return SHOAL_OK;
}

static shoal_result check_model(const char *path, const uint64_t meta[META_COUNT], sh_net *net)
{
    return check_model_part(path, meta, net, NULL);
}

/* The whole model's blocks from the parts: each part's owner places its blocks at their
 * offsets in zeroed whole-size blocks, every rank sums them (sum_floats), the lead writes. */
typedef struct {
    float *params, *stats, *optim;
    size_t nparams, nstats, noptim;
} whole_blocks;

static void whole_free(whole_blocks *w)
{
    free(w->params);
    free(w->stats);
    free(w->optim);
}

static shoal_result whole_alloc(whole_blocks *w, size_t nparams, size_t nstats, size_t noptim)
{
    memset(w, 0, sizeof *w);
    w->nparams = nparams;
    w->nstats = nstats;
    w->noptim = noptim;
    SH_TRY(sh_calloc(nparams + 1, sizeof(float), (void **)&w->params));
    SH_TRY(sh_calloc(nstats + 1, sizeof(float), (void **)&w->stats));
    SH_TRY(sh_calloc(noptim + 1, sizeof(float), (void **)&w->optim));
    return SHOAL_OK;
}

/* This rank's share of a parameter-shaped block into the whole model's, and back. */
static void put_share(sh_trainer *t, const float *mine, float *whole)
{
    const sh_model_part *part = t->strategy->part;
    if (part->put) part->put(t->strategy, mine, whole);
    else if (part->contributes) memcpy(whole + part->params_off, mine, t->nparams * sizeof(float));
}

static void take_share(sh_trainer *t, const float *whole, float *mine)
{
    const sh_model_part *part = t->strategy->part;
    if (part->take) part->take(t->strategy, whole, mine);
    else memcpy(mine, whole + part->params_off, t->nparams * sizeof(float));
}

/* with_optim 0: the parameters and statistics only (a Darknet file holds no more). */
static shoal_result gather_whole(sh_trainer *t, whole_blocks *w, int with_optim)
{
    const sh_model_part *part = t->strategy->part;
    size_t nstats = 0, noptim = 0, per, extra;
    float *stats = sh_net_stats(t->net, &nstats);
    float *optim = sh_optim_state(t->opt, &noptim);
    optim_shape(t->opt, t->nparams, &per, &extra);
    if (!with_optim) per = extra = 0;
    size_t W = part->nparams_whole;
    SH_TRY(whole_alloc(w, W, part->nstats_whole, per * W + extra));
    put_share(t, t->params, w->params);
    for (size_t k = 0; k < per; k++) put_share(t, optim + k * t->nparams, w->optim + k * W);
    if (part->contributes && nstats) memcpy(w->stats + part->stats_off, stats, nstats * sizeof(float));
    if (part->carries_scalars && extra) memcpy(w->optim + per * W, optim + per * t->nparams, extra * sizeof(float));
    SH_TRY(part->sum_floats(t->strategy, w->params, w->nparams));
    if (w->nstats) SH_TRY(part->sum_floats(t->strategy, w->stats, w->nstats));
    if (w->noptim) SH_TRY(part->sum_floats(t->strategy, w->optim, w->noptim));
    return SHOAL_OK;
}
static shoal_result save_blocks(sh_trainer *t, const char *path, float *params, size_t nparams, float *stats,
                                size_t nstats, float *optim, size_t noptim)
{
    uint64_t meta[META_COUNT] = {0};
    uint64_t rng[4];
    sh_net_rng_get(t->net, rng);
    meta[META_VERSION] = SH_SNAPSHOT_VERSION;
    meta[META_CFG_HASH] = sh_net_cfg_hash(t->net);
    meta[META_STEPS_DONE] = (uint64_t)t->steps_done;
    meta[META_LOADER_EPOCH] = (uint64_t)sh_loader_epoch(t->loader);
    meta[META_LOADER_STEP] = (uint64_t)sh_loader_step(t->loader);
    meta[META_SEED] = t->opts.seed;
    for (int i = 0; i < 4; i++) meta[META_RNG0 + i] = rng[i];
    meta[META_NPARAMS] = nparams;
    meta[META_GLOBAL_BATCH] = (uint64_t)t->global_batch;
    meta[META_NSTATS] = nstats;
    meta[META_NOPTIM] = noptim;
    meta[META_WORLD] = (uint64_t)t->strategy->world;
    meta[META_NSTATE] = t->nstate;
    meta[META_RANK_FILES] = t->rank_file_count;
    meta[META_DATA_HASH] = t->train_set->fingerprint;
    sh_strategy *s = t->strategy;
    size_t nsolver = s->ops->ckpt_nbytes ? s->ops->ckpt_nbytes(s) : 0;
    void *solver = NULL;
    if (nsolver) SH_TRY(sh_calloc(nsolver, 1, &solver));
    if (nsolver) s->ops->ckpt_get(s, solver);
    meta[META_SOLVER_NBYTES] = nsolver;

    /* Empty blocks (no batch norm, plain SGD) are left out rather than written as 0 bytes;
     * meta's counts say which sections to expect. */
    sh_ckpt_section secs[6];
    int n = 0;
    secs[n++] = (sh_ckpt_section){"meta", meta, sizeof meta};
    if (t->nstate)
        secs[n++] = (sh_ckpt_section){"rnn_state", t->state_all,
                                      t->nstate * (size_t)t->strategy->world * sizeof(float)};
    secs[n++] = (sh_ckpt_section){"params", params, nparams * sizeof(float)};
    if (nstats) secs[n++] = (sh_ckpt_section){"stats", stats, nstats * sizeof(float)};
    if (noptim) secs[n++] = (sh_ckpt_section){"optim", optim, noptim * sizeof(float)};
    if (nsolver) secs[n++] = (sh_ckpt_section){"solver", solver, nsolver};
    shoal_result rc = sh_ckpt_save(path, secs, n);
    free(solver);
    return rc;
}

shoal_result sh_snapshot_save(sh_trainer *t, const char *path)
{
    size_t nstats = 0, noptim = 0;
    float *stats = sh_net_stats(t->net, &nstats);
    float *optim = sh_optim_state(t->opt, &noptim);
    return save_blocks(t, path, t->params, t->nparams, stats, nstats, optim, noptim);
}

shoal_result sh_snapshot_save_whole(sh_trainer *t, const char *path, int writes)
{
    whole_blocks w;
    shoal_result rc = gather_whole(t, &w, 1);
    if (rc == SHOAL_OK && writes)
        rc = save_blocks(t, path, w.params, w.nparams, w.stats, w.nstats, w.optim, w.noptim);
    whole_free(&w);
    return rc;
}

/* The whole model as a net of its own, built from the cfg at one image (its weights drawn
 * from the seed, to be overwritten): the layout a Darknet file is read into and written
 * from. Its blocks must be the parts' whole blocks; anything else is a shoal bug. */
static shoal_result whole_net_create(sh_trainer *t, sh_net **out)
{
    const sh_model_part *part = t->strategy->part;
    sh_net *n = NULL;
    SH_TRY(sh_net_load(t->opts.cfg_path, 1, t->opts.seed, &n));
    size_t nstats = 0;
    (void)sh_net_stats(n, &nstats);
    if (sh_net_nparams(n) != part->nparams_whole || nstats != part->nstats_whole) {
        shoal_result rc = SH_FAIL(SHOAL_ERR_INTERNAL, "%s: the whole model has %zu parameters and %zu statistics, "
                                  "the parts add up to %zu and %zu", t->opts.cfg_path, sh_net_nparams(n), nstats,
                                  part->nparams_whole, part->nstats_whole);
        sh_net_destroy(n);
        return rc;
    }
    *out = n;
    return SHOAL_OK;
}

/* Darknet's .weights, or Caffe's .caffemodel when caffe. */
static shoal_result save_foreign(sh_net *n, const char *path, uint64_t seen, int caffe)
{
    return caffe ? sh_caffe_weights_save(n, path) : sh_darknet_weights_save(n, path, seen);
}

static shoal_result save_whole_as(sh_trainer *t, const char *path, uint64_t seen, int caffe)
{
    sh_strategy *s = t->strategy;
    if (!s->part) return s->rank == 0 ? save_foreign(t->net, path, seen, caffe) : SHOAL_OK;
    whole_blocks w;
    sh_net *whole = NULL;
    int writes = sh_strategy_leads(s);
    shoal_result rc = gather_whole(t, &w, 0);
    if (rc == SHOAL_OK && writes) rc = whole_net_create(t, &whole);
    if (rc == SHOAL_OK && writes) {
        memcpy(sh_net_params(whole), w.params, w.nparams * sizeof(float));
        if (w.nstats) memcpy(sh_net_stats(whole, NULL), w.stats, w.nstats * sizeof(float));
        rc = save_foreign(whole, path, seen, caffe);
    }
    sh_net_destroy(whole);
    whole_free(&w);
    return rc;
}

shoal_result sh_snapshot_save_darknet(sh_trainer *t, const char *path, uint64_t seen)
{
    return save_whole_as(t, path, seen, 0);
}

shoal_result sh_snapshot_save_caffe(sh_trainer *t, const char *path) { return save_whole_as(t, path, 0, 1); }

shoal_result sh_snapshot_load_start_weights(sh_trainer *t, const char *path)
{
    const sh_model_part *part = t->strategy->part;
    if (!part) return sh_snapshot_load_weights(t->net, path);
    sh_net *whole = NULL;
    SH_TRY(whole_net_create(t, &whole));
    shoal_result rc = sh_snapshot_load_weights(whole, path);
    if (rc == SHOAL_OK) {
        size_t nstats = 0;
        float *stats = sh_net_stats(t->net, &nstats);
        take_share(t, sh_net_params(whole), t->params);
        if (nstats) memcpy(stats, sh_net_stats(whole, NULL) + part->stats_off, nstats * sizeof(float));
    }
    sh_net_destroy(whole);
    return rc;
}

/* Darknet's header: int32 major, minor, revision, small numbers (0.2.0; a transposed file's
 * major or minor past 1000); a protobuf's first byte is a field's tag, never 0, and its first
 * four bytes read as an int32 are far larger. */
#define DN_VERSION_MAX 1000000

shoal_result sh_snapshot_format(const char *path, sh_weights_format *out)
{
    unsigned char head[12];
    FILE *f = fopen(path, "rb");
    if (!f) return SH_FAIL(SHOAL_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    size_t n = fread(head, 1, sizeof head, f);
    fclose(f);
    *out = SH_WEIGHTS_UNKNOWN;
    if (n == 0) return SH_FAIL(SHOAL_ERR_FORMAT, "%s is empty; it holds no weights", path);
    if (n >= 8 && !memcmp(head, "SHOALCKP", 8)) *out = SH_WEIGHTS_SHOAL;
    else if (n == sizeof head) {
        int32_t v[3];
        memcpy(v, head, sizeof v); /* Darknet writes its host's order: little-endian */
        int dn = 1;
        for (int i = 0; i < 3; i++) dn &= v[i] >= 0 && v[i] < DN_VERSION_MAX;
        if (dn) *out = SH_WEIGHTS_DARKNET;
    }
    /* a protobuf message: field 1..15 or 100 (NetParameter.layer), wire type 0 or 2 */
    int wire = head[0] & 7, field = head[0] >> 3;
    if (*out == SH_WEIGHTS_UNKNOWN && field > 0 && (wire == 0 || wire == 2)) *out = SH_WEIGHTS_CAFFE;
    if (*out == SH_WEIGHTS_UNKNOWN)
        return SH_FAIL(SHOAL_ERR_FORMAT, "%s is neither a shoal checkpoint (it starts with SHOALCKP), Darknet's "
                       ".weights (a version header) nor Caffe's .caffemodel; check the file", path);
    return SHOAL_OK;
}

const char *sh_snapshot_format_name(sh_weights_format f)
{
    static const char *const names[] = {"unknown", "a shoal checkpoint", "Darknet's weights", "Caffe's weights"};
    return (unsigned)f < sizeof names / sizeof names[0] ? names[f] : "unknown";
}

uint64_t sh_snapshot_meta_cfg_hash(const sh_snapshot_meta *m) { return m->v[META_CFG_HASH]; }

shoal_result sh_snapshot_save_weights(sh_net *net, const char *path)
{
    uint64_t meta[META_COUNT] = {0};
    size_t nstats = 0;
    float *stats = sh_net_stats(net, &nstats);
    meta[META_VERSION] = SH_SNAPSHOT_VERSION;
    meta[META_CFG_HASH] = sh_net_cfg_hash(net);
    meta[META_NPARAMS] = sh_net_nparams(net);
    meta[META_NSTATS] = nstats;
    meta[META_WORLD] = 1;
    sh_ckpt_section secs[3];
    int n = 0;
    secs[n++] = (sh_ckpt_section){"meta", meta, sizeof meta};
    secs[n++] = (sh_ckpt_section){"params", sh_net_params(net), sh_net_nparams(net) * sizeof(float)};
    if (nstats) secs[n++] = (sh_ckpt_section){"stats", stats, nstats * sizeof(float)};
    return sh_ckpt_save(path, secs, n);
}

shoal_result sh_snapshot_read_meta(const char *path, sh_snapshot_meta *out)
{
    _Static_assert(sizeof out->v / sizeof out->v[0] == META_COUNT, "meta slots");
    sh_weights_format fmt;
    SH_TRY(sh_snapshot_format(path, &fmt));
    if (fmt != SH_WEIGHTS_SHOAL) /* weights without a run's state: a start, not a resume */
        return SH_FAIL(SHOAL_ERR_FORMAT, "%s holds %s, not a shoal checkpoint to resume from; start from its "
                       "weights with --weights %s", path, sh_snapshot_format_name(fmt), path);
    return read_meta(path, out->v);
}

uint64_t sh_snapshot_meta_seed(const sh_snapshot_meta *m) { return m->v[META_SEED]; }

/* A part's blocks from the whole model's in the file. */
static shoal_result restore_part(sh_trainer *t, const char *path, const uint64_t *meta)
{
    const sh_model_part *part = t->strategy->part;
    size_t nstats = 0, noptim = 0, per, extra;
    float *stats = sh_net_stats(t->net, &nstats);
    float *optim = sh_optim_state(t->opt, &noptim);
    optim_shape(t->opt, t->nparams, &per, &extra);
    size_t W = part->nparams_whole;
    if (meta[META_NOPTIM] != per * W + extra)
        return SH_FAIL(SHOAL_ERR_FORMAT,
                       "checkpoint %s holds %" PRIu64 " optimizer values but this optimizer "
                       "has %zu; resume with the same optimizer settings in the .cfg",
                       path, meta[META_NOPTIM], per * W + extra);
    whole_blocks w;
    shoal_result rc = whole_alloc(&w, W, part->nstats_whole, per * W + extra);
    sh_ckpt_section secs[3];
    int n = 0;
    secs[n++] = (sh_ckpt_section){"params", w.params, W * sizeof(float)};
    if (w.nstats) secs[n++] = (sh_ckpt_section){"stats", w.stats, w.nstats * sizeof(float)};
    if (w.noptim) secs[n++] = (sh_ckpt_section){"optim", w.optim, w.noptim * sizeof(float)};
    if (rc == SHOAL_OK) rc = sh_ckpt_load(path, secs, n);
    if (rc == SHOAL_OK) rc = check_finite_flat(w.params, W, path);
    if (rc == SHOAL_OK) {
        take_share(t, w.params, t->params);
        if (nstats) memcpy(stats, w.stats + part->stats_off, nstats * sizeof(float));
        for (size_t k = 0; k < per; k++) take_share(t, w.optim + k * W, optim + k * t->nparams);
        if (extra) memcpy(optim + per * t->nparams, w.optim + per * W, extra * sizeof(float));
    }
    whole_free(&w);
    return rc;
}

shoal_result sh_snapshot_restore(sh_trainer *t, const char *path, const sh_snapshot_meta *m)
{
    const uint64_t *meta = m->v;
    const sh_model_part *part = t->strategy->part;
    SH_TRY(check_counts(path, meta));
    if (!meta[META_GLOBAL_BATCH]) /* sh_snapshot_save_weights' */
        return SH_FAIL(SHOAL_ERR_INVALID, "%s holds weights only (no training position); start from them with "
                       "--weights %s, not --resume", path, path);
    SH_TRY(check_model_part(path, meta, t->net, part));
    if (meta[META_DATA_HASH] && t->train_set->fingerprint && meta[META_DATA_HASH] != t->train_set->fingerprint)
        return SH_FAIL(SHOAL_ERR_INVALID,
                       "checkpoint %s was trained on other pictures than %s (files or labels differ); "
                       "its place in the data order would mean other images: resume on the same folder "
                       "or list, or start from its weights with --weights", path, t->train_set->name);
    if (part && meta[META_GLOBAL_BATCH] != (uint64_t)t->global_batch)
        return SH_FAIL(SHOAL_ERR_INVALID,
                       "checkpoint %s was trained with batch %" PRIu64 ", this run uses %d; "
                       "resume with --batch %" PRIu64 " to continue the same data order",
                       path, meta[META_GLOBAL_BATCH], t->global_batch, meta[META_GLOBAL_BATCH]);
    if (part) {
        SH_TRY(restore_part(t, path, meta));
        uint64_t rng[4];
        for (int i = 0; i < 4; i++) rng[i] = meta[META_RNG0 + i];
        sh_net_rng_set(t->net, rng);
        SH_TRY(sh_loader_seek(t->loader, (int64_t)meta[META_LOADER_EPOCH], (int64_t)meta[META_LOADER_STEP]));
        t->steps_done = (int64_t)meta[META_STEPS_DONE];
        return SHOAL_OK;
    }
    size_t nstats = 0, noptim = 0;
    float *stats = sh_net_stats(t->net, &nstats);
    float *optim = sh_optim_state(t->opt, &noptim);
    if (meta[META_NOPTIM] != noptim)
        return SH_FAIL(SHOAL_ERR_FORMAT,
                       "checkpoint %s holds %" PRIu64 " optimizer values but this optimizer "
                       "has %zu; resume with the same optimizer settings in the .cfg",
                       path, meta[META_NOPTIM], noptim);
    if (meta[META_SOLVER_NBYTES] && !t->strategy->ops->ckpt_set)
        return SH_FAIL(SHOAL_ERR_INVALID,
                       "checkpoint %s was trained by L-BFGS (each step the whole set); continue with --solver "
                       "lbfgs, or start this optimizer from its weights with --weights %s", path, path);
    /* a full-batch step reads the whole set whatever the batch: there is no data order to keep */
    if (meta[META_GLOBAL_BATCH] != (uint64_t)t->global_batch && !t->strategy->full_batch)
        return SH_FAIL(SHOAL_ERR_INVALID,
                       "checkpoint %s was trained with batch %" PRIu64 ", this run uses %d; "
                       "resume with --batch %" PRIu64 " to continue the same data order",
                       path, meta[META_GLOBAL_BATCH], t->global_batch, meta[META_GLOBAL_BATCH]);
    if (meta[META_NSTATE] != t->nstate ||
        (t->nstate && meta[META_WORLD] != (uint64_t)t->strategy->world))
        return SH_FAIL(SHOAL_ERR_INVALID,
                       "checkpoint %s holds the recurrent state of %" PRIu64 " rank(s) x %" PRIu64
                       " values, this run needs %d x %zu; resume with the same -n and --batch",
                       path, meta[META_WORLD], meta[META_NSTATE], t->strategy->world, t->nstate);
    sh_ckpt_section secs[4];
    int n = 0;
    secs[n++] = (sh_ckpt_section){"params", t->params, t->nparams * sizeof(float)};
    if (nstats) secs[n++] = (sh_ckpt_section){"stats", stats, nstats * sizeof(float)};
    if (noptim) secs[n++] = (sh_ckpt_section){"optim", optim, noptim * sizeof(float)};
    if (t->nstate)
        secs[n++] = (sh_ckpt_section){"rnn_state", t->state_all,
                                      t->nstate * (size_t)t->strategy->world * sizeof(float)};
    SH_TRY(sh_ckpt_load(path, secs, n));
    SH_TRY(check_finite(t->net, path));
    if (t->nstate)
        memcpy(sh_net_state(t->net, NULL), t->state_all + (size_t)t->strategy->rank * t->nstate,
               t->nstate * sizeof(float));
    uint64_t rng[4];
    for (int i = 0; i < 4; i++) rng[i] = meta[META_RNG0 + i];
    sh_net_rng_set(t->net, rng);
    if (!t->strategy->full_batch) /* a full-batch step reads the set its own way */
        SH_TRY(sh_loader_seek(t->loader, (int64_t)meta[META_LOADER_EPOCH], (int64_t)meta[META_LOADER_STEP]));
    t->steps_done = (int64_t)meta[META_STEPS_DONE];
    return SHOAL_OK;
}

/* A rank's own file: "rankmeta" (these slots) and "rankstate" (count floats). */
enum { RANK_VERSION = 0, RANK_CFG_HASH, RANK_WORLD, RANK_RANK, RANK_COUNT, RANK_STEPS_DONE, RANK_SLOTS = 8 };

static void rank_file_path(const char *path, int rank, char *out, size_t cap)
{
    snprintf(out, cap, "%s.worker%d", path, rank);
}

shoal_result sh_snapshot_save_rank_file(sh_trainer *t, const char *path)
{
    sh_strategy *s = t->strategy;
    size_t count = sh_strategy_rank_state_count(s);
    t->rank_file_count = count;
    if (!count) return SHOAL_OK;
    char file[4096];
    rank_file_path(path, s->job_rank, file, sizeof file);
    float *mine = NULL;
    SH_TRY(sh_calloc(count, sizeof(float), (void **)&mine));
    s->ops->rank_state_get(s, mine);
    uint64_t meta[RANK_SLOTS] = {0};
    meta[RANK_VERSION] = 1;
    meta[RANK_CFG_HASH] = sh_net_cfg_hash(t->net);
    meta[RANK_WORLD] = (uint64_t)s->job_world;
    meta[RANK_RANK] = (uint64_t)s->job_rank;
    meta[RANK_COUNT] = count;
    meta[RANK_STEPS_DONE] = (uint64_t)t->steps_done;
    sh_ckpt_section secs[2] = {{"rankmeta", meta, sizeof meta}, {"rankstate", mine, count * sizeof(float)}};
    shoal_result rc = sh_ckpt_save(file, secs, 2);
    free(mine);
    return rc;
}

/* This rank's own file into mine (count floats): 1 when it fits the checkpoint (same
 * model, rank, ranks and step), 0 when it is missing or does not fit (said, as this rank). */
static shoal_result read_rank_file(sh_trainer *t, const char *path, const uint64_t *ck, float *mine,
                                   size_t count, int *fits)
{
    sh_strategy *s = t->strategy;
    char file[4096];
    int me = s->job_rank, all = s->job_world;
    const char *who = sh_strategy_rank_noun(s);
    rank_file_path(path, me, file, sizeof file);
    *fits = 0;
    if (access(file, F_OK) != 0) {
        SH_LOG_W("train", "%s %d: %s is missing: this %s's error-feedback residuals start from zero", who, me, file,
                 who);
        return SHOAL_OK;
    }
    uint64_t meta[RANK_SLOTS];
    sh_ckpt_section secs[2] = {{"rankmeta", meta, sizeof meta}, {"rankstate", mine, count * sizeof(float)}};
    SH_TRY(sh_ckpt_load(file, secs, 1)); /* damaged: refused, like the checkpoint itself */
    if (meta[RANK_VERSION] != 1 || meta[RANK_CFG_HASH] != ck[META_CFG_HASH] ||
        meta[RANK_WORLD] != (uint64_t)all || meta[RANK_RANK] != (uint64_t)me ||
        meta[RANK_COUNT] != count || meta[RANK_STEPS_DONE] != ck[META_STEPS_DONE]) {
        SH_LOG_W("train", "%s %d: %s holds %s %" PRIu64 " of %" PRIu64 "'s %" PRIu64 " residual values at "
                 "step %" PRIu64 ", the checkpoint is %s %d of %d's %zu at step %" PRIu64 ": this %s's "
                 "error-feedback residuals start from zero", who, me, file, who, meta[RANK_RANK], meta[RANK_WORLD],
                 meta[RANK_COUNT], meta[RANK_STEPS_DONE], who, me, all, count, ck[META_STEPS_DONE], who);
        return SHOAL_OK;
    }
    SH_TRY(sh_ckpt_load(file, secs, 2));
    *fits = 1;
    return SHOAL_OK;
}

shoal_result sh_snapshot_restore_rank_file(sh_trainer *t, const char *path, const sh_snapshot_meta *m)
{
    const uint64_t *ck = m->v;
    sh_strategy *s = t->strategy;
    size_t count = sh_strategy_rank_state_count(s);
    uint64_t per = ck[META_RANK_FILES], world = ck[META_WORLD];
    const char *who = sh_strategy_rank_noun(s);
    if (!count) return SHOAL_OK;
    /* What concerns every rank alike, rank 0 says once. Where ranks hold parts of the model
     * they keep different amounts (a stage, a share): per is the lead's, and each rank's own
     * file says whether it fits. */
    if (!per || world != (uint64_t)s->world || (!s->part && per != count)) {
        s->ops->rank_state_set(s, NULL);
        if (s->rank != 0) return SHOAL_OK;
        if (!per)
            SH_LOG_W("train", "the checkpoint holds no error-feedback residuals of the %ss (saved without a "
                     "--compress that keeps them, or by a shoal that kept them inside it); they start from zero",
                     who);
        else if (world != (uint64_t)s->world)
            SH_LOG_W("train", "the checkpoint's error-feedback residuals are for %" PRIu64 " %ss, this run "
                     "has %d: they start from zero", world, who, s->world);
        else
            SH_LOG_W("train", "the checkpoint's error-feedback residuals (%" PRIu64 " values a %s) do not fit "
                     "this run's compression (%zu): they start from zero; resume with the same --compress",
                     per, who, count);
        return SHOAL_OK;
    }
    float *mine = NULL;
    int fits = 0;
    SH_TRY(sh_calloc(count, sizeof(float), (void **)&mine));
    shoal_result rc = read_rank_file(t, path, ck, mine, count, &fits);
    if (rc == SHOAL_OK) s->ops->rank_state_set(s, fits ? mine : NULL);
    free(mine);
    return rc;
}

shoal_result sh_snapshot_restore_solver(sh_trainer *t, const char *path, const sh_snapshot_meta *m)
{
    sh_strategy *s = t->strategy;
    size_t nbytes = (size_t)m->v[META_SOLVER_NBYTES];
    if (!s->ops->ckpt_set) return SHOAL_OK;
    if (!nbytes) return s->ops->ckpt_set(s, NULL, 0);
    void *buf = NULL;
    SH_TRY(sh_calloc(nbytes, 1, &buf));
    sh_ckpt_section sec = {"solver", buf, nbytes};
    shoal_result rc = sh_ckpt_load(path, &sec, 1);
    if (rc == SHOAL_OK) rc = s->ops->ckpt_set(s, buf, nbytes);
    if (rc != SHOAL_OK) sh_err_prefix("checkpoint %s: ", path);
    free(buf);
    return rc;
}

shoal_result sh_snapshot_load_weights(sh_net *net, const char *path)
{
    SH_TRY(sh_file_check_regular(path, "weights", "a .weights file or a checkpoint"));
    sh_weights_format fmt; /* the content decides, whatever the name says */
    SH_TRY(sh_snapshot_format(path, &fmt));
    if (fmt == SH_WEIGHTS_DARKNET) {
        SH_TRY(sh_darknet_weights_load(net, path, NULL));
        return check_finite(net, path);
    }
    if (fmt == SH_WEIGHTS_CAFFE) {
        if (!sh_net_cfg_path(net) || !sh_caffe_is_prototxt(sh_net_cfg_path(net)))
            return SH_FAIL(SHOAL_ERR_FORMAT, "%s holds Caffe's weights (a .caffemodel), which a Caffe model reads: "
                           "give its .prototxt as the model", path);
        SH_TRY(sh_caffe_weights_load(net, path));
        return check_finite(net, path);
    }
    uint64_t meta[META_COUNT];
    SH_TRY(read_meta(path, meta));
    SH_TRY(check_model(path, meta, net));
    size_t nstats = 0;
    float *stats = sh_net_stats(net, &nstats);
    sh_ckpt_section secs[2];
    int n = 0;
    secs[n++] = (sh_ckpt_section){"params", sh_net_params(net), sh_net_nparams(net) * sizeof(float)};
    if (nstats) secs[n++] = (sh_ckpt_section){"stats", stats, nstats * sizeof(float)};
    SH_TRY(sh_ckpt_load(path, secs, n));
    return check_finite(net, path);
}
