/* plan/cost.c — the planner's model of one step, layout by layout: each layout's compute from
 * the measured layer times, its traffic priced as the collectives shoal would run it (the walk
 * of each layout: docs/plan.md).
 * Not here: measuring (plan/measure.c), which layouts exist (plan/choose.c), the cuts and pairs
 * (mp/pipeline_plan.c, mp/tensor_plan.c: called as the strategies call them).
 * Proved by tests/train/test_plan.c (hand-computed cases). */
#include "train/plan/plan.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "shoal/comm.h"
#include "train/mp/hybrid.h"
#include "train/mp/pipeline.h"
#include "train/mp/tensor_plan.h"

/* Vocabulary: N = H x R ranks (H hosts of R), b a replica's images per step, a link costs
 * alpha + bytes x beta (shared memory within a host, one network link per host across it), a
 * layer's forward and backward a + b m seconds at m images (measured, plan/measure.c). */

#define RD_MAX_NBYTES (16.0 * 1024)        /* select.c: recursive doubling up to here */
#define PAIR_RD_MIN_NBYTES (64.0 * 1024)   /* select.c: two ranks across hosts, this range */
#define PAIR_RD_MAX_NBYTES (1024.0 * 1024)
#define BUCKET_NBYTES (1024.0 * 1024)      /* dp/allreduce.c: --bucket-mb's default */
#define TOPK_FRACTION 0.01                 /* the topk the planner weighs */

static double log2_ceil(int n)
{
    int k = 0;
    while ((1 << k) < n) k++;
    return k;
}

double sh_plan_allreduce_s(const sh_plan_cluster *c, double nbytes, int h, int r)
{
    int n = h * r;
    if (n <= 1 || nbytes <= 0) return 0;
    if (nbytes <= RD_MAX_NBYTES) /* rounds inside a host first, then across */
        return log2_ceil(r) * (c->shm_alpha_s + nbytes * c->shm_s_per_byte) +
               log2_ceil(h) * (c->net_alpha_s + nbytes * c->net_s_per_byte);
    if (h == 1) return 2 * c->shm_alpha_s + 2.0 * (n - 1) / n * nbytes * c->shm_s_per_byte;
    double across;
    if (h == 2 && nbytes / r > PAIR_RD_MIN_NBYTES && nbytes / r <= PAIR_RD_MAX_NBYTES)
        across = c->net_alpha_s + nbytes * c->net_s_per_byte; /* each host's share, one exchange */
    else
        across = 2.0 * (h - 1) * c->net_alpha_s + 2.0 * (h - 1) / h * nbytes * c->net_s_per_byte;
    if (r == 1) return across;
    double within = 2 * ((r - 1) * c->shm_alpha_s + (double)(r - 1) / r * nbytes * c->shm_s_per_byte);
    return within + across;
}

double sh_plan_exchange_s(const sh_plan_cluster *c, double per_rank, int h, int r, int steps)
{
    int n = h * r;
    if (n <= 1 || per_rank <= 0) return 0;
    double to_others = (double)(n - r) / (n - 1), to_mates = (double)(r - 1) / (n - 1);
    double net = r * per_rank * to_others * c->net_s_per_byte; /* the host's r ranks share its link */
    double shm = per_rank * to_mates * c->shm_s_per_byte;
    double alpha = h > 1 ? c->net_alpha_s : c->shm_alpha_s;
    return (net > shm ? net : shm) + steps * alpha;
}

double sh_plan_p2p_s(const sh_plan_cluster *c, double nbytes, int same_host)
{
    return same_host ? c->shm_alpha_s + nbytes * c->shm_s_per_byte : c->net_alpha_s + nbytes * c->net_s_per_byte;
}

double sh_plan_cpu_share(const sh_plan_cluster *c, int threads)
{
    double want = (double)c->ranks_per_host * (threads > 0 ? threads : 1);
    double cores = c->machine_hosts > 1 ? (double)c->cores / c->machine_hosts : c->cores;
    return cores > 0 && want > cores ? want / cores : 1.0;
}

double sh_plan_net_cpu_s(const sh_plan_cluster *c, int threads, double bytes)
{
    double want = (double)c->ranks_per_host * (threads > 0 ? threads : 1);
    double cores = c->machine_hosts > 1 ? (double)c->cores / c->machine_hosts : c->cores;
    if (c->hosts < 2 || bytes <= 0 || (cores > 0 && want < cores)) return 0;
    return bytes * c->net_cpu_s_per_byte * sh_plan_cpu_share(c, threads);
}

