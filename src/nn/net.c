/* net.c — a network from a parsed cfg: its layers, the three blocks (parameters, gradients,
 * statistics), one arena for outputs, deltas and kept values, per-thread scratch, and the
 * forward / loss / backward passes; every buffer is allocated here, a step allocates nothing.
 * Not here: the layers (layer_*.c), cuts (net_cut.c), stages (net_part.c), shares (net_tensor.c).
 * Proved by tests/nn/test_net.c, tests/nn/test_layer_*.c and tests/train/test_pipeline.c. */
#include "nn/net.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/err.h"
#include "base/log.h"
#include "base/trace.h"
#include "base/util.h"
#include "nn/gemm.h"
#include "nn/layer.h"
#include "nn/net_internal.h"

/* ---- building ---- */

static size_t round16(size_t count) { return (count + 15) & ~(size_t)15; }

static shoal_result parse_layers(sh_net *n)
{
    sh_cfg *cfg = n->cfg;
    int nsec = sh_cfg_nsections(cfg);
    SH_TRY(sh_calloc((size_t)(nsec > 1 ? nsec - 1 : 1), sizeof *n->layers, (void **)&n->layers));
    n->layer_capacity = nsec > 1 ? nsec - 1 : 1;
    n->nlayers = 0;
    for (int i = 1; i < nsec; i++) {
        sh_cfg_section *s = sh_cfg_section_at(cfg, i);
        const char *name = sh_cfg_section_name(s);
        const sh_layer_ops *ops = sh_layer_find(name);
        if (!ops) {
            if (strcmp(name, "net") == 0 || strcmp(name, "network") == 0)
                return SH_FAIL(SHOAL_ERR_FORMAT, "%s:%d: a second [%s] section; [net] must come "
                               "once, first", sh_cfg_path(cfg), sh_cfg_section_line(s), name);
            if (sh_layer_is_darknet_only(name)) {
                char list[512];
                sh_layer_list(list, sizeof list);
                return SH_FAIL(SHOAL_ERR_FORMAT, "%s:%d: [%s] is a Darknet layer shoal does not "
                               "support; shoal's layers are %s", sh_cfg_path(cfg),
                               sh_cfg_section_line(s), name, list);
            }
            return SH_FAIL(SHOAL_ERR_FORMAT, "%s:%d: unknown section [%s]; did you mean [%s]?",
                           sh_cfg_path(cfg), sh_cfg_section_line(s), name,
                           sh_layer_closest(name));
        }
        int idx = n->nlayers;
        sh_layer *l = &n->layers[idx];
        l->ops = ops;
        l->caps = ops->caps;
        l->index = idx;
        l->line = sh_cfg_section_line(s);
        snprintf(l->name, sizeof l->name, "%s %d", ops->short_name, idx);
        l->nsrc = 1;
        l->src[0] = idx - 1;
        l->in_shape = idx == 0 ? n->input : n->layers[idx - 1].out_shape;
        l->inputs = sh_shape_count(&l->in_shape);
        l->act = SH_ACT_LINEAR;
        l->temperature = 1.0f;
        int role = n->tp_roles ? n->tp_roles[idx] : SH_TP_NONE;
        sh_parse_ctx ctx = {n->layers, idx, n->input, n->batch, n->steps, role == SH_TP_COLUMN ? n->tp_ranks : 1,
                            role == SH_TP_GATHER ? n->tp_rank : 0, role == SH_TP_GATHER ? n->tp_ranks : 1, role};
        SH_TRY(ops->parse(l, s, &ctx));
        if (role != SH_TP_NONE) {
            l->tp_role = role;
            l->tp_rank = n->tp_rank;
            l->tp_ranks = n->tp_ranks;
            l->tp_whole = role == SH_TP_COLUMN ? (size_t)l->out_shape.c * n->tp_ranks
                          : role == SH_TP_GATHER ? (size_t)l->out_shape.c : l->inputs * (size_t)n->tp_ranks;
        }
        /* stage=K places the layer in pipeline stage K (sh_net_stage_keys); -1: not given */
        SH_TRY(sh_cfg_int(s, "stage", -1, 0, 1 << 20, &l->stage));
        SH_TRY(sh_cfg_check_unused(s));
        l->outputs = sh_shape_count(&l->out_shape);
        for (int k = 0; k < l->nsrc; k++)
            l->src_outputs[k] = l->src[k] < 0 ? sh_shape_count(&n->input)
                                              : n->layers[l->src[k]].outputs;
        n->nlayers++;
    }
    if (n->nlayers == 0)
        return SH_FAIL(SHOAL_ERR_FORMAT, "%s: no layers after [net]; add layer sections",
                       sh_cfg_path(cfg));
    int last = n->nlayers - 1;
    if (sh_layer_can(&n->layers[last], SH_LAYER_LOSS)) last--;
    /* A net without a final softmax (jnet-conv, vgg-conv: feature extractors) runs forward
     * and `shoal time`; training and testing ask for one (sh_net_check_trainable). */
    n->has_softmax = last >= 0 && sh_layer_can(&n->layers[last], SH_LAYER_SOFTMAX);
    if (last < 0) last = 0;
    n->softmax = last;
    n->nclasses = (int)n->layers[last].outputs;
    /* a [cost] after another layer: a regression against targets (net_unlabelled.c) */
    n->cost_layer = n->layers[n->nlayers - 1].cost != SH_COST_XENT ? n->nlayers - 1 : -1;
    return SHOAL_OK;
}

