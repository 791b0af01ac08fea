/* dp/allreduce.c — synchronous data parallelism: rank 0's weights for every rank, gradients
 * averaged in buckets whose allreduces overlap backward (and across hosts the next forward).
 * Not here: the step (step.c), the save/stop agreement behind a deferred exchange (agree.c),
 * compressed gradients (dp/compress.c), the collectives (src/comm).
 * Proved by tests/train/test_dp.c and test_dp_overlap.c. */

/* At attach every rank checks it has the same model and batch, then takes rank 0's weights
 * (broadcast, or one copy in a host's shared window). The gradient block is cut into buckets
 * of whole layers from the last layer backwards; as soon as backward has finished a bucket
 * its non-blocking allreduce (average) starts, with the update riding on it (each rank steps
 * its block). On one host finish waits for all. Across hosts (P3, ByteScheduler) the buckets
 * of two ranks are cut into chunks, backward starts the first SHOAL_DP_AHEAD_KB of them (a
 * connected layer's chunks as its rows are done, in blocks of SHOAL_DP_GRAD_ROWS:
 * sh_net_set_grad_rows), finish starts the rest with the first layers' first and returns:
 * the next forward waits before each layer only for the chunks holding its weights, and
 * drain (the run loop, before anything else reads them) for all. */
#include "train/dp/allreduce.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/env.h"
#include "base/err.h"
#include "base/log.h"
#include "base/trace.h"
#include "base/util.h"
#include "nn/net.h"

typedef struct dp_state dp_state;

/* A part [lo, hi) of a bucket that this rank updates. */
typedef struct {
    size_t lo, hi;
} own_span;

typedef struct {
    size_t lo, count;     /* slice of the gradient block */
    int grp;              /* its group (the layers it belongs to) */
    size_t got;           /* this step: floats of it backward has finished */
    int is_ready, started; /* this step: backward finished it; its exchange started */
    shoal_request *req;   /* started and not yet waited for, or NULL */
    uint64_t start_ns;
    dp_state *d;
    /* With the update split across ranks: the parts of the bucket this rank updates (seen
     * from the apply calls, the same every step; relative to lo): one block, or one block of
     * each piece of the pipelined hierarchical allreduce. own_lost: no memory to record one. */
    own_span *own;
    int nown, capown, own_lost;
    int lead;  /* its exchange's apply_lead (comm.h): 0 where another rank stepped the same part
                  alike (the hierarchical allreduce: one rank per host; or every rank all) */
    double sq; /* this step: the squared norm of the reduced gradients this rank applied */
} bucket;

/* Whole layers that travel together (last layer first); a large group is cut into chunks,
 * buckets [first, end), so that a group needed sooner by the next forward can go first. */
typedef struct {
    size_t count, ready; /* floats; of them, those backward has finished this step */
    int first, end;
} group;

struct dp_state {
    shoal_comm *c;
    sh_dp_opts o;
    sh_strategy *s;
    float *grads, *params;
    int shard;            /* the allreduce applies the optimizer (each rank its block) */
    bucket *b;
    int nb;
    group *g;
    int ng;
    int *group_of_layer;   /* [nlayers], -1: no parameters */
    int defers;            /* finish may leave exchanges in flight (SHOAL_DP_OVERLAP) */
    size_t ahead;          /* floats backward may start while deferring (SHOAL_DP_AHEAD_KB) */
    int opened;            /* this step's first exchange has started (optimizer begun) */
    int inflight;          /* buckets started and not yet waited for */
    int fwd_seen;          /* the forward after a deferred finish has checked for overlap */
    size_t started;        /* floats started this step */
    sh_step_comm acc;      /* this step's communication so far */
    shoal_result failed;   /* from grad_ready, reported by finish */
    sh_dp_profile prof;
    sh_step_comm last;     /* the last step's communication */
    sh_gradx *gx;          /* compressed gradients (--compress, --sfb), else NULL */
    shoal_codec_opts codec;
    int sfb;
    const char *model;
    size_t nparams;
    float lr;              /* this step's rate, for an update the exchange applies */
    int elastic;           /* every rank holds and steps everything (sh_strategy_allreduce_elastic) */
};

static int compresses(const dp_state *d) { return d->codec.codec != SHOAL_CODEC_NONE || d->sfb; }

