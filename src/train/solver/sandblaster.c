/* solver/sandblaster.c — L-BFGS across ranks (DistBelief's Sandblaster), a strategy whose step is
 * one iteration over the whole training set; rank 0 keeps the history and commands, every rank
 * sums its shard's loss and gradient and moves x alike, so the iterates do not depend on N.
 * Not here: the algorithm (lbfgs.c), the run loop, evaluation and checkpoint files (trainer.c,
 * snapshot.c: this file gives the "solver" section's bytes).
 * Proved by tests/train/test_lbfgs_train.c and tests/cli/test_train_lbfgs.c. */
#include "train/solver/sandblaster.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "base/log.h"
#include "base/util.h"
#include "data/data.h"

/* The training set is cut into chunks of the net's batch B on one grid (chunk k: images
 * [k B, k B + B)); rank r of N takes chunks [r K / N, (r + 1) K / N) of the K, computes each
 * chunk's mean loss and gradient in float32 and adds them, times the chunk's images, into double
 * sums. A chunk is the same whatever the rank count, so the sums over the ranks (a reduce to
 * rank 0, double) differ from one rank's only in the order of double additions.
 * Before every action rank 0 broadcasts a command of four doubles {op, t, f, hits}: DIRECTION
 * (d follows, n doubles), EVAL (every rank sets its weights to float(x + t d), or float(x) when
 * the third word is 0, and sums its shard), MOVE (x += t d everywhere, the iteration's end: f
 * and hits ride along), STAY (x stays: f and hits), FAIL. Every rank keeps x in double and moves
 * it with the same t and d, so x stays the same bits everywhere. The objective: mean
 * cross-entropy + decay / 2 |w|^2 over the decayed weights.
 * Cost per evaluation: a pass over the shard and a reduce of n + 2 doubles; per iteration a
 * broadcast of n doubles. */

enum { CMD_DIRECTION = 1, CMD_EVAL, CMD_MOVE, CMD_STAY, CMD_FAIL, NCMD = 4 };
#define MAX_TRIALS 64 /* evaluations an iteration records (a line search makes at most 26) */
#define SECTION_MAGIC 0x31424453ull /* "SDB1": the section's first word */

typedef struct {
    sh_strategy *s;
    shoal_comm *c;              /* NULL: alone */
    sh_lbfgs_opts o;
    sh_net *net;
    size_t n;                   /* parameters */
    float *params, *grads;      /* the net's blocks */
    double *x;                  /* (n) the iterate, the same bits on every rank */
    double *d;                  /* (n) the direction as the coordinator sent it (workers) */
    double *acc;                /* (2 + n) this rank's sums: loss, hits, gradient */
    double *red;                /* (2 + n) their sums over the ranks (rank 0) */
    float *xb;                  /* (B, C, H, W) one chunk's images */
    int32_t *yb;                /* (B) its labels */
    int chunk, count;           /* B; images in the training set */
    int64_t c_lo, c_hi;         /* this rank's chunks [c_lo, c_hi) */
    const sh_param_range *ranges;
    int nranges;
    double decay;
    sh_lbfgs *L;                /* rank 0: the coordinator's history */
    double f_at_x, hits_at_x;   /* the objective and training hits at x */
    int ntrials;                /* this iteration's evaluations: their t and hits */
    double trial_t[MAX_TRIALS], trial_hits[MAX_TRIALS];
    sh_sandblaster_stats stats;
} sb_state;

/* ---- one evaluation on this rank: its shard's sums at float(x + t d) ---- */

static void set_weights(sb_state *b, const double *d, double t)
{
    for (size_t i = 0; i < b->n; i++) b->params[i] = (float)(d ? b->x[i] + t * d[i] : b->x[i]);
}

static void load_chunk(sb_state *b, const sh_dataset *set, int64_t k, int *m)
{
    size_t in = (size_t)set->c * set->h * set->w;
    int64_t lo = k * b->chunk;
    *m = (int)(set->count - lo < b->chunk ? set->count - lo : b->chunk);
    const uint8_t *src = set->pixels + (size_t)lo * in;
    for (size_t p = 0; p < (size_t)*m * in; p++) b->xb[p] = (float)src[p] / 255.f; /* the loader's scaling */
    memcpy(b->yb, set->labels + lo, (size_t)*m * sizeof *b->yb);
}