/* A net may run only layers [lo, hi) (a pipeline stage): the others are parsed but hold
 * nothing. A part, like a tensor-parallel share, draws its weights in the whole net's order,
 * so they equal one process's (sh_net_build). */
static int in_part(const sh_net *n, int i) { return i >= n->lo && i < n->hi; }

/* Offsets into the three blocks and the decay ranges. Only the part's layers take room;
 * a layer outside it has offsets from 0, into the scratch its weights are drawn in. */
static shoal_result lay_out_blocks(sh_net *n)
{
    size_t p = 0, st = 0;
    int nr = 0;
    for (int i = 0; i < n->nlayers; i++) {
        sh_layer *l = &n->layers[i];
        size_t base = in_part(n, i) ? p : 0;
        l->param_off = base;
        l->w_off += base;
        l->b_off += base;
        l->s_off += base;
        l->reduce_off += base;
        l->stat_off = in_part(n, i) ? st : 0;
        if (!in_part(n, i)) {
            if (l->param_count > n->scratch_params) n->scratch_params = l->param_count;
            if (l->stat_count > n->scratch_stats) n->scratch_stats = l->stat_count;
            continue;
        }
        p += l->param_count;
        st += l->stat_count;
        l->state_off = n->nstate;
        n->nstate += l->state_count;
        if (l->w_count) nr++;
        if (l->b_count + l->s_count) nr++;
    }
    n->nparams = p;
    n->nstats = st;
    SH_TRY(sh_calloc((size_t)(nr ? nr : 1), sizeof *n->ranges, (void **)&n->ranges));
    for (int i = n->lo; i < n->hi; i++) {
        sh_layer *l = &n->layers[i];
        if (l->w_count) n->ranges[n->nranges++] = (sh_param_range){l->w_off, l->w_count, 1};
        if (l->b_count + l->s_count)
            n->ranges[n->nranges++] = (sh_param_range){l->b_off, l->b_count + l->s_count, 0};
    }
    SH_TRY(sh_alloc_aligned(round16(p ? p : 1) * sizeof(float), (void **)&n->params));
    SH_TRY(sh_alloc_aligned(round16(p ? p : 1) * sizeof(float), (void **)&n->grads));
    SH_TRY(sh_alloc_aligned(round16(st ? st : 1) * sizeof(float), (void **)&n->stats));
    SH_TRY(sh_alloc_aligned(round16(n->nstate ? n->nstate : 1) * sizeof(float),
                            (void **)&n->state));
    memset(n->state, 0, n->nstate * sizeof(float));
    for (int i = 0; i < n->nlayers; i++) n->layers[i].state = n->state + n->layers[i].state_off;
    return SHOAL_OK;
}

/* A batch whose activations (per_row_nbytes a row, fixed_nbytes besides) would not fit in
 * this machine's memory is refused before asking for it, naming the batch that fits. */
static shoal_result check_batch_fits(const sh_net *n, double per_row_nbytes, double fixed_nbytes)
{
    long pages = sysconf(_SC_PHYS_PAGES), page_nbytes = sysconf(_SC_PAGESIZE);
    if (pages <= 0 || page_nbytes <= 0 || per_row_nbytes <= 0) return SHOAL_OK;
    double ram = (double)pages * (double)page_nbytes, need = per_row_nbytes * n->batch + fixed_nbytes;
    if (need <= ram) return SHOAL_OK;
    int steps = n->steps > 0 ? n->steps : 1;
    double fits = (ram / 2 - fixed_nbytes) / (per_row_nbytes * steps);
    if (fits < 1) fits = 1;
    return SH_FAIL(SHOAL_ERR_NOMEM, "%s: the activations at batch %d need %.1f GB but this machine has %.1f GB "
                   "of memory; use --batch %.0f or less (or batch= in its [net] section)", sh_cfg_path(n->cfg),
                   n->batch / steps, need / 1e9, ram / 1e9, floor(fits));
}

