/* mp/hybrid.c — hybrid parallelism over N ranks (Krizhevsky 2014, "One weird trick", section 3):
 * the convolutional part data-parallel, the connected part split by outputs, three schemes.
 * Not here: the cut and the split layers (src/nn/net_tensor.c, dense_share.c), the layers'
 * slices of the whole model (mp/tensor_plan.c), the shared frame (mp/mp.c), the step.
 * Proved by tests/train/test_hybrid.c and tests/cli/test_train_hybrid.c. */

/* Vocabulary: B the global batch, b = B/N a rank's share, I the activities per image where
 * the net is cut (the output of the layer before the first [connected]). The convolutional
 * part (layers [0, cut)) runs data-parallel: each rank its b images, the gradients summed
 * over the ranks (allreduce) after backward. The connected part (layers [cut, L)) runs
 * model-parallel: every [connected] layer keeps outputs [r K/N, (r+1) K/N) and its output is
 * made whole by one allreduce of (images, K) (zero but for each rank's columns, so exact);
 * its input gradient is a partial sum over the ranks. Every other layer of the connected
 * part (dropout, softmax) runs whole on every rank, on the same values. Schemes, per step:
 *   broadcast:  one allgather of the activities, (B, I); the connected part runs the whole
 *               batch; the input gradient (B, I) is reduce-scattered, each rank getting
 *               its own images' rows.
 *   vertical:   N chunks, chunk j rank j's b images, broadcast from rank j while chunk j-1
 *               computes; its input gradient is reduced to rank j.
 *   horizontal: N chunks, chunk q the images [q s, (q+1) s) of every rank (s = b/N), one
 *               allgather each, the next in flight while one computes; its input gradient
 *               is reduce-scattered back.
 * Chunks: the connected part's gradients are summed over the chunks and divided by N, the
 * activities' gradients divided by N: a chunk's loss is its mean, the batch's the mean of
 * theirs. Dropout draws as one process over the whole batch (sh_net_set_rows), so with no
 * batch normalization every scheme trains what one process trains with batch B.
 * The update: each rank owns its shares whole, their gradients final as backward makes them,
 * so under broadcast (one pass over the batch) the shares step themselves as each block of
 * rows of dW is made, in cache (sh_mp_fuse), and finish steps the rest: the convolutional
 * part once summed. Chunks (the gradients summed over them), --compress, and a job that logs
 * the gradient norm (it reads the whole gradient) keep the trainer's step.
 * Cost, bytes a rank sends per step: activities (N-1) b I x 4 (broadcast, horizontal;
 * vertical b I x 4 from each root, a chain's forwarding aside), their gradients the same,
 * each [connected] layer's output 2 (N-1)/N x images x K x 4 and its input gradient
 * likewise, the convolutional gradients 2 (N-1)/N x their count x 4. */
#include "train/mp/hybrid.h"

#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "base/util.h"
#include "train/mp/mp.h"
#include "train/mp/tensor_plan.h"

typedef struct {
    sh_mp mp;                 /* first: the job's communicator (the convolutional gradients,
                                 figures), the part, the exchange */
    shoal_comm *fc;           /* owned: the connected part's sums and the activities' moves */
    shoal_comm *act;          /* owned: activities in flight while a chunk computes */
    sh_hybrid_scheme scheme;
    int N, rank, B, b, s;     /* s: horizontal's images per rank and chunk (b / N) */
    int cut, nlayers;
    sh_tp_plan plan;          /* each layer's figures (whole outputs, slice of the whole model);
                                 its roles: SH_TP_GATHER or 0 (sh_net_hybrid_plan's) */
    sh_cfg *cfg;              /* owned: the nets read it */
    sh_net *whole;            /* the trainer's (borrowed once handed out): blocks, checkpoints */
    sh_net *conv, *fcn;       /* owned: layers [0, cut) at b images; [cut, L) at B or b */
    size_t conv_nparams, fc_nparams, I;
    float *acts;              /* broadcast: (B, I); chunks: two (b, I) buffers */
    float *acc;               /* (fc_nparams) gradient sum over the chunks */
    int32_t *labels;          /* (B) the global batch's, rank j's at j b */
    int32_t *chunk_labels;    /* (b) horizontal's chunk */
    int32_t *ypad;            /* (b) evaluation: this rank's labels, padded */
    int chunk;                /* the chunk whose input gradient the sum hook delivers */
    uint64_t rng[4];          /* dropout's stream where one process stands */
    double step_sent, step_act, step_comm_ns; /* this step */
    double last_sent, last_comm_ns;
    double sum_sent, sum_act, sum_comm_ns;    /* over the training steps */
    int64_t steps;
} hy_state;

