/* ps/server_rounds.c — a parameter server's consistency and rounds: when a waiting pull may be
 * answered (sync, async, ssp; a sync round's quorum), how pushes become optimizer updates (a
 * round's mean per segment of workers, or each push at once), what follows an update (the
 * shard's checkpoint, the clocks in TensorBoard, the round hook) and the checkpoint's reading.
 * Not here: receiving, checking and answering messages, lost workers (server.c).
 * Proved by tests/train/test_ps.c, tests/cli/test_train_ps.c. */
#include "train/ps/server_state.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "base/err.h"
#include "base/log.h"
#include "base/trace.h"
#include "base/util.h"
#include "io/checkpoint.h"
#include "io/tb_events.h"

/* What a server checkpoint holds besides the floats: enough to refuse a foreign file. */
typedef struct {
    uint64_t nparams, lo, count;
    int64_t updates;
    int32_t nservers, k, consistency, pad;
} ps_meta;

static void ckpt_path(const char *base, int k, char *out, size_t cap)
{
    snprintf(out, cap, "%s.server%d", base, k);
}

static shoal_result server_save(sh_ps_server *s)
{
    char path[4096];
    ckpt_path(s->cfg.save_path, s->k, path, sizeof path);
    size_t nstate = 0;
    float *state = sh_optim_state(s->opt, &nstate);
    ps_meta m = {s->cfg.nparams, s->lo, s->count, s->updates, s->cfg.nservers, s->k, (int32_t)s->cfg.consistency, 0};
    sh_ckpt_section secs[3] = {{"ps_meta", &m, sizeof m},
                               {"ps_params", s->params, s->count * sizeof(float)},
                               {"ps_optim", state, nstate * sizeof(float)}};
    shoal_result rc = sh_ckpt_save(path, secs, 3);
    if (rc != SHOAL_OK) sh_err_prefix("parameter server %d: ", s->k);
    return rc;
}

shoal_result sh_ps_rounds_load(sh_ps_server *s)
{
    char path[4096];
    ckpt_path(s->cfg.resume_path, s->k, path, sizeof path);
    ps_meta m;
    sh_ckpt_section meta = {"ps_meta", &m, sizeof m};
    shoal_result rc = sh_ckpt_load(path, &meta, 1);
    if (rc != SHOAL_OK) {
        sh_err_prefix("parameter server %d: ", s->k);
        return rc;
    }
    if (m.nparams != s->cfg.nparams || m.nservers != s->cfg.nservers || m.k != s->k || m.lo != s->lo ||
        m.count != s->count)
        return SH_FAIL(SHOAL_ERR_FORMAT,
                       "%s holds shard %d of %d of a %llu-parameter model; this job has shard %d of %d of %zu "
                       "parameters: resume with the same model and --servers",
                       path, m.k, m.nservers, (unsigned long long)m.nparams, s->k, s->cfg.nservers, s->cfg.nparams);
    size_t nstate = 0;
    float *state = sh_optim_state(s->opt, &nstate);
    sh_ckpt_section secs[2] = {{"ps_params", s->params, s->count * sizeof(float)},
                               {"ps_optim", state, nstate * sizeof(float)}};
    rc = sh_ckpt_load(path, secs, 2);
    if (rc != SHOAL_OK) return rc;
    s->updates = m.updates; /* the schedule goes on; the workers' clocks start again */
    SH_LOG_I("ps", "server %d: resumed from %s after %lld updates", s->k, path, (long long)m.updates);
    return SHOAL_OK;
}

static int quorum(const sh_ps_server *s) { return s->cfg.quorum > 0 && s->cfg.consistency == SH_PS_SYNC; }

static int64_t min_live_clock(const sh_ps_server *s, int64_t *max_out)
{
    int64_t mn = INT64_MAX, mx = INT64_MIN;
    for (int w = 0; w < s->nworkers; w++) {
        if (!s->alive[w] || s->bye[w]) continue;
        if (s->clock[w] < mn) mn = s->clock[w];
        if (s->clock[w] > mx) mx = s->clock[w];
    }
    if (max_out) *max_out = mx;
    return mn;
}

/* Answer every waiting pull the consistency mode allows now. */
void sh_ps_rounds_serve_pulls(sh_ps_server *s)
{
    int64_t mx;
    int64_t mn = min_live_clock(s, &mx);
    for (int w = 0; w < s->nworkers; w++) {
        if (!s->pending[w] || !s->alive[w]) continue;
        int64_t cw = s->clock[w];
        int ok = s->cfg.consistency == SH_PS_ASYNC ||
                 (s->cfg.consistency == SH_PS_SYNC && !quorum(s) && (mn == INT64_MAX || mn >= cw)) ||
                 (s->cfg.consistency == SH_PS_SYNC && quorum(s) && (!s->pushed_since[w] || s->updates > s->pulled_at[w])) ||
                 (s->cfg.consistency == SH_PS_SSP && (mn == INT64_MAX || mn >= cw - s->cfg.staleness));
        if (!ok) continue;
        if (s->cfg.consistency == SH_PS_SSP && mn != INT64_MAX && mn < cw - s->cfg.staleness)
            s->st.ssp_violations++;
        if (mn != INT64_MAX && mx - mn > s->st.max_spread) s->st.max_spread = mx - mn;
        ps_hdr h = {PS_MAGIC, PS_PARAMS, cw, s->lo + s->wa[w], s->wn[w], sh_ps_server_lead_worker(s),
                    {(int32_t)(uint32_t)s->updates, (int32_t)(uint32_t)((uint64_t)s->updates >> 32), 0}};
        sh_ps_server_send_to(s, w, &h, s->params + s->wa[w], s->wn[w] * sizeof(float));
        s->pulled_at[w] = s->updates;
        s->pushed_since[w] = 0;
        if (s->held_ns[w] && sh_trace_on())
            sh_trace_span(SH_TRACK_STALE, "pull held", s->held_ns[w], sh_now_ns(), "worker", w,
                          "clock", cw);
        s->held_ns[w] = 0;
        s->pending[w] = 0;
        s->st.pulls++;
    }
}