/* 1 (default): deltas share memory by liveness (pool_deltas); 0: one delta per layer. */
int sh_net_pool_deltas = 1;

/* A delta is live in backward from its first writer (its highest consumer, last_reader) to
 * the end of its own layer's backward. It joins the pool only when nothing else reads or
 * writes it: not the output's (the loss writes it), not one the next stage fills or reads,
 * not one an alias shares, not a [connected]'s (its factors are read after backward). */
static int poolable(const sh_net *n, const int *last_reader, const int *aliased, int i)
{
    const sh_layer *l = &n->layers[i];
    return sh_net_pool_deltas && last_reader[i] > i && !l->alias_input && !aliased[i] && i != n->softmax &&
           i != n->hi - 1 && !sh_net_part_sends(n, i) && !sh_layer_can(l, SH_LAYER_FACTORS);
}

/* Interval colouring: layers in the order backward first writes their deltas, each to a
 * buffer whose last tenant's backward has ended (the smallest that fits, else the largest,
 * grown). slot[i]: buffer of layer i or -1; rows[b]: floats per image of buffer b. */
static int pool_deltas(const sh_net *n, const int *last_reader, const int *aliased, int *slot, size_t *rows)
{
    int nbuf = 0, *until = NULL; /* until[b]: lowest layer index whose backward still reads b */
    if (sh_calloc((size_t)n->nlayers + 1, sizeof *until, (void **)&until) != SHOAL_OK) return -1;
    for (int i = 0; i < n->nlayers; i++) slot[i] = -1;
    for (int c = n->hi - 1; c > n->lo; c--)
        for (int i = n->lo; i < c; i++) {
            if (last_reader[i] != c || !poolable(n, last_reader, aliased, i)) continue;
            size_t need = n->layers[i].outputs;
            int best = -1;
            for (int b = 0; b < nbuf; b++) {
                if (until[b] <= c) continue; /* still live at c */
                if (best < 0) best = b;
                else if (rows[best] < need ? rows[b] > rows[best] : rows[b] >= need && rows[b] < rows[best]) best = b;
            }
            if (best < 0) best = nbuf++, rows[best] = 0;
            if (rows[best] < need) rows[best] = need;
            until[best] = i;
            slot[i] = best;
        }
    free(until);
    return nbuf;
}

/* Outputs, deltas and kept values in one arena; [cost] borrows its input's buffers. A layer's
 * delta is overwritten by its only consumer, or zeroed and added into when several layers
 * (shortcut, route) consume it: before backward, or for a pooled delta before its first
 * writer's backward (zero_at). */