static shoal_result shard_sums(sb_state *b, const double *d, double t)
{
    set_weights(b, d, t);
    memset(b->acc, 0, (b->n + 2) * sizeof *b->acc);
    double *g = b->acc + 2;
    for (int64_t k = b->c_lo; k < b->c_hi; k++) {
        int m = 0;
        load_chunk(b, b->s->train_set, k, &m);
        SH_TRY(sh_net_forward(b->net, b->xb, m, 1));
        float loss = sh_net_loss(b->net, b->yb);
        b->acc[1] += sh_net_correct(b->net, b->yb);
        SH_TRY(sh_net_backward(b->net, NULL, NULL)); /* d(mean loss over the chunk) */
        b->acc[0] += (double)loss * m;
        for (size_t i = 0; i < b->n; i++) g[i] += (double)b->grads[i] * m;
    }
    return SHOAL_OK;
}

/* f and g from the sums over the ranks: means over the training set plus the decay term on
 * the weights the evaluation used. */
static void objective(const sb_state *b, const double *sums, double *f, double *g)
{
    double inv = 1.0 / b->count;
    *f = sums[0] * inv;
    for (size_t i = 0; i < b->n; i++) g[i] = sums[2 + i] * inv;
    if (b->decay == 0) return;
    double sq = 0;
    for (int r = 0; r < b->nranges; r++) {
        const sh_param_range *pr = &b->ranges[r];
        for (size_t i = pr->offset; pr->decay && i < pr->offset + pr->count; i++) {
            double w = b->params[i];
            sq += w * w;
            g[i] += b->decay * w;
        }
    }
    *f += 0.5 * b->decay * sq;
}

/* ---- the coordinator (rank 0) ---- */

static shoal_result command(sb_state *b, double op, double t, double f, double hits)
{
    if (!b->c) return SHOAL_OK;
    double cmd[NCMD] = {op, t, f, hits};
    return shoal_broadcast(b->c, cmd, cmd, NCMD, SHOAL_FLOAT64, 0);
}

static shoal_result coord_eval(void *ctx, const double *d, double t, double *f, double *g)
{
    sb_state *b = ctx;
    SH_TRY(command(b, CMD_EVAL, t, d != NULL, 0));
    SH_TRY(shard_sums(b, d, t));
    const double *sums = b->acc;
    if (b->c) {
        SH_TRY(shoal_reduce(b->c, b->acc, b->red, b->n + 2, SHOAL_FLOAT64, SHOAL_SUM, 0));
        sums = b->red;
    }
    objective(b, sums, f, g);
    if (!d) {
        b->f_at_x = *f;
        b->hits_at_x = sums[1];
    } else if (b->ntrials < MAX_TRIALS) {
        b->trial_t[b->ntrials] = t;
        b->trial_hits[b->ntrials++] = sums[1];
    }
    return SHOAL_OK;
}

static shoal_result coord_direction(void *ctx, const double *d)
{
    sb_state *b = ctx;
    if (!b->c) return SHOAL_OK;
    SH_TRY(command(b, CMD_DIRECTION, 0, 0, 0));
    return shoal_broadcast(b->c, d, b->d, b->n, SHOAL_FLOAT64, 0);
}

/* The training hits at the step taken: the trial's at that t (t = 0: x's). */
static double hits_at(const sb_state *b, double t)
{
    for (int k = b->ntrials - 1; k >= 0 && t != 0; k--)
        if (b->trial_t[k] == t) return b->trial_hits[k];
    return b->hits_at_x;
}

static void move(sb_state *b, const double *d, double t, double f, double hits)
{
    for (size_t i = 0; i < b->n; i++) b->x[i] += t * d[i];
    set_weights(b, NULL, 0);
    b->f_at_x = f;
    b->hits_at_x = hits;
}