shoal_result sh_hybrid_scheme_parse(const char *s, sh_hybrid_scheme *out)
{
    if (!strcmp(s, "broadcast")) *out = SH_HYBRID_BROADCAST;
    else if (!strcmp(s, "vertical")) *out = SH_HYBRID_VERTICAL;
    else if (!strcmp(s, "horizontal")) *out = SH_HYBRID_HORIZONTAL;
    else
        return SH_FAIL(SHOAL_ERR_INVALID, "--hybrid %s: the schemes are broadcast, vertical and horizontal", s);
    return SHOAL_OK;
}

const char *sh_hybrid_scheme_name(sh_hybrid_scheme scheme)
{
    switch (scheme) {
    case SH_HYBRID_BROADCAST: return "broadcast";
    case SH_HYBRID_VERTICAL: return "vertical";
    case SH_HYBRID_HORIZONTAL: return "horizontal";
    }
    return "?";
}

/* ---- bytes ---- */

static double fl(size_t count) { return (double)count * sizeof(float); }

static void note(hy_state *p, double sent, int activities, uint64_t t0)
{
    p->step_sent += sent;
    if (activities) p->step_act += sent;
    p->step_comm_ns += (double)(sh_now_ns() - t0);
}

/* ---- the connected part's sums ---- */

/* The split layers' sums: outputs and inner input gradients are allreduced; the part's own
 * input gradient (the activities') goes to the ranks that computed those activities. */
static shoal_result hy_sum(void *ctx, float *buf, size_t count)
{
    hy_state *p = ctx;
    uint64_t t0 = sh_now_ns();
    double N = p->N;
    if (buf != sh_net_input_delta(p->fcn)) {
        SH_TRY(shoal_allreduce(p->fc, buf, buf, count, SHOAL_FLOAT32, SHOAL_SUM));
        note(p, 2 * (N - 1) / N * fl(count), 0, t0);
        return SHOAL_OK;
    }
    float *mine = sh_net_part_output_delta(p->conv); /* (b, I) */
    size_t bI = (size_t)p->b * p->I, sI = (size_t)p->s * p->I;
    switch (p->scheme) {
    case SH_HYBRID_BROADCAST:
        SH_ASSERT(count == (size_t)p->B * p->I);
        SH_TRY(shoal_reduce_scatter(p->fc, buf, mine, bI, SHOAL_FLOAT32, SHOAL_SUM));
        note(p, (N - 1) * fl(bI), 1, t0);
        break;
    case SH_HYBRID_VERTICAL:
        SH_ASSERT(count == bI);
        SH_TRY(shoal_reduce(p->fc, buf, p->rank == p->chunk ? mine : NULL, bI, SHOAL_FLOAT32, SHOAL_SUM,
                            p->chunk));
        note(p, (N - 1) / N * fl(bI), 1, t0);
        break;
    case SH_HYBRID_HORIZONTAL:
        SH_ASSERT(count == bI);
        SH_TRY(shoal_reduce_scatter(p->fc, buf, mine + (size_t)p->chunk * sI, sI, SHOAL_FLOAT32, SHOAL_SUM));
        note(p, (N - 1) * fl(sI), 1, t0);
        break;
    }
    return SHOAL_OK;
}

