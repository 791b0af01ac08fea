/* dp/quorum.c — synchronous data parallelism on one host whose steps do not wait for
 * stragglers (--quorum F): a step's update is made once ceil(F N) fresh gradients are in, a
 * late gradient is added to a later step, and a late rank skips to the step the others reached.
 * Not here: the window (src/comm/transport/window.c), the optimizer (src/nn/optim.c), the
 * parameter server's quorum (ps/server.c).
 * Proved by tests/train/test_stragglers.c and tests/cli/test_train_stragglers.c. */

/* Vocabulary. The weights W live once, in the window's common block, with the optimizer's
 * state S (shared: whichever rank updates steps the one momentum) and a scratch U; each rank's
 * block holds its private copy P of the weights it trains on, its gradient G and its late sum L.
 * The version of W is the number of updates so far (seq / 2; seq is odd while an update writes).
 *
 * A step of rank r: copy W into P (a sequence lock: retried if an update wrote meanwhile) and
 * note its version v; forward and backward on P; then post under the window's lock:
 *   fresh (v is still the version): mark G posted; when the fresh count reaches
 *     need = min(ceil(F N), ranks not yet ended), this rank updates: U = the posted G in rank
 *     order, then every L in rank order, divided by how many gradients that is; W and S step
 *     with it; the version moves on. A rank whose post did not complete the count waits for
 *     the version to move (its G is read by the updater); the wait notices a rank that died
 *     (its pid is gone) and gives up after SHOAL_TIMEOUT naming the ranks that sent nothing.
 *   late (an update came since v): G is added to L (its images are not lost: the next update
 *     takes it) and the rank goes on at once, skipping to the version the others reached
 *     (sh_strategy.job_steps).
 * F = 1 is synchronous training: every step waits for all N, no gradient is ever late, and the
 * sum in rank order divided by N is the allreduce's average (for two ranks the same bits).
 * Why added rather than dropped: a straggler's images then still teach the model (backup
 * workers drop them, and waste the straggler's work); a late gradient is at most a few
 * updates stale because its rank skips ahead after each post. */
#include "train/dp/quorum.h"

#include <errno.h>
#include <math.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/env.h"
#include "base/err.h"
#include "base/log.h"
#include "base/util.h"
#include "nn/net.h"
#include "train/dp/allreduce.h"
#include "train/dp/shared.h"

enum { Q_LINE = SH_DP_SHARED_LINE, Q_CHECK_NS = 2000000 /* a waiting rank looks around every 2 ms */ };

typedef struct {
    uint32_t lock;
    int32_t nfresh, nended, pad;
    uint64_t seq;
} q_head;

typedef struct {
    int32_t pid;
    int32_t posted; /* a fresh gradient in G waits for this step's update */
    int32_t ended;
    int32_t late_n; /* late gradients summed in L */
    int64_t fresh, late;
    uint64_t first_ns, last_ns; /* its first and last post (one clock for the host) */
} q_line;

typedef struct {
    shoal_comm *c;
    int batch, N, q;
    double fraction;
    size_t n, npad;        /* parameters; floats between blocks */
    unsigned char *ctl;
    float *W, *U, *S;      /* common: weights, scratch, optimizer state */
    float **P, **G, **L;   /* [N]: each rank's block */
    int me;
    uint64_t v;            /* the version this step read */
    long timeout_ms;
    int64_t updates_here;  /* updates this rank made */
} q_state;

static q_head *head(const q_state *h) { return (q_head *)h->ctl; }
static q_line *line_of(const q_state *h, int r) { return (q_line *)(h->ctl + Q_LINE * (1 + r)); }

static void pause_briefly(int tries)
{
    if (tries < 50) {
        sched_yield();
        return;
    }
    struct timespec ts = {0, 20000};
    nanosleep(&ts, NULL);
}

static void lock(q_state *h)
{
    for (int i = 0; __atomic_exchange_n(&head(h)->lock, 1, __ATOMIC_ACQUIRE); i++) pause_briefly(i);
}