static shoal_result coordinate(sb_state *b)
{
    sh_lbfgs_fn fn = {coord_eval, coord_direction, b};
    sh_lbfgs_result r;
    b->ntrials = 0;
    shoal_result rc = sh_lbfgs_iterate(b->L, &fn, &r);
    if (rc != SHOAL_OK) {
        shoal_result keep = rc;
        if (b->c && rc != SHOAL_ERR_PEER && rc != SHOAL_ERR_TIMEOUT && rc != SHOAL_ERR_BROKEN)
            (void)command(b, CMD_FAIL, 0, 0, 0); /* the others stop rather than wait */
        return keep;
    }
    b->stats.iterations = sh_lbfgs_iterations(b->L);
    b->stats.evaluations = sh_lbfgs_evaluations(b->L);
    b->stats.g_max = r.g_max;
    b->stats.converged = r.outcome == SH_LBFGS_CONVERGED;
    if (r.outcome != SH_LBFGS_MOVED) {
        set_weights(b, NULL, 0);
        return command(b, CMD_STAY, 0, b->f_at_x, b->hits_at_x);
    }
    double hits = hits_at(b, r.t);
    b->stats.last_t = r.t;
    SH_TRY(command(b, CMD_MOVE, r.t, r.f, hits));
    move(b, sh_lbfgs_direction(b->L), r.t, r.f, hits);
    SH_LOG_I("lbfgs", "iteration %lld: f %.9g, step %.6g, %d evaluations, max |g| %.3g",
             (long long)b->stats.iterations, r.f, r.t, r.evals, r.g_max);
    return SHOAL_OK;
}

/* ---- the other ranks: follow the commands until the iteration ends ---- */

static shoal_result follow(sb_state *b)
{
    for (;;) {
        double cmd[NCMD];
        SH_TRY(shoal_broadcast(b->c, cmd, cmd, NCMD, SHOAL_FLOAT64, 0));
        switch ((int)cmd[0]) {
        case CMD_DIRECTION: SH_TRY(shoal_broadcast(b->c, b->d, b->d, b->n, SHOAL_FLOAT64, 0)); break;
        case CMD_EVAL:
            SH_TRY(shard_sums(b, cmd[2] != 0 ? b->d : NULL, cmd[1]));
            SH_TRY(shoal_reduce(b->c, b->acc, NULL, b->n + 2, SHOAL_FLOAT64, SHOAL_SUM, 0));
            break;
        case CMD_MOVE: move(b, b->d, cmd[1], cmd[2], cmd[3]); return SHOAL_OK;
        case CMD_STAY:
            set_weights(b, NULL, 0);
            b->f_at_x = cmd[2];
            b->hits_at_x = cmd[3];
            return SHOAL_OK;
        case CMD_FAIL:
            return SH_FAIL(SHOAL_ERR_PEER, "rank 0, the L-BFGS coordinator, failed during an iteration; its "
                           "message says why");
        default: return SH_FAIL(SHOAL_ERR_INTERNAL, "L-BFGS: unknown command %g from rank 0", cmd[0]);
        }
    }
}

/* The step hook: one iteration over the whole training set; loss and hits at the new x. */
static shoal_result lbfgs_step(sh_strategy *s, int64_t step, float *loss, int *correct, int *nimages)
{
    (void)step;
    sb_state *b = s->impl;
    SH_TRY(s->rank == 0 ? coordinate(b) : follow(b));
    *loss = (float)b->f_at_x;
    *correct = (int)b->hits_at_x;
    *nimages = b->count;
    return SHOAL_OK;
}

/* ---- the strategy's frame ---- */

/* What makes the objective a function of the weights alone (no dropout draws, no batch
 * statistics, no state carried between chunks), or is not a set of images. */
static shoal_result check_model(const sb_state *b, sh_net *net, const sh_dataset *set)
{
    size_t nstate = 0, nstats = 0;
    (void)sh_net_state(net, &nstate);
    (void)sh_net_stats(net, &nstats);
    if (!set) return SH_FAIL(SHOAL_ERR_INTERNAL, "L-BFGS: the trainer gave no training set");
    if (set->text || nstate)
        return SH_FAIL(SHOAL_ERR_INVALID, "--solver lbfgs needs a feed-forward net on images: the whole training "
                       "set is one batch, and a recurrent net or text carries state from batch to batch; use SGD");
    if (nstats)
        return SH_FAIL(SHOAL_ERR_INVALID, "--solver lbfgs: batch_normalize makes the loss depend on how the set is "
                       "cut into chunks (batch statistics); remove it from the cfg or use SGD");
    for (int i = 0; i < sh_net_nlayers(net); i++)
        if (!strncmp(sh_net_layer_name(net, i), "dropout", 7))
            return SH_FAIL(SHOAL_ERR_INVALID, "--solver lbfgs: [dropout] (layer %d) makes the loss random, which "
                           "breaks the line search; remove it from the cfg or use SGD", i);
    (void)b;
    return SHOAL_OK;
}