static float lr_now(const sh_ps_server *s)
{
    int64_t step = s->cfg.consistency == SH_PS_SYNC || !s->novl ? s->updates : s->updates / s->novl;
    return sh_lr_at(&s->cfg.lr, step);
}

/* Sync with a quorum: the fresh pushes (their worker pulled this round's weights) a round
 * waits for, ceil(quorum x live workers); a late push counts in the round's mean only. */
static int round_full(sh_ps_server *s, int live)
{
    if (!quorum(s)) return s->round_pushes >= live;
    int need = (int)ceil(s->cfg.quorum * live - 1e-9);
    return s->round_fresh >= (need < 1 ? 1 : need);
}

/* g: the push of worker w, its range of the shard. */
void sh_ps_rounds_apply_push(sh_ps_server *s, int w, const float *g)
{
    size_t a = s->wa[w], n = s->wn[w];
    if (s->cfg.consistency == SH_PS_SYNC) {
        for (size_t i = 0; i < n; i++) s->acc[a + i] += g[i];
        s->seg_pushes[s->seg[w]]++;
        s->round_pushes++;
        if (quorum(s) && s->pulled_at[w] == s->updates) s->round_fresh++;
        else if (quorum(s)) s->st.late_pushes++;
        s->pushed_since[w] = 1;
        int live = 0;
        for (int v = 0; v < s->nworkers; v++) live += s->alive[v] && !s->bye[v];
        if (round_full(s, live)) {
            for (int k = 0; k < s->nseg; k++) { /* each segment's mean over its pushes */
                float inv = 1.0f / (float)(s->seg_pushes[k] ? s->seg_pushes[k] : 1);
                for (size_t i = s->seg_a[k]; i < s->seg_a[k] + s->seg_n[k]; i++) s->grad[i] = s->acc[i] * inv;
                s->seg_pushes[k] = 0;
            }
            sh_optim_step(s->opt, s->params, s->grad, lr_now(s));
            memset(s->acc, 0, s->count * sizeof(float));
            s->round_pushes = 0;
            s->round_fresh = 0;
            s->updates++;
        }
    } else {
        /* Every push at once, scaled so that one push from each worker holding its range
         * weighs one step. */
        float inv = 1.0f / (float)s->seg_cover[s->seg[w]];
        for (size_t i = 0; i < n; i++) s->grad[a + i] = g[i] * inv;
        sh_optim_begin(s->opt, lr_now(s));
        sh_optim_apply(s->opt, s->params, s->grad + a, a, n);
        s->updates++;
    }
    s->clock[w]++;
    (void)w;
}

/* A checkpoint, on the timeline's checkpoint track when it records. */
shoal_result sh_ps_rounds_save(sh_ps_server *s)
{
    uint64_t t0 = sh_trace_on() ? sh_now_ns() : 0;
    shoal_result rc = server_save(s);
    if (t0) sh_trace_span(SH_TRACK_CKPT, "checkpoint (server shard)", t0, sh_now_ns(), "updates", s->updates, NULL, 0);
    return rc;
}

/* The clocks in TensorBoard: the spread the consistency bound limits, and each worker's. */
static shoal_result log_clocks_tb(sh_ps_server *s, int64_t rounds)
{
    int64_t mx, mn = min_live_clock(s, &mx);
    if (mn != INT64_MAX) SH_TRY(sh_tb_scalar(s->cfg.tb, "ps/clock_spread", rounds, (float)(mx - mn)));
    if (quorum(s)) SH_TRY(sh_tb_scalar(s->cfg.tb, "ps/late_pushes", rounds, (float)s->st.late_pushes));
    for (int w = 0; w < s->nworkers; w++) {
        if (!s->alive[w]) continue;
        char tag[32];
        snprintf(tag, sizeof tag, "ps/clock/w%d", w);
        SH_TRY(sh_tb_scalar(s->cfg.tb, tag, rounds, (float)s->clock[w]));
    }
    return sh_tb_flush(s->cfg.tb);
}

/* After each update: a checkpoint every save_every whole rounds, and the round hook. */
shoal_result sh_ps_rounds_after_update(sh_ps_server *s)
{
    int64_t per_round = s->cfg.consistency == SH_PS_SYNC || !s->novl ? 1 : s->novl;
    if (s->updates % per_round) return SHOAL_OK;
    int64_t rounds = s->updates / per_round;
    sh_trace_set_step(rounds); /* the timeline's step window counts the servers' rounds */
    if (s->cfg.tb) SH_TRY(log_clocks_tb(s, rounds));
    if (s->cfg.after_round) s->cfg.after_round(s->cfg.hook_ctx, s->k, rounds);
    if (s->cfg.save_path && s->cfg.save_every > 0 && rounds % s->cfg.save_every == 0) return sh_ps_rounds_save(s);
    return SHOAL_OK;
}