shoal_result sh_dp_check_same(shoal_comm *c, sh_net *net, int batch)
{
    int world = shoal_comm_world(c);
    int64_t mine[3] = {(int64_t)sh_net_cfg_hash(net), batch, (int64_t)sh_net_nparams(net)};
    int64_t *all = malloc(sizeof(int64_t) * 3 * (size_t)world);
    if (!all) return SH_FAIL(SHOAL_ERR_NOMEM, "out of memory");
    shoal_result rc = shoal_allgather(c, mine, all, 3, SHOAL_INT64);
    for (int r = 1; rc == SHOAL_OK && r < world; r++) {
        const char *what = all[3 * r] != all[0]       ? "model file (a different .cfg)"
                           : all[3 * r + 1] != all[1] ? "batch size"
                           : all[3 * r + 2] != all[2] ? "parameter count"
                                                      : NULL;
        if (!what) continue;
        const char *host = shoal_comm_host(c, r);
        if (all[3 * r] == all[0] && all[3 * r + 1] != all[1])
            rc = SH_FAIL(SHOAL_ERR_MISMATCH, "rank %d (%s) was started with batch %lld, rank 0 with %lld: "
                         "start every rank with the same model and options", r, host ? host : "?",
                         (long long)all[3 * r + 1], (long long)all[1]);
        else
            rc = SH_FAIL(SHOAL_ERR_MISMATCH, "rank %d (%s) was started with another %s than rank 0: "
                         "start every rank with the same model and options", r, host ? host : "?", what);
    }
    free(all);
    return rc;
}

/* Ranks on one host that split the update keep one copy of the weights for all of them, in
 * a shared window, and their gradients there too: each rank then reduces its block reading
 * the others' gradients in place and updates the one copy, so no weights are copied between
 * ranks, and the GEMMs of all ranks read the same weights through the shared cache. Rank
 * 0's weights go into the window (the broadcast the private copies need). 1: done; 0: not
 * possible here (the caller goes on with private copies). */
static shoal_result share_weights(dp_state *d, sh_net *net, int *done)
{
    *done = 0;
    long on = 1;
    SH_TRY(sh_env_long("SHOAL_DP_WINDOW", &on));
    if (!on || !d->shard || shoal_comm_world(d->c) < 2) return SHOAL_OK;
    size_t nb = (sh_net_nparams(net) + 16) * sizeof(float);
    shoal_window *w = NULL;
    shoal_result rc = shoal_window_create(d->c, nb, nb, &w);
    if (rc == SHOAL_ERR_UNSUPPORTED || rc == SHOAL_ERR_NOMEM) { /* across hosts, SHOAL_TRANSPORT=tcp; no memory */
        if (rc == SHOAL_ERR_NOMEM) SH_LOG_W("train", "each rank keeps its own copy of the weights: %s",
                                            shoal_last_error_message());
        else SH_LOG_I("train", "each rank keeps its own copy of the weights: %s", shoal_last_error_message());
        return SHOAL_OK;
    }
    SH_TRY(rc);
    int rank = shoal_comm_rank(d->c);
    sh_net_use_blocks(net, shoal_window_common(w), shoal_window_block(w, rank), rank == 0);
    SH_TRY(shoal_barrier(d->c)); /* nobody reads the weights before rank 0 has put them there */
    *done = 1;
    return SHOAL_OK;
}

static shoal_result before_forward(void *ctx, int layer);

/* Groups of whole layers of up to cap floats, last layer first. */
static shoal_result group_layers(dp_state *d, sh_net *net, size_t cap)
{
    int nl = sh_net_nlayers(net);
    d->group_of_layer = calloc((size_t)nl, sizeof(int));
    d->g = calloc((size_t)nl + 1, sizeof(group));
    if (!d->group_of_layer || !d->g) return SH_FAIL(SHOAL_ERR_NOMEM, "out of memory");
    int cur = -1;
    size_t lo_of_cur = 0;
    for (int i = nl - 1; i >= 0; i--) {
        size_t off, cnt;
        sh_net_layer_params(net, i, &off, &cnt);
        d->group_of_layer[i] = -1;
        if (!cnt) continue;
        /* a layer that would overflow the group starts the next one (a layer larger than
         * the cap travels alone): its allreduce then starts as soon as its backward ends */
        if (cur < 0 || (d->g[cur].count > 0 && d->g[cur].count + cnt > cap) || off + cnt != lo_of_cur) {
            cur = d->ng++;
            d->g[cur].count = 0;
        }
        lo_of_cur = off;
        d->g[cur].count += cnt;
        d->group_of_layer[i] = cur;
    }
    return SHOAL_OK;
}