static shoal_result attach(sh_strategy *s, sh_net *net)
{
    sb_state *b = s->impl;
    const sh_dataset *set = s->train_set;
    SH_TRY(check_model(b, net, set));
    b->net = net;
    b->n = sh_net_nparams(net);
    b->params = sh_net_params(net);
    b->grads = sh_net_grads(net);
    b->chunk = sh_net_batch(net);
    b->count = set->count;
    int64_t K = (b->count + b->chunk - 1) / b->chunk;
    b->c_lo = K * s->rank / s->world;
    b->c_hi = K * (s->rank + 1) / s->world;
    b->ranges = sh_net_param_ranges(net, &b->nranges);
    b->decay = sh_net_get_config(net)->optim.decay;
    b->o.lr = s->lr ? s->lr->base_lr : 1.0;
    if (b->c) SH_TRY(shoal_broadcast(b->c, b->params, b->params, b->n, SHOAL_FLOAT32, 0));
    size_t in = (size_t)sh_net_input_count(net);
    SH_TRY(sh_calloc(b->n + 1, sizeof *b->x, (void **)&b->x));
    SH_TRY(sh_calloc(b->n + 1, sizeof *b->d, (void **)&b->d));
    SH_TRY(sh_calloc(b->n + 2, sizeof *b->acc, (void **)&b->acc));
    SH_TRY(sh_calloc(b->n + 2, sizeof *b->red, (void **)&b->red));
    SH_TRY(sh_alloc_aligned((size_t)b->chunk * in * sizeof(float), (void **)&b->xb));
    SH_TRY(sh_calloc((size_t)b->chunk, sizeof *b->yb, (void **)&b->yb));
    for (size_t i = 0; i < b->n; i++) b->x[i] = b->params[i];
    if (s->rank == 0) SH_TRY(sh_lbfgs_create(&b->o, b->n, &b->L));
    s->applies_update = 1;
    if (s->rank == 0)
        SH_LOG_I("lbfgs", "L-BFGS: history %d, lr %g, decay %g; %d images in %lld chunks of %d over %d rank%s",
                 b->o.history, b->o.lr, b->decay, b->count, (long long)K, b->chunk, s->world, s->world > 1 ? "s" : "");
    return SHOAL_OK;
}

static shoal_result nothing_to_begin(sh_strategy *s, int64_t step)
{
    (void)s, (void)step;
    return SHOAL_OK;
}

static shoal_result nothing_to_finish(sh_strategy *s)
{
    (void)s;
    return SHOAL_OK;
}

static shoal_result sum(sh_strategy *s, double *v, int n)
{
    sb_state *b = s->impl;
    return b->c ? shoal_allreduce(b->c, v, v, (size_t)n, SHOAL_FLOAT64, SHOAL_SUM) : SHOAL_OK;
}

/* ---- the checkpoint's "solver" section: {magic, n}, {f, hits} at x, x, then rank 0's
 * history (lbfgs.c's bytes). Every rank reads x; rank 0 the history too. ---- */

enum { SEC_HEAD = 4 * sizeof(double) };

static size_t ckpt_nbytes(const sh_strategy *s)
{
    const sb_state *b = s->impl;
    return b->L ? SEC_HEAD + b->n * sizeof(double) + sh_lbfgs_state_nbytes(b->L) : 0;
}

static void ckpt_get(sh_strategy *s, void *out)
{
    sb_state *b = s->impl;
    uint64_t head[2] = {SECTION_MAGIC, b->n};
    double at_x[2] = {b->f_at_x, b->hits_at_x};
    char *p = out;
    memcpy(p, head, sizeof head);
    memcpy(p + sizeof head, at_x, sizeof at_x);
    memcpy(p + SEC_HEAD, b->x, b->n * sizeof(double));
    sh_lbfgs_state_get(b->L, p + SEC_HEAD + b->n * sizeof(double));
}