/* ---- one pass ---- */

static shoal_result wait_req(hy_state *p, shoal_request **req)
{
    if (!*req) return SHOAL_OK;
    uint64_t t0 = sh_now_ns();
    shoal_result rc = shoal_wait(*req);
    *req = NULL;
    p->step_comm_ns += (double)(sh_now_ns() - t0);
    return rc;
}

/* Forward, loss and backward of one chunk of the connected part; its gradients are added
 * into acc (chunk 0 copies). *loss: the chunk's mean. */
static shoal_result run_chunk(hy_state *p, const float *in, const int32_t *labels, int n, int q,
                              const uint64_t mid[4], float *loss)
{
    p->chunk = q;
    sh_net_rng_set(p->fcn, mid);
    SH_TRY(sh_net_forward(p->fcn, in, n, 1));
    *loss = sh_net_loss(p->fcn, labels);
    SH_TRY(sh_net_backward(p->fcn, NULL, NULL));
    const float *g = sh_net_grads(p->fcn);
    if (q == 0) memcpy(p->acc, g, p->fc_nparams * sizeof(float));
    else
        for (size_t i = 0; i < p->fc_nparams; i++) p->acc[i] += g[i];
    return SHOAL_OK;
}

static shoal_result train_pass(hy_state *p, const float *x, const int32_t *y, int n, float *loss, int *correct)
{
    if (n != p->b)
        return SH_FAIL(SHOAL_ERR_INTERNAL, "hybrid: a training step of %d images on rank %d, built for %d", n,
                       p->rank, p->b);
    int N = p->N, b = p->b, s = p->s;
    size_t bI = (size_t)b * p->I;
    uint64_t t0 = sh_now_ns(), mid[4], end[4];
    SH_TRY(shoal_allgather(p->fc, y, p->labels, (size_t)b, SHOAL_INT32));
    note(p, (N - 1) * (double)b * sizeof(int32_t), 0, t0);
    /* the convolutional part: our rows of the batch, dropping as one process does */
    sh_net_rng_set(p->conv, p->rng);
    sh_net_set_rows(p->conv, p->B, b, p->B, p->rank * b);
    SH_TRY(sh_net_forward(p->conv, x, b, 1));
    sh_net_rng_get(p->conv, mid);
    const float *mine = sh_net_part_output(p->conv); /* (b, I) */
    float chunk_loss = 0;
    double loss_sum = 0;
    int hits = 0;
    if (p->scheme == SH_HYBRID_BROADCAST) {
        t0 = sh_now_ns();
        SH_TRY(shoal_allgather(p->fc, mine, p->acts, bI, SHOAL_FLOAT32));
        note(p, (N - 1) * fl(bI), 1, t0);
        p->chunk = 0;
        sh_net_rng_set(p->fcn, mid);
        SH_TRY(sh_net_forward(p->fcn, p->acts, p->B, 1));
        loss_sum = sh_net_loss(p->fcn, p->labels);
        hits = sh_net_correct_rows(p->fcn, p->labels, p->rank * b, (p->rank + 1) * b);
        SH_TRY(sh_net_backward(p->fcn, NULL, NULL));
        sh_net_rng_get(p->fcn, end);
    } else {
        int vertical = p->scheme == SH_HYBRID_VERTICAL;
        shoal_request *req = NULL;
        shoal_result rc = SHOAL_OK;
        float *buf[2] = {p->acts, p->acts + bI};
        /* chunk q's activities: rank q's (vertical) or everyone's rows [q s, (q+1) s) */
#define START(q)                                                                                            \
    (vertical ? shoal_broadcast_start(p->act, mine, buf[(q) % 2], bI, SHOAL_FLOAT32, (q), &req)             \
              : shoal_allgather_start(p->act, mine + (size_t)(q) * s * p->I, buf[(q) % 2], (size_t)s * p->I, \
                                      SHOAL_FLOAT32, &req))
        rc = START(0);
        for (int q = 0; rc == SHOAL_OK && q < N; q++) {
            rc = wait_req(p, &req);
            note(p, vertical ? (double)(N - 1) / N * fl(bI) : (N - 1) * fl((size_t)s * p->I), 1, sh_now_ns());
            if (rc == SHOAL_OK && q + 1 < N) rc = START(q + 1); /* in flight while q computes */
            if (rc != SHOAL_OK) break;
            const int32_t *lab = p->labels + (size_t)q * b;
            if (!vertical) {
                for (int g = 0; g < N; g++)
                    memcpy(p->chunk_labels + (size_t)g * s, p->labels + (size_t)g * b + (size_t)q * s,
                           (size_t)s * sizeof(int32_t));
                lab = p->chunk_labels;
            }
            if (vertical) sh_net_set_rows(p->fcn, p->B, b, p->B, q * b);
            else sh_net_set_rows(p->fcn, p->B, s, b, q * s);
            rc = run_chunk(p, buf[q % 2], lab, b, q, mid, &chunk_loss);
            if (rc != SHOAL_OK) break;
            loss_sum += chunk_loss;
            if (vertical && q == p->rank) hits += sh_net_correct_rows(p->fcn, lab, 0, b);
            if (!vertical) hits += sh_net_correct_rows(p->fcn, lab, p->rank * s, (p->rank + 1) * s);
        }
#undef START
        if (req) (void)wait_req(p, &req); /* an error above: the transfer still ends */
        SH_TRY(rc);
        sh_net_rng_get(p->fcn, end);
        /* the batch's mean is the mean of the chunks' means */
        float inv = 1.0f / (float)N, *g = sh_net_grads(p->fcn), *d = sh_net_part_output_delta(p->conv);
        for (size_t i = 0; i < p->fc_nparams; i++) g[i] = p->acc[i] * inv;
        for (size_t i = 0; i < bI; i++) d[i] *= inv;
        loss_sum /= N;
    }
    SH_TRY(sh_net_backward(p->conv, NULL, NULL));
    memcpy(p->rng, end, sizeof p->rng);
    sh_net_rng_set(p->whole, end); /* the trainer's copy: checkpoints save it */
    *loss = (float)loss_sum;
    *correct = hits;
    return SHOAL_OK;
}