/* Each group's buckets: the whole group, or with chunk > 0 chunks of it. Each request costs a
 * round of messages: a group is cut into at most 8 chunks of at least chunk floats. */
static shoal_result cut_buckets(dp_state *d, sh_net *net, size_t chunk)
{
    int nl = sh_net_nlayers(net), nb = 0;
    size_t *cut = calloc((size_t)d->ng + 1, sizeof(size_t));
    if (!cut) return SH_FAIL(SHOAL_ERR_NOMEM, "out of memory");
    for (int k = 0; k < d->ng; k++) {
        cut[k] = chunk && chunk < (d->g[k].count + 7) / 8 ? (d->g[k].count + 7) / 8 : chunk;
        nb += cut[k] ? (int)((d->g[k].count + cut[k] - 1) / cut[k]) : 1;
    }
    d->b = calloc((size_t)nb + 1, sizeof(bucket));
    if (!d->b) {
        free(cut);
        return SH_FAIL(SHOAL_ERR_NOMEM, "out of memory");
    }
    for (int k = 0; k < d->ng; k++) {
        size_t glo = SIZE_MAX;
        for (int i = 0; i < nl; i++)
            if (d->group_of_layer[i] == k) {
                size_t off, cnt;
                sh_net_layer_params(net, i, &off, &cnt);
                if (off < glo) glo = off;
            }
        d->g[k].first = d->nb;
        size_t ck = cut[k];
        for (size_t at = 0; at < d->g[k].count; at += ck ? ck : d->g[k].count) {
            bucket *b = &d->b[d->nb++];
            b->lo = glo + at;
            b->count = ck && d->g[k].count - at > ck ? ck : d->g[k].count - at;
            b->grp = k;
        }
        d->g[k].end = d->nb;
    }
    free(cut);
    for (int i = 0; i < d->nb; i++) {
        d->b[i].d = d;
        d->b[i].lead = 1;
    }
    return SHOAL_OK;
}

/* The float32 exchange: its buckets, and whether a step's tail overlaps the next forward. */
static shoal_result plan_exchange(sh_strategy *s, sh_net *net, int shared)
{
    dp_state *d = s->impl;
    size_t cap = (size_t)((d->o.bucket_mb > 0 ? d->o.bucket_mb : 1.0) * 1024 * 1024 / sizeof(float));
    if (cap == 0) cap = 1;
    SH_TRY(group_layers(d, net, cap));
    /* Overlap with the next forward (the trainer's run loop allows it: may_defer) where the
     * update rides on the allreduce, each rank has its own weights and the ranks span hosts
     * (on one host the exchange is short and the overlap measured no gain). With two ranks every
     * element's reduction is the one sum a + b whatever the cut, so large groups are cut into
     * chunks and the next forward's first layers need not queue behind the last ones. */
    long overlap = 1, chunk_kb = 256, ahead_kb = 1280, grad_rows = 32;
    SH_TRY(sh_env_long("SHOAL_DP_OVERLAP", &overlap));
    SH_TRY(sh_env_long("SHOAL_DP_GRAD_ROWS", &grad_rows));
    SH_TRY(sh_env_long("SHOAL_DP_CHUNK_KB", &chunk_kb));
    SH_TRY(sh_env_long("SHOAL_DP_AHEAD_KB", &ahead_kb));
    int across = 0; /* 1: the ranks are on more than one host */
    for (int r = 1; r < shoal_comm_world(d->c); r++) {
        const char *h0 = shoal_comm_host(d->c, 0), *h = shoal_comm_host(d->c, r);
        across |= h0 && h && strcmp(h0, h) != 0;
    }
    d->defers = (overlap == 2 || (overlap == 1 && across)) && d->shard && !shared;
    size_t chunk = d->defers && shoal_comm_world(d->c) == 2 && chunk_kb > 0 ? (size_t)chunk_kb * 256 : 0;
    /* backward may start at least half of the gradients (the wire must stay busy through a
     * long backward) */
    d->ahead = (size_t)ahead_kb * 256;
    if (d->ahead < d->nparams / 2) d->ahead = d->nparams / 2;
    SH_TRY(cut_buckets(d, net, chunk));
    /* With chunks, backward offers a connected layer's weight gradient in blocks of rows as
     * it computes them (the same bits), and a chunk starts once its rows are done: the wire
     * need not idle through a large layer's whole backward. */
    if (chunk && grad_rows > 0) sh_net_set_grad_rows(net, (int)grad_rows);
    if (d->defers) sh_net_set_before_forward(net, before_forward, s); /* else every step ends complete */
    SH_LOG_I("train", "data parallel over %d ranks: %zu parameters in %d buckets of up to %.1f MB%s%s",
             shoal_comm_world(d->c), d->nparams, d->nb, (double)cap * 4 / 1e6,
             shared ? ", one copy of the weights in shared memory" : "",
             d->defers ? ", the tail overlapping the next forward" : "");
    return SHOAL_OK;
}