double sh_plan_part_s(const sh_plan_model *m, int l, int part, double images)
{
    const sh_plan_layer *y = &m->layer[l];
    const double *t = part == 0 ? y->fwd_t : part == 1 ? y->bwd_t : y->wgt_t;
    double s = -1;
    for (int k = 0; k + 1 < m->nsizes && s < 0; k++) { /* between two sizes timed: their line */
        double hi = m->sizes[k], lo = m->sizes[k + 1];
        if (images <= hi && images >= lo) s = t[k + 1] + (t[k] - t[k + 1]) * (images - lo) / (hi - lo);
    }
    if (s < 0)
        s = part == 0 ? y->fwd_a + y->fwd_b * images : part == 1 ? y->bwd_a + y->bwd_b * images
                                                                : y->wgt_a + y->wgt_b * images;
    return s > 0 ? s : 0;
}

double sh_plan_layer_s(const sh_plan_model *m, const sh_plan_cluster *c, int l, double images)
{
    return (sh_plan_part_s(m, l, 0, images) + sh_plan_part_s(m, l, 1, images)) * sh_plan_cpu_share(c, m->threads);
}

static double layer_fwd_s(const sh_plan_model *m, const sh_plan_cluster *c, int l, double images)
{
    return sh_plan_part_s(m, l, 0, images) * sh_plan_cpu_share(c, m->threads);
}

/* Hosts and ranks a host of a group of n ranks g0 + k stride (k < n), R ranks a host. */
static void group_spread(int g0, int stride, int n, int R, int *h, int *r)
{
    int hosts = 0, most = 0, last = -1, here = 0;
    for (int k = 0; k < n; k++) {
        int host = (g0 + k * stride) / R;
        if (host != last) {
            hosts++;
            here = 0;
            last = host;
        }
        if (++here > most) most = here;
    }
    *h = hosts;
    *r = most;
}

/* ---- data parallelism ---- */

/* Wire bytes a rank sends for count values under codec (the library's own count), and the
 * encode + decode seconds. */
static double codec_wire(int codec, size_t count, int n)
{
    shoal_codec_opts o;
    shoal_codec_opts_default(&o);
    o.codec = codec == SH_PLAN_FP16 ? SHOAL_CODEC_FP16 : codec == SH_PLAN_1BIT ? SHOAL_CODEC_1BIT : SHOAL_CODEC_TOPK;
    o.topk_fraction = TOPK_FRACTION;
    shoal_compressor *z = NULL;
    if (shoal_compressor_create(&o, count, &z) != SHOAL_OK) return 4.0 * count;
    double w = shoal_compressor_wire_nbytes(z, n);
    shoal_compressor_destroy(z);
    return w;
}

/* One exchange unit of data parallelism (a bucket when plain; a layer under a codec or
 * --sfb): the seconds on the wire, and the seconds of cores it takes from backward (encoding
 * and every rank's decoding, or rebuilding dW from every rank's factors: the exchange thread
 * competes with the kernel threads for the cores). */
static void dp_unit(const sh_plan_model *m, const sh_plan_cluster *c, const sh_plan_layout *L, int l, double nbytes,
                    int H, int R, double *wire, double *cpu)
{
    int n = H * R;
    const sh_plan_layer *y = l >= 0 ? &m->layer[l] : NULL;
    double b = m->batch;
    *cpu = 0;
    double across = (double)(n - R) / (n - 1); /* of what a rank sends, the share to other hosts */
    if (y && L->sfb && y->connected && b * (double)(y->inputs + y->outputs) < (double)y->inputs * y->outputs) {
        double payload = b * (double)(y->inputs + y->outputs) * 4; /* allgathered factors */
        *cpu = (n - 1) * 0.5 * sh_plan_part_s(m, l, 1, b) * sh_plan_cpu_share(c, m->threads) +
               sh_plan_net_cpu_s(c, m->threads, (n - 1) * payload * across);
        *wire = sh_plan_exchange_s(c, (n - 1) * payload, H, R, n - 1);
        return;
    }
    if (L->codec < 0 || !y) { /* a rank's share of its host's 2 (H-1)/H bytes across */
        *wire = sh_plan_allreduce_s(c, nbytes, H, R);
        *cpu = sh_plan_net_cpu_s(c, m->threads, 2.0 * (H - 1) / H * nbytes / R);
        return;
    }
    size_t count = y->nparams;
    double bytes = codec_wire(L->codec, count, n);
    int k = L->codec;
    /* fp16: the whole vector encoded, n blocks of 1/n decoded and summed, the sum's block encoded,
     * the whole decoded; the others: encode once, every rank's payload decoded and summed */
    double per = k == SH_PLAN_FP16 ? (1.0 + 1.0 / n) * m->enc_s[k] + 2 * m->dec_s[k] : m->enc_s[k] + n * m->dec_s[k];
    *cpu = per * (double)count * sh_plan_cpu_share(c, m->threads) + sh_plan_net_cpu_s(c, m->threads, bytes * across);
    /* the ranks first agree on a descriptor: one more allgather's latency */
    *wire = sh_plan_exchange_s(c, bytes, H, R, (k == SH_PLAN_FP16 ? 2 * (n - 1) : n - 1) + (n - 1));
}