/* Evaluation: no dropout, no gradients, any share sizes (the test set's last batch): each
 * rank's activities go to all in turn and the connected part runs them. *loss: the whole
 * batch's mean; *correct: this rank's images' hits (the trainer sums both over the ranks). */
static shoal_result eval_pass(hy_state *p, const float *x, const int32_t *y, int n, float *loss, int *correct)
{
    int32_t counts[64], *all = counts;
    int N = p->N, total = 0, hits = 0;
    double loss_sum = 0;
    shoal_result rc = SHOAL_OK;
    if (N > 64) SH_TRY(sh_calloc((size_t)N, sizeof *all, (void **)&all));
    int32_t mine_n = n;
    rc = shoal_allgather(p->fc, &mine_n, all, 1, SHOAL_INT32);
    memset(p->ypad, 0, (size_t)p->b * sizeof(int32_t));
    if (n > 0) memcpy(p->ypad, y, (size_t)n * sizeof(int32_t));
    if (rc == SHOAL_OK) rc = shoal_allgather(p->fc, p->ypad, p->labels, (size_t)p->b, SHOAL_INT32);
    if (rc == SHOAL_OK && n > 0) rc = sh_net_forward(p->conv, x, n, 0);
    for (int j = 0; rc == SHOAL_OK && j < N; j++) {
        int nj = all[j];
        total += nj;
        if (!nj) continue;
        rc = shoal_broadcast(p->fc, sh_net_part_output(p->conv), p->acts, (size_t)nj * p->I, SHOAL_FLOAT32, j);
        if (rc == SHOAL_OK) rc = sh_net_forward(p->fcn, p->acts, nj, 0);
        if (rc != SHOAL_OK) break;
        const int32_t *lab = p->labels + (size_t)j * p->b;
        loss_sum += (double)sh_net_loss(p->fcn, lab) * nj;
        if (j == p->rank) hits = sh_net_correct_rows(p->fcn, lab, 0, nj);
    }
    if (all != counts) free(all);
    SH_TRY(rc);
    *loss = total ? (float)(loss_sum / total) : 0.0f;
    *correct = hits;
    return SHOAL_OK;
}