static shoal_result attach(sh_strategy *s, sh_net *net)
{
    dp_state *d = s->impl;
    SH_TRY(sh_dp_check_same(d->c, net, d->o.batch));
    size_t nparams = sh_net_nparams(net);
    d->nparams = nparams;
    /* The update rides on the allreduce: each bucket's optimizer step runs as soon as its
     * gradients are reduced, and where the allreduce splits the work each rank updates only
     * its block (ZeRO stage 1: the optimizer's work and memory traffic are divided). */
    long shard = 1;
    SH_TRY(sh_env_long("SHOAL_DP_SHARD", &shard));
    /* compressed, or elastic (any rank that remains must hold every moment): every rank steps all */
    d->shard = shard && s->opt != NULL && !compresses(d) && !d->elastic;
    s->applies_update = d->shard;
    int shared = 0;
    SH_TRY(share_weights(d, net, &shared));
    d->prof.shared_weights = shared;
    d->grads = sh_net_grads(net);
    d->params = sh_net_params(net);
    /* Rank 0's weights and batch-norm statistics for everyone. */
    if (!shared) SH_TRY(shoal_broadcast(d->c, d->params, d->params, nparams, SHOAL_FLOAT32, 0));
    size_t nstats = 0;
    float *stats = sh_net_stats(net, &nstats);
    if (nstats) SH_TRY(shoal_broadcast(d->c, stats, stats, nstats, SHOAL_FLOAT32, 0));
    if (!compresses(d)) return plan_exchange(s, net, shared);
    sh_gradx_opts go = {d->codec, d->sfb, d->model, 0, 0};
    SH_TRY(sh_gradx_create(d->c, net, &go, &d->gx));
    s->applies_update = s->opt != NULL && sh_gradx_applies_update(d->gx); /* momentum correction */
    char spec[48];
    SH_LOG_I("train", "data parallel over %d ranks: %zu parameters, gradients compressed with %s%s",
             shoal_comm_world(d->c), nparams, shoal_codec_format(&d->codec, spec, sizeof spec),
             d->sfb ? " and sufficient factors" : "");
    d->prof.compressed = 1;
    return SHOAL_OK;
}

static shoal_result begin(sh_strategy *s, int64_t step)
{
    dp_state *d = s->impl;
    for (int i = 0; i < d->nb; i++) {
        d->b[i].is_ready = d->b[i].started = 0;
        d->b[i].got = 0;
    }
    for (int k = 0; k < d->ng; k++) d->g[k].ready = 0;
    d->failed = SHOAL_OK;
    d->opened = 0;
    d->started = 0;
    if (d->gx) sh_gradx_begin(d->gx, d->grads);
    if (d->shard || s->applies_update) d->lr = sh_lr_at(s->lr, step);
    return SHOAL_OK;
}

/* Records that this rank updates [lo, hi) of b (after the first step, a part it knows). */
static void own_add(bucket *b, size_t lo, size_t hi)
{
    for (int i = 0; i < b->nown; i++) {
        own_span *o = &b->own[i];
        if (lo <= o->hi && hi >= o->lo) { /* inside, overlapping or adjacent: one part */
            if (lo < o->lo) o->lo = lo;
            if (hi > o->hi) o->hi = hi;
            return;
        }
    }
    if (b->nown == b->capown) {
        int cap = b->capown ? 2 * b->capown : 4;
        own_span *grown = realloc(b->own, sizeof *grown * (size_t)cap);
        if (!grown) {
            b->own_lost = 1;
            return;
        }
        b->own = grown;
        b->capown = cap;
    }
    b->own[b->nown++] = (own_span){lo, hi};
}