static shoal_result lay_out_arena(sh_net *n)
{
    size_t total = 0, nb = (size_t)n->batch;
    double per_row = (double)n->part_in_count, fixed = 0; /* floats, to say a batch too large */
    int *consumers = NULL, *last_reader = NULL, *aliased = NULL, *slot = NULL, nbuf = 0;
    size_t *rows = NULL;
    float **bufs = NULL;
    shoal_result rc = SHOAL_OK;
    int nl = n->nlayers;
    SH_TRY(sh_calloc((size_t)nl, sizeof(int), (void **)&n->zero_before_backward));
    SH_TRY(sh_calloc((size_t)nl, sizeof(int), (void **)&n->zero_at));
    consumers = n->zero_before_backward;
    SH_TRY_GOTO(sh_calloc((size_t)nl * 3, sizeof(int), (void **)&last_reader), rc, out);
    SH_TRY_GOTO(sh_calloc((size_t)nl + 1, sizeof *rows, (void **)&rows), rc, out);
    SH_TRY_GOTO(sh_calloc((size_t)nl + 1, sizeof *bufs, (void **)&bufs), rc, out);
    aliased = last_reader + nl;
    slot = aliased + nl;
    for (int i = 0; i < nl; i++) last_reader[i] = -1;
    for (int i = n->lo; i < n->hi; i++) {
        sh_layer *l = &n->layers[i];
        for (int k = 0; k < l->nsrc; k++) {
            int s = l->src[k];
            if (s == n->lo - 1) n->part_in_consumers++;
            else consumers[s]++; /* its own layer's, or a link's */
            if (s >= 0 && s != n->lo - 1 && !l->alias_input && i > last_reader[s]) last_reader[s] = i;
            if (s >= 0 && l->alias_input) aliased[s] = 1;
        }
    }
    nbuf = pool_deltas(n, last_reader, aliased, slot, rows);
    if (nbuf < 0) {
        rc = SH_FAIL(SHOAL_ERR_NOMEM, "out of memory laying out the network's buffers");
        goto out;
    }
    for (int i = n->lo; i < n->hi; i++) {
        sh_layer *l = &n->layers[i];
        if (l->alias_input) continue;
        int own = slot[i] < 0;
        total += (1 + own) * round16(nb * l->outputs) + round16(nb * l->keep_count + l->keep_fixed) +
                 round16(l->cache_count);
        per_row += (1.0 + own) * l->outputs + l->keep_count;
        fixed += (double)l->keep_fixed + l->cache_count + 48;
    }
    for (int b = 0; b < nbuf; b++) {
        total += round16(nb * rows[b]);
        per_row += (double)rows[b];
    }
    for (int i = 0; i < n->lo - 1; i++) /* links: outputs of earlier stages, and their gradients */
        if (sh_net_part_holds(n, i)) {
            total += 2 * round16(nb * n->layers[i].outputs);
            per_row += 2.0 * n->layers[i].outputs;
        }
    n->arena_count = total;
    SH_TRY_GOTO(check_batch_fits(n, per_row * sizeof(float), fixed * sizeof(float)), rc, out);
    SH_TRY_GOTO(sh_alloc_aligned((total ? total : 16) * sizeof(float), (void **)&n->arena), rc, out);
    SH_TRY_GOTO(sh_alloc_aligned(round16(nb * n->part_in_count) * sizeof(float), (void **)&n->input_delta), rc, out);
    float *p = n->arena;
    for (int b = 0; b < nbuf; b++) {
        bufs[b] = p;
        p += round16(nb * rows[b]);
    }
    for (int i = n->lo; i < n->hi; i++) {
        sh_layer *l = &n->layers[i];
        if (l->alias_input) {
            sh_layer *src = &n->layers[l->src[0]];
            l->out = src->out;
            l->delta = src->delta;
            continue;
        }
        l->out = p;
        p += round16(nb * l->outputs);
        if (slot[i] >= 0) {
            l->delta = bufs[slot[i]];
        } else {
            l->delta = p;
            p += round16(nb * l->outputs);
        }
        l->keep = p;
        p += round16(nb * l->keep_count + l->keep_fixed);
        l->cache = p;
        p += round16(l->cache_count);
    }
    for (int i = 0; i < n->lo - 1; i++) {
        if (!sh_net_part_holds(n, i)) continue;
        sh_layer *l = &n->layers[i];
        l->out = p;
        p += round16(nb * l->outputs);
        l->delta = p;
        p += round16(nb * l->outputs);
    }
    n->part_in_sent = n->lo > 0 && sh_net_part_sends(n, n->lo - 1);
    /* [cost] aliases its source: the source's delta is written by sh_net_loss, not by it. */
    for (int i = n->lo; i < n->hi; i++) {
        sh_layer *l = &n->layers[i];
        if (l->alias_input) consumers[l->src[0]]--;
    }
    for (int i = n->lo; i < n->hi; i++) {
        sh_layer *l = &n->layers[i];
        for (int k = 0; k < l->nsrc; k++) {
            int s = l->src[k];
            int inside = s != n->lo - 1; /* its own layer's or a link's output */
            l->in[k] = inside ? n->layers[s].out : NULL; /* the part's input: set per forward */
            l->in_delta[k] = inside ? n->layers[s].delta : NULL;
            l->accum[k] = inside && (consumers[s] > 1 || sh_net_part_sends(n, s));
        }
    }
    /* 1: zero before backward (several writers add, or none writes). A part that is not
     * the last gets its last layer's delta, and those of the other outputs it sends, from
     * the next stage: never zeroed. A pooled delta is zeroed before its first writer. */
    for (int i = 0; i < nl; i++) {
        int zero = (in_part(n, i) || sh_net_part_holds(n, i)) && consumers[i] != 1 && i != n->softmax &&
                   !n->layers[i].alias_input && !sh_net_part_sends(n, i);
        n->zero_at[i] = zero && slot[i] >= 0 ? last_reader[i] : -1;
        consumers[i] = zero && slot[i] < 0;
    }
out:
    free(last_reader);
    free(rows);
    free(bufs);
    return rc;
}

/* Each parallel section shares the images of the batch (or the channels, for batch norm) in
 * chunks with fixed boundaries (exec.c). Layers that sum weight gradients over images write
 * each chunk's sum into its own slot (a partial block) and the slots are summed in slot order
 * after the layer's backward (reduce_run): bitwise deterministic for a given thread count. */