static shoal_result hy_pass(sh_strategy *s, const float *x, const int32_t *y, int n, int training, float *loss,
                            int *correct)
{
    hy_state *p = s->impl;
    if (!training) return eval_pass(p, x, y, n, loss, correct);
    p->step_sent = p->step_act = p->step_comm_ns = 0;
    return train_pass(p, x, y, n, loss, correct);
}

/* ---- the strategy hooks ---- */

/* After the convolutional gradients' sum: the parameters the shares did not step. */
static void step_rest(sh_strategy *s)
{
    hy_state *p = s->impl;
    float *params = sh_net_params(p->whole), *g = sh_net_grads(p->whole);
    sh_optim_apply(s->opt, params, g, 0, p->conv_nparams);
    sh_net_step_unfused(p->fcn, s->opt, params, g, p->conv_nparams);
}

static shoal_result hy_attach(sh_strategy *s, sh_net *net)
{
    hy_state *p = s->impl;
    SH_ASSERT(net == p->whole);
    size_t conv_nstats = 0;
    (void)sh_net_stats(p->conv, &conv_nstats);
    sh_net_share_blocks(p->conv, net, 0, 0); /* the convolutional layers' blocks come first */
    sh_net_share_blocks(p->fcn, net, p->conv_nparams, conv_nstats);
    sh_net_set_sum(p->fcn, hy_sum, p);
    sh_net_rng_get(net, p->rng); /* restored from a checkpoint, or the seed's */
    /* --compress: the convolutional part's gradients are summed compressed */
    SH_TRY(sh_mp_attach_group(s, p->N > 1 && p->conv_nparams ? p->mp.c : NULL, p->conv, 1));
    /* the shares' offsets are in the connected part's block, after the convolutional part */
    sh_mp_fuse(s, p->scheme == SH_HYBRID_BROADCAST, p->fcn, p->whole, p->conv_nparams);
    return SHOAL_OK;
}

/* The convolutional gradients: each rank's covers its images of the batch's mean loss, so
 * their sum is the batch's gradient. The connected shares are final already. */
static shoal_result hy_finish(sh_strategy *s)
{
    hy_state *p = s->impl;
    uint64_t t0 = sh_now_ns();
    if (p->conv_nparams) {
        float *g = sh_net_grads(p->whole);
        double sent = 2.0 * (p->N - 1) / p->N * fl(p->conv_nparams);
        if (p->mp.gx) {
            SH_TRY(sh_mp_finish_group(s, p->whole));
            sh_gradx_stats st;
            sh_gradx_get_stats(p->mp.gx, &st);
            sent = st.wire_nbytes;
        } else {
            SH_TRY(shoal_allreduce(p->mp.c, g, g, p->conv_nparams, SHOAL_FLOAT32, SHOAL_SUM));
        }
        note(p, sent, 0, t0);
    }
    if (p->mp.fuse) {
        uint64_t t1 = sh_now_ns();
        step_rest(s);
        s->update_in_finish_ns += sh_now_ns() - t1;
    }
    p->last_sent = p->step_sent;
    p->last_comm_ns = p->step_comm_ns;
    p->sum_sent += p->step_sent;
    p->sum_act += p->step_act;
    p->sum_comm_ns += p->step_comm_ns;
    p->steps++;
    return SHOAL_OK;
}