static int span_cmp(const void *a, const void *b)
{
    size_t x = ((const own_span *)a)->lo, y = ((const own_span *)b)->lo;
    return x < y ? -1 : x > y;
}

/* On the communicator's thread: bucket-relative [off, off + n) of the gradients is reduced;
 * step the optimizer there. */
static void apply_piece(void *ctx, size_t off, size_t n, const float *reduced)
{
    bucket *b = ctx;
    dp_state *d = b->d;
    if (d->s->grad_sq_wanted) b->sq += sh_sum_squares(reduced, n);
    sh_optim_apply(d->s->opt, d->params, reduced, b->lo + off, n);
    own_add(b, off, off + n);
    d->prof.updated += (double)n;
}

static void trace_bucket(int i, const bucket *b, const shoal_request_trace *tr);

/* Waits for bucket i's exchange (its update applied) and records how it ran; the step's
 * figures are complete with its last bucket. */
static shoal_result complete(dp_state *d, int i)
{
    bucket *b = &d->b[i];
    if (!b->req) return SHOAL_OK;
    shoal_request_trace tr;
    shoal_result r = shoal_wait_trace(b->req, &tr);
    b->req = NULL;
    if (r == SHOAL_OK) b->lead = tr.apply_lead;
    d->inflight--;
    d->prof.comm_s += (double)(sh_now_ns() - b->start_ns) * 1e-9;
    d->prof.bytes += (double)b->count * 4;
    d->acc.comm_s += (double)(tr.finished_ns - tr.started_ns) * 1e-9;
    d->acc.nbytes += (double)b->count * 4;
    if (sh_trace_on()) trace_bucket(i, b, &tr);
    if (d->inflight == 0) {
        int world = shoal_comm_world(d->c);
        double ring = world > 1 ? 2.0 * (world - 1) / world : 0; /* bytes sent per payload byte */
        d->last = d->acc;
        d->last.sent_nbytes = d->last.nbytes * ring;
        d->last.busbw_gb_s = d->last.comm_s > 0 ? d->last.sent_nbytes / d->last.comm_s * 1e-9 : 0;
    }
    return r;
}

/* Every exchange still in flight, completed; the first error. */
static shoal_result complete_all(dp_state *d)
{
    shoal_result rc = SHOAL_OK;
    for (int i = 0; i < d->nb; i++) {
        shoal_result r = complete(d, i);
        if (rc == SHOAL_OK) rc = r;
    }
    return rc;
}

static void start_bucket(dp_state *d, bucket *b)
{
    if (b->started || d->failed != SHOAL_OK) return;
    if (!d->opened) { /* the step's first exchange: the last step's are all done, then the
                         optimizer's rates for this step (Adam counts steps here) */
        d->failed = complete_all(d);
        if (d->failed != SHOAL_OK) return;
        if (d->shard) sh_optim_begin(d->s->opt, d->lr);
        memset(&d->acc, 0, sizeof d->acc);
        d->opened = 1;
    }
    b->started = 1;
    if (d->g[b->grp].ready < d->g[b->grp].count) d->prof.early_chunks++;
    b->start_ns = sh_now_ns();
    b->sq = 0;
    float *p = d->grads + b->lo;
    if (d->shard)
        d->failed = shoal_allreduce_apply_start(d->c, p, d->params + b->lo, b->count, SHOAL_AVG, apply_piece,
                                                b, &b->req);
    else
        d->failed = shoal_allreduce_start(d->c, p, p, b->count, SHOAL_FLOAT32, SHOAL_AVG, &b->req);
    if (b->req) d->inflight++;
    d->started += b->count;
}

/* Starts the buckets backward has finished, those the next forward needs first (the first
 * layers: the highest index) first; while the step may leave its tail in flight, backward
 * starts at most d->ahead floats (then the rest waits for the end of backward, where the
 * first layers' buckets go ahead of the rest of the last layers'). Decided only from the
 * order of the layers, never from timing: every rank starts the same buckets in the same
 * order, as the communicator requires. */