static shoal_result alloc_threads(sh_net *n, int nthreads)
{
    sh_pool *pool = NULL;
    float *work = NULL, *partial = NULL, **gp = NULL, **wp = NULL;
    shoal_result rc = SHOAL_OK;
    /* Two slots per thread: a thread slowed by another process on its core leaves its second
     * chunk to the others. Slots exist only for layers that sum partial gradients. */
    int nslots = nthreads == 1 ? 1 : 2 * nthreads;
    size_t slot_count = 0; /* a slot holds one layer's sums at a time: the largest */
    for (int i = n->lo; i < n->hi; i++)
        if (n->layers[i].reduce_count > slot_count) slot_count = n->layers[i].reduce_count;
    if (!slot_count) nslots = 1;
    SH_TRY_GOTO(sh_pool_create(nthreads, &pool), rc, fail);
    SH_TRY_GOTO(sh_alloc_aligned(round16(n->ws_count) * (size_t)nthreads * sizeof(float) + 64,
                                 (void **)&work), rc, fail);
    if (nslots > 1)
        SH_TRY_GOTO(sh_alloc_aligned(round16(slot_count) * (size_t)(nslots - 1) *
                                     sizeof(float), (void **)&partial), rc, fail);
    SH_TRY_GOTO(sh_calloc((size_t)nslots, sizeof *gp, (void **)&gp), rc, fail);
    SH_TRY_GOTO(sh_calloc((size_t)nthreads, sizeof *wp, (void **)&wp), rc, fail);
    for (int t = 0; t < nslots; t++)
        gp[t] = t == 0 ? n->grads : partial + round16(slot_count) * (size_t)(t - 1);
    for (int t = 0; t < nthreads; t++) wp[t] = work + round16(n->ws_count) * (size_t)t;
    sh_pool_destroy(n->pool);
    sh_free_aligned(n->work_block);
    sh_free_aligned(n->partial_block);
    free(n->grad_ptrs);
    free(n->work_ptrs);
    n->pool = pool;
    n->work_block = work;
    n->partial_block = partial;
    n->grad_ptrs = gp;
    n->work_ptrs = wp;
    n->nthreads = nthreads;
    n->nslots = nslots;
    n->partial_count = slot_count;
    return SHOAL_OK;
fail:
    sh_pool_destroy(pool);
    sh_free_aligned(work);
    sh_free_aligned(partial);
    free(gp);
    free(wp);
    return rc;
}

shoal_result sh_net_create(sh_cfg *cfg, int batch, uint64_t seed, sh_net **out)
{
    return sh_net_build(cfg, batch, 0, seed, 0, -1, 0, 1, NULL, out);
}

shoal_result sh_net_create_steps(sh_cfg *cfg, int batch, int time_steps, uint64_t seed,
                                 sh_net **out)
{
    return sh_net_build(cfg, batch, time_steps, seed, 0, -1, 0, 1, NULL, out);
}

shoal_result sh_net_build(sh_cfg *cfg, int batch, int time_steps, uint64_t seed, int lo, int hi,
                          int tp_rank, int tp_ranks, const unsigned char *tp_roles, sh_net **out)
{
    shoal_result rc = SHOAL_OK;
    sh_net *n = NULL;
    float *scratch_p = NULL, *scratch_s = NULL;
    *out = NULL;
    SH_TRY(sh_calloc(1, sizeof *n, (void **)&n));
    n->cfg = cfg;
    n->pretrain = -1;
    n->tp_rank = tp_rank;
    n->tp_ranks = tp_ranks;
    n->tp_roles = tp_roles;
    if (sh_cfg_nsections(cfg) < 1 ||
        (strcmp(sh_cfg_section_name(sh_cfg_section_at(cfg, 0)), "net") != 0 &&
         strcmp(sh_cfg_section_name(sh_cfg_section_at(cfg, 0)), "network") != 0)) {
        rc = SH_FAIL(SHOAL_ERR_FORMAT, "%s:%d: the first section must be [net]",
                     sh_cfg_path(cfg),
                     sh_cfg_nsections(cfg) ? sh_cfg_section_line(sh_cfg_section_at(cfg, 0)) : 1);
        goto fail;
    }
    SH_TRY_GOTO(sh_net_config_parse(sh_cfg_section_at(cfg, 0), &n->config), rc, fail);
    n->steps = time_steps > 0 ? time_steps : n->config.time_steps;
    n->batch = batch > 0 ? batch : n->config.batch;
    if (n->batch < 1) n->batch = 1;
    n->batch *= n->steps; /* Darknet: a batch is time_steps x batch rows */
    n->input = (sh_shape){n->config.channels, n->config.height, n->config.width};
    if (sh_shape_count(&n->input) == 0) {
        rc = SH_FAIL(SHOAL_ERR_FORMAT, "%s:%d: [net] input is %dx%dx%d (channels x height x "
                     "width); set all three", sh_cfg_path(cfg),
                     sh_cfg_section_line(sh_cfg_section_at(cfg, 0)), n->input.c, n->input.h,
                     n->input.w);
        goto fail;
    }
    SH_TRY_GOTO(parse_layers(n), rc, fail);
    n->tp_roles = NULL; /* the caller's; kept in the layers */
    SH_TRY_GOTO(sh_net_check_part(n, lo, hi), rc, fail);
    SH_TRY_GOTO(lay_out_blocks(n), rc, fail);
    SH_TRY_GOTO(lay_out_arena(n), rc, fail);
    for (int i = 0; i < n->nlayers; i++)
        if (n->layers[i].ws_count > n->ws_count) n->ws_count = n->layers[i].ws_count;
    /* One thread (no pool threads start) until the caller says how many this rank gets
     * (sh_net_set_threads with sh_cpus_threads_per_rank): the pool is built once. */
    SH_TRY_GOTO(alloc_threads(n, 1), rc, fail);
    /* Every layer draws its weights in order, so a part holds what the whole net would. */
    SH_TRY_GOTO(sh_alloc_aligned(round16(n->scratch_params + 1) * sizeof(float), (void **)&scratch_p), rc, fail);
    SH_TRY_GOTO(sh_alloc_aligned(round16(n->scratch_stats + 1) * sizeof(float), (void **)&scratch_s), rc, fail);
    sh_rng init;
    sh_rng_seed(&init, seed);
    for (int i = 0; i < n->nlayers; i++) {
        sh_layer *l = &n->layers[i];
        if (!l->ops->init) continue;
        if (in_part(n, i)) l->ops->init(l, n->params, n->stats, &init);
        else l->ops->init(l, scratch_p, scratch_s, &init);
    }
    sh_free_aligned(scratch_p);
    sh_free_aligned(scratch_s);
    sh_rng_seed(&n->rng, seed ^ 0x9e3779b97f4a7c15ull); /* dropout: its own stream */
    sh_gemm_set_blas_threads(1);
    *out = n;
    return SHOAL_OK;
fail:
    sh_free_aligned(scratch_p);
    sh_free_aligned(scratch_s);
    sh_net_destroy(n);
    return rc;
}