/* Each rank reports its own images' figures. */
static shoal_result hy_sum_figures(sh_strategy *s, double *v, int n)
{
    hy_state *p = s->impl;
    return shoal_allreduce(p->mp.c, v, v, (size_t)n, SHOAL_FLOAT64, SHOAL_SUM);
}

/* The gradient norm's shares: every rank holds the summed convolutional gradients (rank 0
 * counts them) and its own shares of the connected layers. */
static double hy_grad_sq(const sh_strategy *s)
{
    const hy_state *p = s->impl;
    const float *g = sh_net_grads(p->whole);
    return sh_sum_squares(g + p->conv_nparams, p->fc_nparams) + (s->rank == 0 ? sh_sum_squares(g, p->conv_nparams) : 0);
}

static void hy_step_comm(const sh_strategy *s, sh_step_comm *out)
{
    const hy_state *p = s->impl;
    memset(out, 0, sizeof *out);
    out->comm_s = p->last_comm_ns * 1e-9;
    out->nbytes = p->last_sent;
    out->sent_nbytes = p->last_sent;
}

/* Layer i's share: a gather share is rows [k0, k0 + ks) of W (K, I) and those biases; the
 * other layers are whole on every rank and go to the whole model from rank 0. */
static void move_share(hy_state *p, float *mine, float *whole, int to_whole)
{
    for (int i = 0; i < p->nlayers; i++) {
        size_t mo, mc, wo = p->plan.whole_off[i], wc = p->plan.whole_count[i];
        sh_net_layer_params(p->whole, i, &mo, &mc);
        float *m = mine + mo, *w = whole + wo;
        if (p->plan.roles[i] != SH_TP_GATHER) {
            if (!to_whole) memcpy(m, w, mc * sizeof(float));
            else if (p->rank == 0) memcpy(w, m, mc * sizeof(float));
            continue;
        }
        long long K = p->plan.outputs[i], r = p->rank, N = p->N;
        size_t k0 = (size_t)(r * K / N), ks = (size_t)((r + 1) * K / N) - k0, in = (wc - (size_t)K) / (size_t)K;
        float *wr = w + k0 * in, *wb = w + (size_t)K * in + k0;
        memcpy(to_whole ? wr : m, to_whole ? m : wr, ks * in * sizeof(float));
        memcpy(to_whole ? wb : m + ks * in, to_whole ? m + ks * in : wb, ks * sizeof(float));
    }
}

static void hy_put(sh_strategy *s, const float *mine, float *whole) { move_share(s->impl, (float *)mine, whole, 1); }

static void hy_take(sh_strategy *s, const float *whole, float *mine) { move_share(s->impl, mine, (float *)whole, 0); }

static void hy_fini(void *impl)
{
    hy_state *p = impl;
    sh_net_destroy(p->conv);
    sh_net_destroy(p->fcn);
    shoal_comm_destroy(p->act);
    shoal_comm_destroy(p->fc);
    sh_cfg_destroy(p->cfg);
    sh_free_aligned(p->acts);
    sh_free_aligned(p->acc);
    free(p->labels);
    free(p->chunk_labels);
    free(p->ypad);
    sh_tp_plan_fini(&p->plan);
}

static const sh_strategy_ops hy_ops = {
    .name = "hybrid",
    .attach = hy_attach,
    .begin = sh_mp_begin,
    .finish = hy_finish,
    .destroy = sh_mp_destroy,
    .pass = hy_pass,
    .sum = hy_sum_figures,
    .leads = sh_mp_leads, /* checkpoints of the parts: rank 0 writes */
    .rank_state_count = sh_mp_rank_state_count,
    .rank_state_get = sh_mp_rank_state_get,
    .rank_state_set = sh_mp_rank_state_set,
    .step_comm = hy_step_comm,
    .comm_stats = sh_mp_comm_stats,
    .grad_sq_part = hy_grad_sq,
};