static void pump(dp_state *d, int all)
{
    for (;;) {
        int pick = -1;
        for (int i = d->nb - 1; i >= 0 && pick < 0; i--)
            if (d->b[i].is_ready && !d->b[i].started) pick = i;
        if (pick < 0 || d->failed != SHOAL_OK) return;
        if (!all && d->s->may_defer && d->defers && d->started > 0 && d->started + d->b[pick].count > d->ahead)
            return;
        start_bucket(d, &d->b[pick]);
    }
}

static void grad_ready(void *ctx, int layer, size_t offset, size_t count)
{
    sh_strategy *s = ctx;
    dp_state *d = s->impl;
    if (d->gx) {
        sh_gradx_layer_ready(d->gx, layer);
        return;
    }
    int k = d->group_of_layer[layer];
    if (k < 0) return;
    group *g = &d->g[k];
    g->ready += count;
    /* the slice may be a block of a layer (sh_net_set_grad_rows): its chunks whose floats
     * are all done become ready; slices come in a fixed order, the same on every rank */
    int any = 0;
    for (int i = g->first; i < g->end; i++) {
        bucket *b = &d->b[i];
        size_t lo = b->lo > offset ? b->lo : offset;
        size_t hi = b->lo + b->count < offset + count ? b->lo + b->count : offset + count;
        if (hi <= lo) continue;
        b->got += hi - lo;
        if (b->got == b->count) b->is_ready = any = 1;
    }
    if (any) pump(d, 0);
}

/* The net's hook before layer `layer` runs forward: the buckets holding its parameters,
 * still in flight from the last step, complete first (their update applied). */
static shoal_result before_forward(void *ctx, int layer)
{
    sh_strategy *s = ctx;
    dp_state *d = s->impl;
    if (!d->inflight) return SHOAL_OK;
    int k = d->group_of_layer[layer];
    if (k < 0) return SHOAL_OK;
    if (!d->fwd_seen) { /* this forward starts while the last step's exchange is on the wire */
        d->fwd_seen = 1;
        for (int i = 0; i < d->nb; i++) {
            int done = 1;
            if (d->b[i].req && shoal_test(d->b[i].req, &done) == SHOAL_OK && !done) {
                d->prof.overlapped_steps++;
                break;
            }
        }
    }
    uint64_t t0 = sh_now_ns();
    shoal_result rc = SHOAL_OK;
    for (int i = d->g[k].first; i < d->g[k].end; i++) {
        shoal_result r = complete(d, i);
        if (rc == SHOAL_OK) rc = r;
    }
    d->prof.wait_s += (double)(sh_now_ns() - t0) * 1e-9;
    return rc;
}

static shoal_result drain(sh_strategy *s)
{
    dp_state *d = s->impl;
    if (!d->inflight) return SHOAL_OK;
    uint64_t t0 = sh_now_ns();
    shoal_result rc = complete_all(d);
    d->prof.wait_s += (double)(sh_now_ns() - t0) * 1e-9;
    return rc;
}

/* Bucket i's row: queued (backward finished it) until the communicator's thread took it,
 * then the allreduce with how it ran; the same run on the communicator's row. */
static void trace_bucket(int i, const bucket *b, const shoal_request_trace *tr)
{
    sh_trace_event ev;
    memset(&ev, 0, sizeof ev);
    ev.track = SH_TRACK_BUCKET0 + i;
    ev.key[0] = "bucket";
    ev.val[0] = i;
    ev.key[1] = "bytes";
    ev.val[1] = (int64_t)b->count * 4;
    ev.skey[0] = "algorithm";
    ev.sval[0] = tr->algorithm;
    ev.skey[1] = "transport";
    ev.sval[1] = tr->transport;
    snprintf(ev.name, sizeof ev.name, "queued");
    ev.start_ns = tr->queued_ns;
    ev.dur_ns = tr->started_ns > tr->queued_ns ? tr->started_ns - tr->queued_ns : 0;
    sh_trace_add(&ev);
    snprintf(ev.name, sizeof ev.name, "allreduce");
    ev.start_ns = tr->started_ns;
    ev.dur_ns = tr->finished_ns > tr->started_ns ? tr->finished_ns - tr->started_ns : 0;
    sh_trace_add(&ev);
    ev.track = SH_TRACK_COMM;
    snprintf(ev.name, sizeof ev.name, "bucket %d", i);
    sh_trace_add(&ev);
}