static void predict_dp(const sh_plan_model *m, const sh_plan_cluster *c, sh_plan_layout *L)
{
    int H = c->hosts, R = c->ranks_per_host, n = H * R;
    double F = 0, t = 0, comm_free = 0, bucket = 0;
    for (int l = 0; l < m->nlayers; l++) F += layer_fwd_s(m, c, l, m->batch);
    int per_layer = L->codec >= 0 || L->sfb;
    for (int l = m->nlayers - 1; l >= 0; l--) { /* backward: last layer first */
        t += sh_plan_layer_s(m, c, l, m->batch) - layer_fwd_s(m, c, l, m->batch);
        double nbytes = 4.0 * (double)m->layer[l].nparams;
        if (!nbytes && !(l == 0 && bucket > 0)) continue;
        bucket += nbytes;
        if (!per_layer && bucket < BUCKET_NBYTES && l > 0) continue;
        double wire = 0, cpu = 0;
        dp_unit(m, c, L, per_layer ? l : -1, bucket, H, R, &wire, &cpu);
        t += cpu;
        double start = t > comm_free ? t : comm_free;
        comm_free = start + wire;
        bucket = 0;
    }
    /* the plain exchange splits the update (each rank its block); codecs and factors give
     * every rank the whole gradient, and every rank applies the whole update */
    double Bk = t, opt = per_layer ? m->optim_s : m->optim_s / n;
    /* across hosts the next forward hides the plain exchange's tail (SHOAL_DP_OVERLAP); codecs
     * and factors finish theirs inside the step */
    double tail = H > 1 && !per_layer ? comm_free - Bk - F : comm_free - Bk;
    L->compute_s = F + Bk + opt;
    L->comm_s = tail > 0 ? tail : 0;
    L->bubble_s = 0;
    L->step_s = L->compute_s + L->comm_s;
    L->images_per_step = (double)n * m->batch;
}

/* ---- pipeline (and tensor) parallelism ---- */

/* Layer l's share on a tensor rank of T: split layers compute 1/T, and so do the layers
 * between a pair's two (a pool of the column layer's share). */
static double split_share(const sh_tp_plan *pl, int l, int T)
{
    if (!pl) return 1.0;
    if (pl->roles[l]) return 1.0 / T;
    for (int k = 0; k < pl->ncands; k++)
        if (pl->cands[k].why == SH_TP_CAND_SPLIT && pl->cands[k].col < l && l < pl->cands[k].row) return 1.0 / T;
    return 1.0;
}

/* Layer l's deferred weight gradient at m images (0 but in a pipeline's unsplit layers that
 * defer it: sh_net_layer_defers). */
static double layer_wgt_s(const sh_plan_model *m, const sh_plan_cluster *c, int l, double images)
{
    return sh_plan_part_s(m, l, 2, images) * sh_plan_cpu_share(c, m->threads);
}

/* A stage's seconds for one micro-batch of m images on a tensor rank: its layers (less the
 * weight gradients the pipeline defers: defer set), and the split pairs' two allreduces among
 * the T ranks. */
static double stage_s(const sh_plan_model *m, const sh_plan_cluster *c, const sh_tp_plan *pl, int lo, int hi,
                      double images, int T, int th, int tr, int defer)
{
    double s = 0;
    for (int l = lo; l < hi; l++) {
        int split = pl && pl->roles[l];
        s += sh_plan_layer_s(m, c, l, images) * split_share(pl, l, T);
        if (defer && !split) s -= layer_wgt_s(m, c, l, images);
    }
    for (int k = 0; pl && k < pl->ncands; k++) {
        const sh_tp_cand *cd = &pl->cands[k];
        if (cd->why != SH_TP_CAND_SPLIT || cd->col < lo || cd->row >= hi) continue;
        s += sh_plan_allreduce_s(c, 4.0 * images * (double)m->layer[cd->row].outputs, th, tr);
        if (cd->col > 0) s += sh_plan_allreduce_s(c, 4.0 * images * (double)m->layer[cd->col].inputs, th, tr);
    }
    return s > 0 ? s : 0;
}