/* ---- building ---- */

/* The cut, the roles and the whole model's layer slices, from a plan-only part. */
static shoal_result plan(hy_state *p, const sh_hybrid_opts *o)
{
    sh_net *pl = NULL;
    SH_TRY(sh_net_create_part(p->cfg, 1, o->seed, 0, 1, &pl));
    p->nlayers = sh_net_nlayers(pl);
    p->B = o->batch ? o->batch : sh_net_get_config(pl)->batch;
    shoal_result rc = sh_tp_plan_init(&p->plan, pl, p->N); /* the layers' figures: no pairs */
    p->mp.part.nparams_whole = p->plan.nparams_whole;
    if (rc == SHOAL_OK) rc = sh_net_hybrid_plan(pl, p->N, &p->cut, p->plan.roles);
    if (rc == SHOAL_OK && (p->B < p->N || p->B % p->N))
        rc = SH_FAIL(SHOAL_ERR_INVALID, "--hybrid: the global batch %d does not split into %d equal shares; "
                     "choose a batch divisible by %d (--batch)", p->B, p->N, p->N);
    else if (rc == SHOAL_OK && p->scheme == SH_HYBRID_HORIZONTAL && (p->B / p->N) % p->N)
        rc = SH_FAIL(SHOAL_ERR_INVALID, "--hybrid horizontal: each rank's %d images do not split into %d equal "
                     "shares (one per rank and chunk); choose a batch divisible by %d x %d = %d (--batch) or "
                     "another scheme", p->B / p->N, p->N, p->N, p->N, p->N * p->N);
    sh_net_destroy(pl);
    return rc;
}

shoal_result sh_strategy_hybrid_create(shoal_comm *c, const sh_hybrid_opts *o, sh_strategy **out, sh_net **net_out)
{
    shoal_result rc = SHOAL_OK;
    sh_strategy *s = NULL;
    hy_state *p = NULL;
    *out = NULL;
    *net_out = NULL;
    int world = shoal_comm_world(c), rank = shoal_comm_rank(c);
    if (world < 2)
        return SH_FAIL(SHOAL_ERR_INVALID, "--hybrid needs ranks to split the connected layers across: add -n N, "
                       "or run under shoal launch, mpirun or srun");
    SH_TRY(sh_mp_create(c, &hy_ops, sizeof *p, hy_fini, &s));
    p = s->impl;
    p->N = world;
    p->rank = rank;
    p->scheme = o->scheme;
    SH_TRY_GOTO(sh_cfg_load(o->cfg_path, &p->cfg), rc, fail);
    SH_TRY_GOTO(plan(p, o), rc, fail);
    p->b = p->B / p->N;
    p->s = p->b / p->N; /* horizontal only: checked above */
    /* Collective: every rank splits both, in this order. */
    SH_TRY_GOTO(shoal_comm_split(c, 0, rank, &p->fc), rc, fail);
    SH_TRY_GOTO(shoal_comm_split(c, 0, rank, &p->act), rc, fail);
    SH_TRY_GOTO(sh_net_create_part_tensor(p->cfg, 1, o->seed, 0, -1, rank, p->N, p->plan.roles, &p->whole), rc, fail);
    SH_TRY_GOTO(sh_net_create_part(p->cfg, p->b, o->seed, 0, p->cut, &p->conv), rc, fail);
    int fc_batch = p->scheme == SH_HYBRID_BROADCAST ? p->B : p->b;
    SH_TRY_GOTO(sh_net_create_part_tensor(p->cfg, fc_batch, o->seed, p->cut, -1, rank, p->N, p->plan.roles, &p->fcn), rc,
                fail);
    sh_net_want_input_delta(p->fcn, 1);
    p->conv_nparams = sh_net_nparams(p->conv);
    p->fc_nparams = sh_net_nparams(p->fcn);
    SH_ASSERT(p->conv_nparams + p->fc_nparams == sh_net_nparams(p->whole));
    p->I = sh_net_part_output_count(p->conv);
    SH_ASSERT(p->I == sh_net_part_input_count(p->fcn));
    size_t nacts = p->scheme == SH_HYBRID_BROADCAST ? (size_t)p->B * p->I : 2 * (size_t)p->b * p->I;
    SH_TRY_GOTO(sh_alloc_aligned((nacts + 16) * sizeof(float), (void **)&p->acts), rc, fail);
    SH_TRY_GOTO(sh_alloc_aligned((p->fc_nparams + 16) * sizeof(float), (void **)&p->acc), rc, fail);
    SH_TRY_GOTO(sh_calloc((size_t)p->B, sizeof(int32_t), (void **)&p->labels), rc, fail);
    SH_TRY_GOTO(sh_calloc((size_t)p->b, sizeof(int32_t), (void **)&p->chunk_labels), rc, fail);
    SH_TRY_GOTO(sh_calloc((size_t)p->b, sizeof(int32_t), (void **)&p->ypad), rc, fail);
    s->rank = rank;
    s->world = p->N;
    s->batch = p->b;
    (void)sh_net_stats(p->whole, &p->mp.part.nstats_whole); /* the convolutional layers' only */
    p->mp.part.put = hy_put;
    p->mp.part.take = hy_take;
    *net_out = p->whole;
    *out = s;
    return SHOAL_OK;
fail:
    sh_net_destroy(p->whole); /* not handed out */
    sh_strategy_destroy(s);
    return rc;
}