static shoal_result finish(sh_strategy *s)
{
    dp_state *d = s->impl;
    uint64_t t0 = sh_now_ns();
    if (d->gx) {
        shoal_result rc = sh_gradx_reduce(d->gx, d->grads);
        if (rc == SHOAL_OK && s->applies_update) sh_gradx_apply(d->gx, s->opt, d->params, d->grads, d->nparams, d->lr);
        double dt = (double)(sh_now_ns() - t0) * 1e-9;
        sh_gradx_stats st;
        sh_gradx_get_stats(d->gx, &st);
        double busy_s = sh_gradx_busy_s(d->gx); /* summed over the steps */
        memset(&d->last, 0, sizeof d->last);    /* TensorBoard's comm/ scalars of this step */
        d->last.comm_s = busy_s - d->prof.comm_s;
        d->last.nbytes = (double)d->nparams * sizeof(float);
        d->last.sent_nbytes = st.wire_nbytes;
        d->prof.comm_s = busy_s;
        d->prof.wait_s += dt;
        d->prof.bytes += (double)d->nparams * sizeof(float);
        d->prof.wire_nbytes = st.wire_nbytes;
        d->prof.dense_nbytes = st.dense_nbytes;
        d->prof.residual_norm = st.residual_norm;
        d->prof.sfb_layers = st.sfb_layers;
        d->prof.steps++;
        return rc;
    }
    for (int i = 0; i < d->nb; i++) d->b[i].is_ready = 1; /* any backward did not report */
    pump(d, 1);
    d->prof.steps++;
    if (s->may_defer && d->defers) { /* the next forward (or drain) completes them */
        d->fwd_seen = 0;
        return d->failed;
    }
    shoal_result rc = d->failed;
    shoal_result r = complete_all(d);
    if (rc == SHOAL_OK) rc = r;
    uint64_t t1 = sh_now_ns();
    d->prof.wait_s += (double)(t1 - t0) * 1e-9;
    /* With the update riding on the allreduce the optimizer ran inside the buckets. */
    if (sh_trace_on() && d->shard) sh_trace_span(SH_TRACK_OPTIM, "optimizer (in allreduce)", t0, t1,
                                                 "updated_params", (int64_t)d->prof.updated, NULL, 0);
    return rc;
}

static void destroy(sh_strategy *s)
{
    dp_state *d = s->impl;
    if (d) {
        for (int i = 0; i < d->nb; i++)
            if (d->b[i].req) shoal_wait(d->b[i].req);
        for (int i = 0; i < d->nb; i++) free(d->b[i].own);
        free(d->b);
        free(d->g);
        free(d->group_of_layer);
        sh_gradx_destroy(d->gx);
        free(d);
    }
    free(s);
}

static shoal_result sum(sh_strategy *s, double *v, int n)
{
    dp_state *d = s->impl;
    return shoal_allreduce(d->c, v, v, (size_t)n, SHOAL_FLOAT64, SHOAL_SUM);
}

static shoal_result sum_start(sh_strategy *s, double *v, int n, shoal_request **req)
{
    dp_state *d = s->impl;
    return shoal_allreduce_start(d->c, v, v, (size_t)n, SHOAL_FLOAT64, SHOAL_SUM, req);
}

/* Before a checkpoint: every rank keeps the state of what it updates, zeroes the rest (where
 * several ranks step the same part alike, as every rank a bucket it updates whole, or one rank
 * per host in the hierarchical allreduce, only the one with apply_lead keeps it), and a sum
 * makes the state whole everywhere. Adam's step count, the same on every rank, is not summed. */
static shoal_result sync_state(sh_strategy *s)
{
    dp_state *d = s->impl;
    if (!d->shard || s->world == 1) return SHOAL_OK;
    for (int i = 0; i < d->nb; i++) {
        bucket *b = &d->b[i];
        if (b->nown == 0) continue; /* never stepped: zeros everywhere already */
        if (b->own_lost) return SH_FAIL(SHOAL_ERR_NOMEM, "checkpoint: out of memory recording the updated parts");
        if (!b->lead) {
            sh_optim_state_zero(s->opt, b->lo, b->count);
            continue;
        }
        qsort(b->own, (size_t)b->nown, sizeof *b->own, span_cmp);
        size_t at = 0; /* zero the gaps between the parts this rank updates */
        for (int k = 0; k < b->nown; k++) {
            if (b->own[k].lo > at) sh_optim_state_zero(s->opt, b->lo + at, b->own[k].lo - at);
            if (b->own[k].hi > at) at = b->own[k].hi;
        }
        sh_optim_state_zero(s->opt, b->lo + at, b->count - at);
    }
    size_t n = 0;
    float *state = sh_optim_state(s->opt, &n);
    return shoal_allreduce(d->c, state, state, sh_optim_moments(s->opt), SHOAL_FLOAT32, SHOAL_SUM);
}