/* A stage's deferred weight gradients, one product a layer over the whole batch b. */
static double stage_wgt_s(const sh_plan_model *m, const sh_plan_cluster *c, const sh_tp_plan *pl, int lo, int hi)
{
    double s = 0;
    for (int l = lo; l < hi; l++)
        if (!(pl && pl->roles[l])) s += layer_wgt_s(m, c, l, m->batch);
    return s;
}

static void predict_pipe(const sh_plan_model *m, const sh_plan_cluster *c, sh_plan_layout *L)
{
    int H = c->hosts, R = c->ranks_per_host, n = H * R, S = L->S, M = L->M, T = L->T;
    int D = n / (S * T);
    int cuts[65];
    if (S > 64 || sh_pipe_plan(m->net, S, cuts) != SHOAL_OK) {
        snprintf(L->why, sizeof L->why, "the net does not cut into %d stages", S);
        return;
    }
    sh_tp_plan pl;
    int use_tp = T > 1;
    if (use_tp) {
        int npairs = 0, total = 0;
        if (sh_tp_plan_init(&pl, m->net, T) != SHOAL_OK) {
            sh_tp_plan_fini(&pl);
            snprintf(L->why, sizeof L->why, "out of memory");
            return;
        }
        for (int s = 0; s < S; s++) {
            if (sh_tp_plan_choose(&pl, m->net, cuts[s], cuts[s + 1], &npairs) != SHOAL_OK) npairs = 0;
            total += npairs;
        }
        if (!total) {
            sh_tp_plan_fini(&pl);
            snprintf(L->why, sizeof L->why, "no layer pair is worth splitting %d ways", T);
            return;
        }
    }
    int th, tr, dh, dr, defer = S > 1; /* a pipeline defers dW; tensor parallelism alone does not */
    group_spread(0, 1, T, R, &th, &tr);
    double micro = (double)m->batch / M, slot = 0, fill = 0, busy = 0, w0 = 0, sync = 0;
    for (int s = 0; s < S; s++) {
        double u = stage_s(m, c, use_tp ? &pl : NULL, cuts[s], cuts[s + 1], micro, T, th, tr, defer);
        double w = defer ? stage_wgt_s(m, c, use_tp ? &pl : NULL, cuts[s], cuts[s + 1]) : 0;
        if (s + 1 < S) { /* activations forward, their gradient back, to the next stage */
            int g = s * T, next = (s + 1) * T;
            double bytes = 4.0 * micro * (double)m->layer[cuts[s + 1] - 1].outputs;
            int same = g / R == next / R;
            u += 2 * sh_plan_p2p_s(c, bytes, same) + (same ? 0 : 2 * sh_plan_net_cpu_s(c, m->threads, bytes));
        }
        if (u > slot) slot = u;
        fill += u;
        if (M * u + w > busy) busy = M * u + w;
        if (s == 0) w0 = w;
        double params = 0, stepped = 0;
        for (int l = cuts[s]; l < cuts[s + 1]; l++) {
            double p = (double)m->layer[l].nparams * split_share(use_tp ? &pl : NULL, l, T);
            params += p;
            /* tensor parallelism alone steps the [connected] shares inside backward, each block
             * of dW while in cache (sh_mp_fuse): no pass of its own */
            if (!(S == 1 && D == 1 && use_tp && pl.roles[l] && m->layer[l].connected)) stepped += p;
        }
        group_spread(s * T, S * T, D, R, &dh, &dr);
        double ar = sh_plan_allreduce_s(c, 4.0 * params, dh, dr) + m->optim_s * stepped / (double)m->nparams;
        if (ar > sync) sync = ar;
    }
    if (use_tp) sh_tp_plan_fini(&pl);
    /* 1F1B: the first micro-batch through every stage and the last back (fill), the slowest
     * stage's slot for the others; the weight gradients fill the idle slots, but for the last
     * micro-batch's share on the first stage, which ends the pass; no stage ends before its own
     * work is done */
    double pass = fill + (M - 1) * slot + w0 / M;
    if (busy > pass) pass = busy;
    L->bubble_s = pass - busy;
    L->compute_s = busy; /* the busiest stage's work, its messages to the next stage in it */
    L->step_s = pass + sync;
    L->comm_s = sync;
    L->images_per_step = (double)D * m->batch;
    L->ok = 1;
}

/* ---- hybrid ---- */