static void unlock(q_state *h) { __atomic_store_n(&head(h)->lock, 0, __ATOMIC_RELEASE); }

static uint64_t version(const q_state *h) { return __atomic_load_n(&head(h)->seq, __ATOMIC_ACQUIRE) / 2; }

/* W into this rank's P, whole: retried while an update writes it. */
static void read_weights(q_state *h)
{
    for (int i = 0;; i++) {
        uint64_t a = __atomic_load_n(&head(h)->seq, __ATOMIC_ACQUIRE);
        if (a & 1) {
            pause_briefly(i);
            continue;
        }
        memcpy(h->P[h->me], h->W, h->n * sizeof(float));
        __atomic_thread_fence(__ATOMIC_ACQUIRE);
        if (__atomic_load_n(&head(h)->seq, __ATOMIC_RELAXED) == a) {
            h->v = a / 2;
            return;
        }
    }
}

static void add_into(float *restrict dst, const float *restrict src, size_t n, int first)
{
    if (first) memcpy(dst, src, n * sizeof(float));
    else
        for (size_t i = 0; i < n; i++) dst[i] += src[i];
}

/* Under the lock: the posted gradients in rank order, then the late sums, averaged into U,
 * and W and S stepped with it. */
static void update(q_state *h, sh_strategy *s)
{
    uint64_t t0 = sh_now_ns();
    q_head *hd = head(h);
    uint64_t seq = hd->seq;
    __atomic_store_n(&hd->seq, seq + 1, __ATOMIC_RELEASE);
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    int count = 0;
    for (int r = 0; r < h->N; r++) {
        q_line *l = line_of(h, r);
        if (!l->posted) continue;
        add_into(h->U, h->G[r], h->n, count == 0);
        count++;
        l->posted = 0;
    }
    for (int r = 0; r < h->N; r++) {
        q_line *l = line_of(h, r);
        if (!l->late_n) continue;
        add_into(h->U, h->L[r], h->n, count == 0);
        count += l->late_n;
        l->late_n = 0;
    }
    for (size_t i = 0; count > 1 && i < h->n; i++) h->U[i] /= (float)count; /* the allreduce's one division */
    sh_optim_step(s->opt, h->W, h->U, sh_lr_at(s->lr, (int64_t)(seq / 2)));
    hd->nfresh = 0;
    h->updates_here++;
    __atomic_store_n(&hd->seq, seq + 2, __ATOMIC_RELEASE);
    s->update_in_finish_ns += sh_now_ns() - t0; /* --profile: the optimizer's, not the wait's */
}

static int need(const q_state *h)
{
    int live = h->N - head(h)->nended;
    return live < h->q ? (live > 0 ? live : 1) : h->q;
}

/* Ranks whose fresh gradient this step still lacks, for the messages: "rank 1, rank 3". */
static void missing(q_state *h, char *buf, size_t nbytes)
{
    size_t at = 0;
    buf[0] = 0;
    for (int r = 0; r < h->N && at + 16 < nbytes; r++) {
        q_line *l = line_of(h, r);
        if (r == h->me || l->posted || l->ended) continue;
        at += (size_t)snprintf(buf + at, nbytes - at, "%srank %d", at ? ", " : "", r);
    }
}

/* This rank's fresh gradient is posted: wait until an update took it, making it ourselves
 * when ranks that ended lowered the count needed. A dead rank or one silent for the timeout
 * ends the wait with an error naming it. */