/* The shares of the gradient norm: where the update is split each rank applied (and saw
 * reduced) only its block; a part several ranks applied alike counts once, at the rank with
 * apply_lead, as sync_state keeps it. Unsplit, every rank holds the whole averaged gradient. */
static double grad_sq_part(const sh_strategy *s)
{
    const dp_state *d = s->impl;
    double sq = 0;
    if (!d->shard) return s->rank == 0 ? sh_sum_squares(d->grads, d->nparams) : 0;
    for (int i = 0; i < d->nb; i++) {
        const bucket *b = &d->b[i];
        if (b->lead) sq += b->sq;
    }
    return sq;
}

static void step_comm(const sh_strategy *s, sh_step_comm *out)
{
    const dp_state *d = s->impl;
    *out = d->last;
}

/* The compressed exchange's residuals (and velocities): each rank's own, in its own file
 * beside the checkpoint (snapshot.c). */
static size_t rank_state_count(const sh_strategy *s)
{
    const dp_state *d = s->impl;
    return d->gx ? sh_gradx_state_count(d->gx) : 0;
}

static void rank_state_get(sh_strategy *s, float *out)
{
    dp_state *d = s->impl;
    sh_gradx_state_get(d->gx, out);
}

static void rank_state_set(sh_strategy *s, const float *in)
{
    dp_state *d = s->impl;
    if (in) sh_gradx_state_set(d->gx, in);
    else sh_gradx_state_reset(d->gx);
}

/* Only the float32 exchange across hosts (SHOAL_DP_OVERLAP) leaves a step's tail in flight. */
static int can_defer(const sh_strategy *s)
{
    const dp_state *d = s->impl;
    return d->defers;
}

static int comm_stats(const sh_strategy *s, double *wire, double *dense, double *residual)
{
    const dp_state *d = s->impl;
    if (!d->gx) return 0;
    *wire = d->prof.wire_nbytes;
    *dense = d->prof.dense_nbytes;
    *residual = d->prof.residual_norm;
    return 1;
}

static const sh_strategy_ops dp_ops = {
    .name = "allreduce",
    .attach = attach,
    .begin = begin,
    .finish = finish,
    .destroy = destroy,
    .grad_ready = grad_ready,
    .sum = sum,
    .sync_state = sync_state,
    .can_defer = can_defer,
    .drain = drain,
    .sum_start = sum_start,
    .rank_state_count = rank_state_count,
    .rank_state_get = rank_state_get,
    .rank_state_set = rank_state_set,
    .step_comm = step_comm,
    .comm_stats = comm_stats,
    .grad_sq_part = grad_sq_part,
};

shoal_result sh_strategy_allreduce_create(shoal_comm *c, const sh_dp_opts *o, sh_strategy **out)
{
    *out = NULL;
    sh_strategy *s = calloc(1, sizeof *s);
    dp_state *d = calloc(1, sizeof *d);
    if (!s || !d) {
        free(s);
        free(d);
        return SH_FAIL(SHOAL_ERR_NOMEM, "out of memory");
    }
    d->c = c;
    d->o = *o;
    s->ops = &dp_ops;
    s->rank = s->job_rank = shoal_comm_rank(c);
    s->world = s->job_world = shoal_comm_world(c);
    s->impl = d;
    shoal_codec_opts_default(&d->codec);
    d->s = s;
    *out = s;
    return SHOAL_OK;
}

void sh_strategy_allreduce_compress(sh_strategy *s, const shoal_codec_opts *codec, int sfb, const char *model)
{
    dp_state *d = s->impl;
    d->codec = *codec;
    d->sfb = sfb;
    d->model = model;
}

void sh_strategy_allreduce_elastic(sh_strategy *s)
{
    dp_state *d = s->impl;
    d->elastic = 1;
}

void sh_strategy_allreduce_profile(const sh_strategy *s, sh_dp_profile *out)
{
    const dp_state *d = s->impl;
    *out = d->prof;
}