static void predict_hybrid(const sh_plan_model *m, const sh_plan_cluster *c, sh_plan_layout *L)
{
    int H = c->hosts, R = c->ranks_per_host, n = H * R, cut = 0;
    double B = m->batch;
    unsigned char *roles = calloc((size_t)m->nlayers, 1);
    if (!roles || sh_net_hybrid_plan(m->net, n, &cut, roles) != SHOAL_OK) {
        free(roles);
        snprintf(L->why, sizeof L->why, "no [connected] part to split after a data-parallel one");
        return;
    }
    double conv = 0, fc = 0, sums = 0, summed = 0, conv_params = 0;
    for (int l = 0; l < cut; l++) {
        conv += sh_plan_layer_s(m, c, l, B / n);
        conv_params += (double)m->layer[l].nparams;
    }
    int chunks = L->scheme == SH_HYBRID_BROADCAST ? 1 : n;
    double stepped = conv_params; /* what the optimizer's own pass updates on a rank */
    for (int l = cut; l < m->nlayers; l++) { /* chunks passes of B / chunks images each */
        fc += chunks * sh_plan_layer_s(m, c, l, B / chunks) * (roles[l] ? 1.0 / n : 1.0);
        /* under broadcast the [connected] shares step inside backward (sh_mp_fuse) */
        if (!roles[l]) stepped += (double)m->layer[l].nparams;
        else if (chunks > 1 || !m->layer[l].connected) stepped += (double)m->layer[l].nparams / n;
        if (!roles[l]) continue;
        double out = 4.0 * B / chunks * (double)m->layer[l].outputs, in = 4.0 * B / chunks * (double)m->layer[l].inputs;
        sums += chunks * sh_plan_allreduce_s(c, out, H, R);
        summed += chunks * out;
        /* the part's first layer's input gradient goes back with the activities (hy_sum) */
        if (l > cut) sums += chunks * sh_plan_allreduce_s(c, in, H, R), summed += chunks * in;
    }
    free(roles);
    double I = (double)m->layer[cut - 1].outputs;
    double acts = 2 * sh_plan_exchange_s(c, 4.0 * (n - 1) / n * B * I, H, R, n - 1); /* there and back */
    /* the network stack's share of the cores: the activities both ways, the sums' share across */
    double across = (double)(n - R) / (n - 1);
    double stack = sh_plan_net_cpu_s(c, m->threads, 2 * 4.0 * (n - 1) / n * B * I * across +
                                                      2.0 * (H - 1) / H * (summed + 4.0 * conv_params) / R);
    double moved = L->scheme == SH_HYBRID_BROADCAST ? acts : (acts > fc ? acts - fc : 0) + acts / n; /* hidden */
    double conv_sum = sh_plan_allreduce_s(c, 4.0 * conv_params, H, R);
    L->compute_s = conv + fc + m->optim_s * stepped / (double)m->nparams + stack;
    L->comm_s = moved + sums + conv_sum;
    L->bubble_s = 0;
    L->step_s = L->compute_s + L->comm_s;
    L->images_per_step = B;
    L->ok = 1;
}

void sh_plan_predict(const sh_plan_model *m, const sh_plan_cluster *c, sh_plan_layout *L)
{
    L->ok = 0;
    L->why[0] = 0;
    L->step_s = L->compute_s = L->comm_s = L->bubble_s = L->images_per_step = L->images_per_s = 0;
    int n = c->hosts * c->ranks_per_host;
    int units = m->batch / (m->time_steps > 0 ? m->time_steps : 1); /* what a batch is split in: images, streams */
    switch (L->kind) {
    case SH_PLAN_DP: predict_dp(m, c, L), L->ok = 1; break;
    case SH_PLAN_PIPE:
        if (n % (L->S * L->T)) snprintf(L->why, sizeof L->why, "%d ranks are no multiple of %d", n, L->S * L->T);
        else if (units % L->M) snprintf(L->why, sizeof L->why, "%d micro-batches do not divide %d", L->M, units);
        else predict_pipe(m, c, L);
        break;
    case SH_PLAN_HYBRID:
        if (units % (L->scheme == SH_HYBRID_HORIZONTAL ? n * n : n))
            snprintf(L->why, sizeof L->why, "the batch %d does not split %s", units,
                     L->scheme == SH_HYBRID_HORIZONTAL ? "into N x N" : "across the ranks");
        else predict_hybrid(m, c, L);
        break;
    }
    if (L->ok && L->step_s > 0) L->images_per_s = L->images_per_step / L->step_s;
    else L->ok = 0;
}