typedef struct {
    const char *path;
    char text[2048];
    size_t len;
} defaulted_list;

static void add_defaulted(void *ctx, const char *section, int line, const char *key)
{
    defaulted_list *d = ctx;
    if (d->len + 64 >= sizeof d->text) return;
    d->len += (size_t)snprintf(d->text + d->len, sizeof d->text - d->len, "%s[%s]:%d %s", d->len ? ", " : "",
                               section, line, key);
}

shoal_result sh_net_create_owning(sh_cfg *cfg, int batch, uint64_t seed, sh_net **out)
{
    *out = NULL;
    shoal_result rc = sh_net_create(cfg, batch, seed, out);
    if (rc != SHOAL_OK) {
        sh_err_trace(__FILE__, __LINE__);
        sh_cfg_destroy(cfg);
        return rc;
    }
    (*out)->own_cfg = 1;
    if (sh_log_enabled(SH_LOG_INFO, "cfg")) { /* which keys took Darknet's defaults, once */
        defaulted_list dl = {sh_cfg_path(cfg), {0}, 0};
        sh_cfg_each_defaulted(cfg, add_defaulted, &dl);
        if (dl.len) SH_LOG_I("cfg", "%s: keys left at their defaults: %s", sh_cfg_path(cfg), dl.text);
    }
    return SHOAL_OK;
}

shoal_result sh_net_load(const char *cfg_path, int batch, uint64_t seed, sh_net **out)
{
    sh_cfg *cfg = NULL;
    *out = NULL;
    SH_TRY(sh_cfg_load(cfg_path, &cfg));
    SH_TRY(sh_net_create_owning(cfg, batch, seed, out));
    return SHOAL_OK;
}

void sh_net_destroy(sh_net *n)
{
    if (!n) return;
    sh_pool_destroy(n->pool);
    sh_free_aligned(n->work_block);
    sh_free_aligned(n->partial_block);
    free(n->grad_ptrs);
    free(n->work_ptrs);
    sh_free_aligned(n->arena);
    sh_free_aligned(n->input_delta);
    sh_free_aligned(n->state);
    sh_free_aligned(n->packed);
    free(n->zero_before_backward);
    free(n->zero_at);
    if (!n->foreign_blocks) {
        sh_free_aligned(n->params);
        sh_free_aligned(n->grads);
    }
    if (!n->foreign_stats) sh_free_aligned(n->stats);
    free(n->ranges);
    for (int i = 0; n->layers && i < n->layer_capacity; i++)
        if (n->layers[i].ops && n->layers[i].ops->fini) n->layers[i].ops->fini(&n->layers[i]);
    free(n->layers);
    if (n->own_cfg) sh_cfg_destroy(n->cfg);
    free(n);
}