static shoal_result wait_update(q_state *h, sh_strategy *s)
{
    uint64_t start = sh_now_ns(), next_check = start + Q_CHECK_NS;
    for (int i = 0; version(h) == h->v; i++) {
        pause_briefly(i);
        uint64_t now = sh_now_ns();
        if (now < next_check) continue;
        next_check = now + Q_CHECK_NS;
        lock(h);
        if (version(h) == h->v && head(h)->nfresh >= need(h)) update(h, s);
        int dead = -1;
        for (int r = 0; r < h->N && dead < 0 && version(h) == h->v; r++) {
            q_line *l = line_of(h, r);
            if (r != h->me && !l->posted && !l->ended && l->pid > 0 && kill(l->pid, 0) < 0 && errno == ESRCH) dead = r;
        }
        char who[256];
        missing(h, who, sizeof who);
        unlock(h);
        if (dead >= 0)
            return SH_FAIL(SHOAL_ERR_PEER, "--quorum: rank %d (pid %d) died before sending its gradient for step %llu; "
                           "the step cannot gather %d of the %d ranks' gradients", dead, line_of(h, dead)->pid,
                           (unsigned long long)h->v + 1, need(h), h->N);
        if (version(h) == h->v && (double)(now - start) * 1e-6 > (double)h->timeout_ms)
            return SH_FAIL(SHOAL_ERR_TIMEOUT, "--quorum: step %llu gathered %d of the %d gradients it needs within "
                           "%ld ms; no gradient from %s (frozen or stuck)", (unsigned long long)h->v + 1,
                           head(h)->nfresh, need(h), h->timeout_ms, who);
    }
    return SHOAL_OK;
}

static shoal_result attach(sh_strategy *s, sh_net *net)
{
    q_state *h = s->impl;
    SH_TRY(sh_dp_check_same(h->c, net, h->batch));
    SH_TRY(sh_env_long("SHOAL_TIMEOUT", &h->timeout_ms));
    h->n = sh_net_nparams(net);
    h->npad = (h->n + 15) / 16 * 16;
    size_t nstate = 0, at = sh_dp_shared_ctl_nbytes(h->N);
    float *mine_state = sh_optim_state(s->opt, &nstate);
    size_t spad = (nstate + 15) / 16 * 16;
    shoal_window *w = NULL;
    SH_TRY(sh_dp_shared_window(h->c, at + (2 * h->npad + spad + 16) * sizeof(float), (3 * h->npad + 16) * sizeof(float),
                               "--quorum", "--quorum with data parallelism", "the gradients meet in shared memory",
                               "--ps --consistency sync --quorum F", &w));
    h->ctl = shoal_window_common(w);
    h->W = (float *)(h->ctl + at);
    h->U = h->W + h->npad;
    h->S = h->U + h->npad;
    SH_TRY(sh_calloc((size_t)h->N, sizeof(float *), (void **)&h->P));
    SH_TRY(sh_calloc((size_t)h->N, sizeof(float *), (void **)&h->G));
    SH_TRY(sh_calloc((size_t)h->N, sizeof(float *), (void **)&h->L));
    for (int r = 0; r < h->N; r++) {
        h->P[r] = shoal_window_block(w, r);
        h->G[r] = h->P[r] + h->npad;
        h->L[r] = h->G[r] + h->npad;
    }
    sh_net_use_blocks(net, h->P[h->me], h->G[h->me], 1);
    if (h->me == 0) { /* rank 0's weights and optimizer state (a resumed run's) for everyone */
        memcpy(h->W, h->P[0], h->n * sizeof(float));
        memcpy(h->S, mine_state, nstate * sizeof(float));
    }
    line_of(h, h->me)->pid = (int32_t)getpid();
    SH_TRY(sh_dp_shared_start(h->c, net));
    sh_optim_use_state(s->opt, h->S);
    s->applies_update = 1;
    SH_LOG_I("train", "quorum over %d ranks: a step goes on with %d fresh gradients (F = %g), late ones added to "
             "the next", h->N, h->q, h->fraction);
    return SHOAL_OK;
}

static shoal_result begin(sh_strategy *s, int64_t step)
{
    (void)step;
    read_weights(s->impl);
    return SHOAL_OK;
}