static shoal_result ckpt_set(sh_strategy *s, const void *in, size_t nbytes)
{
    sb_state *b = s->impl;
    const char *p = in;
    if (!in) { /* a checkpoint of another solver: L-BFGS starts here with an empty history */
        if (s->rank == 0)
            SH_LOG_W("lbfgs", "the checkpoint holds no L-BFGS history (saved by another solver): L-BFGS starts "
                     "from its weights with an empty history");
        return SHOAL_OK;
    }
    uint64_t head[2];
    size_t xb = b->n * sizeof(double);
    if (nbytes < SEC_HEAD + xb)
        return SH_FAIL(SHOAL_ERR_FORMAT, "checkpoint: its L-BFGS section (%zu bytes) is too short", nbytes);
    memcpy(head, p, sizeof head);
    if (head[0] != SECTION_MAGIC || head[1] != b->n)
        return SH_FAIL(SHOAL_ERR_FORMAT, "checkpoint: its L-BFGS section is not one of this model's (%llu "
                       "parameters, this model has %zu)", (unsigned long long)head[1], b->n);
    double at_x[2];
    memcpy(at_x, p + sizeof head, sizeof at_x);
    b->f_at_x = at_x[0];
    b->hits_at_x = at_x[1];
    memcpy(b->x, p + SEC_HEAD, xb);
    set_weights(b, NULL, 0);
    if (b->L) SH_TRY(sh_lbfgs_state_set(b->L, p + SEC_HEAD + xb, nbytes - SEC_HEAD - xb));
    if (b->L) {
        b->stats.iterations = sh_lbfgs_iterations(b->L);
        b->stats.evaluations = sh_lbfgs_evaluations(b->L);
    }
    return SHOAL_OK;
}

static void destroy(sh_strategy *s)
{
    sb_state *b = s->impl;
    if (b) {
        sh_lbfgs_destroy(b->L);
        sh_free_aligned(b->xb);
        free(b->yb);
        free(b->red);
        free(b->acc);
        free(b->d);
        free(b->x);
        free(b);
    }
    free(s);
}

/* The gradient norm's shares: rank 0 holds the objective's whole gradient. */
static double grad_sq_part(const sh_strategy *s)
{
    const sb_state *b = s->impl;
    if (!b->L) return 0;
    const double *g = sh_lbfgs_gradient(b->L);
    double sq = 0;
    for (size_t i = 0; i < b->n; i++) sq += g[i] * g[i];
    return sq;
}

static const sh_strategy_ops lbfgs_ops = {
    .name = "lbfgs",
    .attach = attach,
    .begin = nothing_to_begin,
    .finish = nothing_to_finish,
    .destroy = destroy,
    .sum = sum,
    .step = lbfgs_step,
    .ckpt_nbytes = ckpt_nbytes,
    .ckpt_get = ckpt_get,
    .ckpt_set = ckpt_set,
    .grad_sq_part = grad_sq_part,
};

shoal_result sh_strategy_lbfgs_create(shoal_comm *c, const sh_lbfgs_opts *o, sh_strategy **out)
{
    *out = NULL;
    sh_strategy *s = calloc(1, sizeof *s);
    sb_state *b = calloc(1, sizeof *b);
    if (!s || !b) {
        free(s);
        free(b);
        return SH_FAIL(SHOAL_ERR_NOMEM, "L-BFGS: out of memory");
    }
    b->s = s;
    b->c = c;
    b->o = *o;
    s->ops = &lbfgs_ops;
    s->impl = b;
    s->rank = s->job_rank = c ? shoal_comm_rank(c) : 0;
    s->world = s->job_world = c ? shoal_comm_world(c) : 1;
    s->full_batch = 1;
    *out = s;
    return SHOAL_OK;
}

void sh_strategy_lbfgs_stats(const sh_strategy *s, sh_sandblaster_stats *out)
{
    const sb_state *b = s->impl;
    *out = b->stats;
}