void sh_net_set_threads(sh_net *n, int nthreads)
{
    if (nthreads < 1) nthreads = 1;
    if (nthreads > 256) nthreads = 256;
    if (nthreads == n->nthreads) return;
    if (alloc_threads(n, nthreads) != SHOAL_OK)
        SH_LOG_W("nn", "could not use %d threads (%s); staying at %d", nthreads,
                 shoal_last_error(), n->nthreads);
}

void sh_net_share_blocks(sh_net *dst, sh_net *src, size_t param_off, size_t stats_off)
{
    sh_net_use_blocks(dst, src->params + param_off, src->grads + param_off, 0);
    if (dst->nstats) sh_net_use_stats(dst, src->stats + stats_off);
    sh_net_set_threads(dst, src->nthreads);
}

/* ---- passes ---- */

void sh_net_fill_exec(sh_net *n)
{
    sh_exec *x = &n->exec;
    x->nimg = n->nimg;
    x->batch = n->batch;
    x->training = n->training;
    x->nthreads = n->nthreads;
    x->pool = n->pool;
    x->params = n->params;
    x->stats = n->stats;
    x->grad = n->grad_ptrs;
    x->nslots = n->nslots;
    x->work = n->work_ptrs;
    x->rng = &n->rng;
    x->sum = n->sum;
    x->sum_ctx = n->sum_ctx;
    x->sum_rc = SHOAL_OK;
    x->update = n->update;
    x->update_ctx = n->update_ctx;
}

shoal_result sh_net_forward(sh_net *n, const float *x, int nimg, int training)
{
    if (nimg < 1 || nimg > n->batch)
        return SH_FAIL(SHOAL_ERR_INVALID, "forward: %d images, but the network was built for "
                       "batches of 1..%d; rebuild it with a larger batch", nimg, n->batch);
    if (nimg % n->steps)
        return SH_FAIL(SHOAL_ERR_INVALID, "forward: %d rows do not make whole sequences of "
                       "time_steps=%d; pass a multiple of time_steps rows", nimg, n->steps);
    n->x = x;
    n->nimg = nimg;
    n->training = training;
    n->have_loss = 0;
    sh_net_fill_exec(n);
    for (int i = n->lo; i < n->hi; i++) {
        sh_layer *l = &n->layers[i];
        for (int k = 0; k < l->nsrc; k++) {
            if (l->src[k] != n->lo - 1) continue;
            l->in[k] = x;
            l->in_delta[k] = n->want_input_delta ? n->input_delta : NULL;
            l->accum[k] = n->part_in_consumers > 1 || n->part_in_sent;
        }
        if (n->before_forward && l->param_count) SH_TRY(n->before_forward(n->before_forward_ctx, i));
        /* pretraining an [rbm]: the layers below it are a fixed feature extractor */
        if (n->pretrain >= 0) n->exec.training = i == n->pretrain && training;
        uint64_t t0 = sh_now_ns();
        l->ops->forward(l, &n->exec);
        uint64_t t1 = sh_now_ns();
        l->fwd_ms = (double)(t1 - t0) * 1e-6;
        if (sh_trace_on()) sh_trace_span(SH_TRACK_FORWARD, l->name, t0, t1, "layer", i, NULL, 0);
    }
    return n->exec.sum_rc;
}

void sh_net_set_grad_rows(sh_net *n, int rows) { n->grad_rows = rows > 0 ? rows : 0; }

void sh_net_set_before_forward(sh_net *n, sh_before_forward_fn fn, void *ctx)
{
    n->before_forward = fn;
    n->before_forward_ctx = ctx;
}

const float *sh_net_output(const sh_net *n) { return n->layers[n->softmax].out; }

void sh_net_loss_sum(sh_net *n)
{
    sh_layer *out = &n->layers[n->softmax];
    size_t count = (size_t)n->nimg * out->outputs;
    float inv = 1.0f / (float)n->nimg;
    for (size_t i = 0; i < count; i++) out->delta[i] = inv;
    n->have_loss = 1;
}

float sh_net_loss(sh_net *n, const int32_t *labels)
{
    sh_layer *sm = &n->layers[n->softmax];
    if (n->pretrain >= 0 || n->cost_layer >= 0) return sh_net_loss_unlabelled(n); /* no labels */
    if (!n->has_softmax) {
        SH_LOG_E("nn", "loss: the network does not end with [softmax]; no cross-entropy");
        return NAN;
    }
    int k = n->nclasses;
    double loss = 0.0;
    float inv = 1.0f / (float)n->nimg;
    for (int i = 0; i < n->nimg; i++) {
        const float *p = sm->out + (size_t)i * k;
        float *d = sm->delta + (size_t)i * k;
        int y = labels[i];
        if (y < 0 || y >= k) {
            SH_LOG_E("nn", "loss: label %d of image %d is outside 0..%d", y, i, k - 1);
            return NAN;
        }
        for (int j = 0; j < k; j++) d[j] = p[j] * inv;
        d[y] -= inv;
        /* a NaN probability (weights gone to NaN or inf) makes the loss NaN: the run stops at
         * this step instead of reading the clamp's finite 69.08 */
        loss -= p[y] > 1e-30f ? log((double)p[y]) : isnan(p[y]) ? (double)NAN : log(1e-30);
    }
    n->have_loss = 1;
    return (float)(loss / n->nimg);
}