void sh_strategy_hybrid_profile(const sh_strategy *s, sh_hybrid_profile *out)
{
    const hy_state *p = s->impl;
    double k = p->steps ? 1.0 / (double)p->steps : 0;
    out->sent_nbytes = p->sum_sent * k;
    out->act_nbytes = p->sum_act * k;
    out->comm_s = p->sum_comm_ns * 1e-9 * k;
    /* the threads step their own rows side by side: their summed time over their count */
    out->fused_update_s = (double)__atomic_load_n(&s->update_in_backward_ns, __ATOMIC_RELAXED) /
                          sh_net_threads(p->fcn) * 1e-9 * k;
    out->rest_update_s = (double)s->update_in_finish_ns * 1e-9 * k;
}

void sh_strategy_hybrid_describe(const sh_strategy *s, FILE *out)
{
    const hy_state *p = s->impl;
    static const char *how[] = {"", "all to all at once (allgather), the connected part on the whole batch",
                                "one rank's to all per chunk (broadcast), the next in flight",
                                "a 1/N share of every rank's to all per chunk (allgather), the next in flight"};
    char conv[32];
    if (p->cut == 1) snprintf(conv, sizeof conv, "layer 0");
    else snprintf(conv, sizeof conv, "layers 0-%d", p->cut - 1);
    fprintf(out, "hybrid (%s) on %d ranks: %s data-parallel, %d of the batch's %d images per rank, "
            "gradients allreduced; layers %d-%d model-parallel on the whole batch\n", sh_hybrid_scheme_name(p->scheme),
            p->N, conv, p->b, p->B, p->cut, p->nlayers - 1);
    for (int i = p->cut; i < p->nlayers; i++) {
        if (p->plan.roles[i] != SH_TP_GATHER) continue;
        int K = p->plan.outputs[i], lo = K / p->N, hi = (K + p->N - 1) / p->N;
        if (lo == hi) fprintf(out, "  layer %d: connected, %d outputs, %d per rank\n", i, K, lo);
        else fprintf(out, "  layer %d: connected, %d outputs, %d-%d per rank\n", i, K, lo, hi);
    }
    fprintf(out, "  activities (%zu per image) move %s\n", p->I, how[p->scheme]);
}