static shoal_result finish(sh_strategy *s)
{
    q_state *h = s->impl;
    q_line *me = line_of(h, h->me);
    uint64_t t0 = sh_now_ns();
    shoal_result rc = SHOAL_OK;
    if (!me->first_ns) me->first_ns = t0;
    me->last_ns = t0;
    lock(h);
    /* fresh, unless the job's last step was taken while this rank computed */
    if (version(h) == h->v && (s->steps_planned <= 0 || (int64_t)h->v < s->steps_planned)) {
        me->posted = 1;
        me->fresh++;
        head(h)->nfresh++;
        int closes = head(h)->nfresh >= need(h);
        if (closes) update(h, s);
        unlock(h);
        if (!closes) rc = wait_update(h, s);
    } else {
        add_into(h->L[h->me], h->G[h->me], h->n, me->late_n == 0);
        me->late_n++;
        me->late++;
        unlock(h);
    }
    s->job_steps = (int64_t)version(h);
    return rc;
}

/* Before a checkpoint: the weights the shared optimizer state belongs to. */
static shoal_result sync_state(sh_strategy *s)
{
    read_weights(s->impl);
    return SHOAL_OK;
}

/* This rank posts no more: steps waiting on it go on without it; then every rank's last
 * update has landed. */
static shoal_result end(sh_strategy *s)
{
    q_state *h = s->impl;
    lock(h);
    line_of(h, h->me)->ended = 1;
    head(h)->nended++;
    unlock(h);
    SH_TRY(shoal_barrier(h->c));
    read_weights(h); /* the final evaluation and checkpoint see the last update */
    return SHOAL_OK;
}

static void destroy(sh_strategy *s)
{
    q_state *h = s->impl;
    if (h) {
        free(h->P);
        free(h->G);
        free(h->L);
        free(h);
    }
    free(s);
}

static int figures(const sh_strategy *s, sh_figure *out, int max)
{
    sh_quorum_stats st;
    sh_strategy_quorum_stats(s, &st);
    if (max < 2) return 0;
    out[0] = (sh_figure){"quorum/late_gradients", (double)st.late};
    out[1] = (sh_figure){"quorum/fresh_gradients", (double)st.fresh};
    return 2;
}

static const sh_strategy_ops quorum_ops = {
    .name = "quorum",
    .attach = attach,
    .begin = begin,
    .finish = finish,
    .destroy = destroy,
    .sync_state = sync_state,
    .figures = figures,
    .end = end,
};

shoal_result sh_strategy_quorum_create(shoal_comm *c, int batch, double fraction, sh_strategy **out)
{
    SH_TRY(sh_dp_shared_create(c, &quorum_ops, sizeof(q_state), out));
    q_state *h = (*out)->impl;
    h->c = c;
    h->batch = batch;
    h->N = shoal_comm_world(c);
    h->me = shoal_comm_rank(c);
    h->fraction = fraction;
    h->q = (int)ceil(fraction * h->N - 1e-9);
    if (h->q < 1) h->q = 1;
    if (h->q > h->N) h->q = h->N;
    h->timeout_ms = 60000;
    return SHOAL_OK;
}

void sh_strategy_quorum_stats(const sh_strategy *s, sh_quorum_stats *out)
{
    const q_state *h = s->impl;
    memset(out, 0, sizeof *out);
    out->ranks = h->q;
    if (!h->ctl) return;
    out->updates = (int64_t)version(h);
    for (int r = 0; r < h->N; r++) {
        const q_line *l = line_of(h, r);
        out->fresh += l->fresh;
        out->late += l->late;
        out->late_unused += l->late_n;
    }
    out->posts = out->fresh + out->late;
    for (int r = 0; r < h->N; r++) { /* each rank's rate between its first and last post */
        const q_line *l = line_of(h, r);
        int64_t n = l->fresh + l->late;
        if (n > 1 && l->last_ns > l->first_ns)
            out->images_per_s += (double)(n - 1) * h->batch / ((double)(l->last_ns - l->first_ns) * 1e-9);
    }
    out->posts_here = line_of(h, h->me)->fresh + line_of(h, h->me)->late;
}