int sh_net_correct(const sh_net *n, const int32_t *labels) { return sh_net_correct_rows(n, labels, 0, n->nimg); }

int sh_net_correct_rows(const sh_net *n, const int32_t *labels, int lo, int hi)
{
    const float *out = sh_net_output(n);
    int k = n->nclasses, correct = 0;
    if (!sh_net_has_labels(n)) return 0;
    for (int i = lo; i < hi; i++) {
        const float *p = out + (size_t)i * k;
        int best = 0;
        for (int j = 1; j < k; j++)
            if (p[j] > p[best]) best = j;
        correct += best == labels[i];
    }
    return correct;
}

typedef struct {
    sh_net *n;
    size_t off, count;
} reduce_job;

/* grads[off..off+count) = sum over slots s of the slot's sums, s in order 0, 1, ...; slot s >= 1
 * holds the layer's count floats from its start (sh_exec_grad). */
static void reduce_run(void *arg, int tid, int nthreads)
{
    reduce_job *j = arg;
    int lo, hi;
    int nchunks = (int)((j->count + 15) / 16);
    sh_pool_share(nchunks, tid, nthreads, &lo, &hi);
    size_t a = j->off + (size_t)lo * 16, b = j->off + (size_t)hi * 16;
    if (b > j->off + j->count) b = j->off + j->count;
    float *g0 = j->n->grad_ptrs[0];
    for (int t = 1; t < j->n->exec.nslots_used; t++) {
        const float *gt = j->n->grad_ptrs[t];
        for (size_t i = a; i < b; i++) g0[i] += gt[i - j->off];
    }
}

shoal_result sh_net_backward(sh_net *n, sh_grad_ready_fn ready, void *ctx)
{
    if (!n->have_loss && n->hi == n->nlayers)
        return SH_FAIL(SHOAL_ERR_INVALID, "backward: no loss since the last forward; call "
                       "sh_net_forward(training=1) then sh_net_loss first");
    if (!n->training)
        return SH_FAIL(SHOAL_ERR_INVALID, "backward: the last forward was inference "
                       "(training=0); forward with training=1 before backward");
    if (n->pretrain >= 0) return sh_net_backward_pretrain(n, ready, ctx);
    sh_net_fill_exec(n);
    for (int i = 0; i < n->hi; i++) /* the part's layers and its links */
        if (n->zero_before_backward[i])
            memset(n->layers[i].delta, 0, (size_t)n->nimg * n->layers[i].outputs * sizeof(float));
    if (n->want_input_delta && n->part_in_consumers != 1 && !n->part_in_sent)
        memset(n->input_delta, 0, (size_t)n->nimg * n->part_in_count * sizeof(float));
    n->exec.ready = ready;
    n->exec.ready_ctx = ctx;
    n->exec.grad_rows = ready ? n->grad_rows : 0;
    for (int i = n->hi - 1; i >= n->lo; i--) {
        sh_layer *l = &n->layers[i];
        uint64_t t0 = sh_now_ns();
        for (int s = n->lo; s < i; s++) /* pooled deltas several layers add into */
            if (n->zero_at[s] == i) memset(n->layers[s].delta, 0, (size_t)n->nimg * n->layers[s].outputs * sizeof(float));
        n->exec.used_partials = 0;
        n->exec.ready_layer = i;
        n->exec.ready_count = 0;
        l->ops->backward(l, &n->exec);
        if (n->exec.used_partials && l->reduce_count && n->exec.nslots_used > 1) {
            reduce_job j = {n, l->reduce_off, l->reduce_count};
            sh_pool_run(n->pool, reduce_run, &j);
        }
        uint64_t t1 = sh_now_ns();
        l->bwd_ms = (double)(t1 - t0) * 1e-6;
        if (sh_trace_on()) sh_trace_span(SH_TRACK_BACKWARD, l->name, t0, t1, "layer", i, NULL, 0);
        size_t done = n->exec.ready_count; /* offered in blocks during the layer's backward */
        if (l->param_count > done && ready) ready(ctx, i, l->param_off + done, l->param_count - done);
    }
    n->exec.ready = NULL;
    n->exec.grad_rows = 0;
    return n->exec.sum_rc;
}
