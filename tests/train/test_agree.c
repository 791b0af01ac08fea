/* test_agree.c — proves src/train/agree.c on real forked ranks over a real communicator,
 * driven by a small strategy of its own (sum and sum_start are real allreduces, drain counts):
 * a request made after a step that is not quiet is acted on at that step by every rank; one
 * made after a quiet step one step later, after a drain; a save request is cleared once sent
 * or acted on; gradient-norm shares are summed; the request still in flight after the last
 * step is waited for; an error keeps its message; one rank alone acts on its own requests. */
#include <string.h>

#include "base/err.h"
#include "check.h"
#include "lib/ranks.h"
#include "shoal/comm.h"
#include "train/agree.h"

enum { STEPS = 12, NOT = -1 };

typedef struct {
    shoal_comm *c;
    int defers;   /* what can_defer answers */
    int drains;   /* drain calls so far */
} fake;

static shoal_result f_sum(sh_strategy *s, double *v, int n)
{
    fake *f = s->impl;
    return shoal_allreduce(f->c, v, v, (size_t)n, SHOAL_FLOAT64, SHOAL_SUM);
}

static shoal_result f_sum_start(sh_strategy *s, double *v, int n, shoal_request **req)
{
    fake *f = s->impl;
    return shoal_allreduce_start(f->c, v, v, (size_t)n, SHOAL_FLOAT64, SHOAL_SUM, req);
}

static int f_can_defer(const sh_strategy *s) { return ((const fake *)s->impl)->defers; }

static shoal_result f_drain(sh_strategy *s)
{
    ((fake *)s->impl)->drains++;
    return SHOAL_OK;
}

static const sh_strategy_ops fake_ops = {
    .name = "fake", .sum = f_sum, .can_defer = f_can_defer, .drain = f_drain, .sum_start = f_sum_start,
};

static void strategy_over(shoal_comm *c, fake *f, sh_strategy *s, int defers)
{
    memset(f, 0, sizeof *f);
    memset(s, 0, sizeof *s);
    f->c = c;
    f->defers = defers;
    s->ops = &fake_ops;
    s->impl = f;
    s->rank = s->job_rank = shoal_comm_rank(c);
    s->world = s->job_world = shoal_comm_world(c);
}

/* One schedule for every rank: quiet[k] says step k rests; rank raiser raises `what` (0 save,
 * 1 stop, 2 out of time) after step raise_at. Records at which step each was agreed and the
 * drains before each vote. */
typedef struct {
    int defers;
    int rests[STEPS];
    int raiser, raise_at, what;
    /* out, per rank */
    int save_at[STEPS], stop_at, time_at;
    int drained_by[STEPS];     /* drains done by the end of step k's vote */
    int flag_after[STEPS];     /* *save_requested after step k's vote */
} schedule;

static void run_schedule(shoal_comm *c, schedule *sc)
{
    fake f;
    sh_strategy s;
    strategy_over(c, &f, &s, sc->defers);
    sh_agree a;
    sh_agree_begin(&a, &s);
    volatile sig_atomic_t save_flag = 0;
    int rank = shoal_comm_rank(c), nsaves = 0;
    sc->stop_at = sc->time_at = NOT;
    for (int k = 0; k < STEPS; k++) sc->save_at[k] = NOT;
    for (int k = 0; k < STEPS; k++) {
        CHECK(sh_agree_settle(&a, sc->rests[k]) == SHOAL_OK, "settle %d: %s", k, shoal_last_error_message());
        if (rank == sc->raiser && k == sc->raise_at && sc->what == 0) save_flag = 1;
        sh_agree_votes v = {.save = save_flag, .stop = rank == sc->raiser && k == sc->raise_at && sc->what == 1,
                            .out_of_time = rank == sc->raiser && k == sc->raise_at && sc->what == 2, .grad_sq = -1};
        CHECK(sh_agree_vote(&a, &v, &save_flag) == SHOAL_OK, "vote %d: %s", k, shoal_last_error_message());
        sc->drained_by[k] = f.drains;
        sc->flag_after[k] = save_flag;
        if (v.save) sc->save_at[nsaves++] = k;
        if (v.stop) {
            sc->stop_at = k;
            break;
        }
        if (v.out_of_time) {
            sc->time_at = k;
            break;
        }
    }
    CHECK(sh_agree_end(&a) == SHOAL_OK, "end: %s", shoal_last_error_message());
    CHECK(s.may_defer == 0, "may_defer is off after the run");
    CHECK(a.req == NULL, "nothing left in flight");
}

static void all_rest_but(schedule *sc, int busy)
{
    for (int k = 0; k < STEPS; k++) sc->rests[k] = k != busy;
}

static void at_once_without_deferral(shoal_comm *c, void *arg)
{
    (void)arg;
    int world = shoal_comm_world(c);
    for (int what = 0; what < 3; what++) {
        schedule sc;
        memset(&sc, 0, sizeof sc);
        all_rest_but(&sc, NOT); /* rests do not matter when the strategy cannot defer */
        sc.raiser = world - 1;
        sc.raise_at = 4;
        sc.what = what;
        run_schedule(c, &sc);
        if (what == 0) {
            CHECK(sc.save_at[0] == 4 && sc.save_at[1] == NOT, "the save at step 4 on every rank, once (at %d, %d)",
                  sc.save_at[0], sc.save_at[1]);
            CHECK(sc.flag_after[4] == 0, "the raiser's request is cleared once acted on");
        }
        if (what == 1) CHECK(sc.stop_at == 4, "the stop at step 4 on every rank (at %d)", sc.stop_at);
        if (what == 2) CHECK(sc.time_at == 4, "the time limit at step 4 on every rank (at %d)", sc.time_at);
        CHECK(sc.drained_by[4] == 0, "no drain without deferral");
    }
}

static void one_step_late_after_a_quiet_step(shoal_comm *c, void *arg)
{
    (void)arg;
    int world = shoal_comm_world(c), rank = shoal_comm_rank(c);
    /* a save asked after quiet step 2: sent then, acted on after step 3, drained first */
    schedule sc;
    memset(&sc, 0, sizeof sc);
    sc.defers = 1;
    all_rest_but(&sc, 7);
    sc.raiser = world - 1;
    sc.raise_at = 2;
    run_schedule(c, &sc);
    CHECK(sc.save_at[0] == 3 && sc.save_at[1] == NOT, "saved at step 3 on every rank, once (at %d, %d)",
          sc.save_at[0], sc.save_at[1]);
    if (rank == sc.raiser) CHECK(sc.flag_after[2] == 0, "the raiser's request is cleared once sent");
    CHECK(sc.drained_by[2] == 0 && sc.drained_by[3] == 1, "quiet steps do not drain, acting does: %d, %d",
          sc.drained_by[2], sc.drained_by[3]);
    CHECK(sc.drained_by[7] == 2 && sc.drained_by[8] == 2, "a busy step drains at settle: %d, %d", sc.drained_by[7],
          sc.drained_by[8]);
    /* a stop asked after quiet step 5, read by busy step 6: acted on there with its own sums */
    memset(&sc, 0, sizeof sc);
    sc.defers = 1;
    all_rest_but(&sc, 6);
    sc.raiser = 0;
    sc.raise_at = 5;
    sc.what = 1;
    run_schedule(c, &sc);
    CHECK(sc.stop_at == 6, "the stop at step 6 on every rank (at %d)", sc.stop_at);
    /* a save asked after busy step 7 acts at once even where the strategy defers */
    memset(&sc, 0, sizeof sc);
    sc.defers = 1;
    all_rest_but(&sc, 7);
    sc.raiser = world - 1;
    sc.raise_at = 7;
    run_schedule(c, &sc);
    CHECK(sc.save_at[0] == 7 && sc.save_at[1] == NOT, "saved at busy step 7 (at %d, %d)", sc.save_at[0],
          sc.save_at[1]);
    /* a time limit asked after the last step, quiet: in flight at the end, waited for */
    memset(&sc, 0, sizeof sc);
    sc.defers = 1;
    all_rest_but(&sc, NOT);
    sc.raiser = 0;
    sc.raise_at = STEPS - 1;
    sc.what = 2;
    run_schedule(c, &sc);
    CHECK(sc.time_at == NOT, "asked after the last quiet step: never acted on (at %d)", sc.time_at);
}

static void norm_shares_are_summed(shoal_comm *c, void *arg)
{
    (void)arg;
    int world = shoal_comm_world(c), rank = shoal_comm_rank(c);
    fake f;
    sh_strategy s;
    strategy_over(c, &f, &s, 1);
    sh_agree a;
    sh_agree_begin(&a, &s);
    CHECK(s.may_defer == 1, "a strategy that can defer over %d ranks may", world);
    CHECK(sh_agree_settle(&a, 0) == SHOAL_OK, "settle");
    sh_agree_votes v = {.grad_sq = rank + 1.0};
    CHECK(sh_agree_vote(&a, &v, NULL) == SHOAL_OK, "vote");
    CHECK(v.grad_sq == world * (world + 1) / 2.0, "the shares' sum %g", v.grad_sq);
    CHECK(!v.save && !v.stop && !v.out_of_time, "nothing asked");
    sh_agree_votes none = {.grad_sq = -1};
    CHECK(sh_agree_settle(&a, 0) == SHOAL_OK && sh_agree_vote(&a, &none, NULL) == SHOAL_OK, "vote");
    CHECK(none.grad_sq == -1, "no shares: none (%g)", none.grad_sq);
    CHECK(sh_agree_end(&a) == SHOAL_OK, "end");
}

static void an_error_keeps_its_message(shoal_comm *c, void *arg)
{
    (void)arg;
    fake f;
    sh_strategy s;
    strategy_over(c, &f, &s, 1);
    sh_agree a;
    sh_agree_begin(&a, &s);
    CHECK(sh_agree_settle(&a, 1) == SHOAL_OK, "settle");
    sh_agree_votes v = {.grad_sq = -1};
    CHECK(sh_agree_vote(&a, &v, NULL) == SHOAL_OK && a.req != NULL, "a quiet step's sums in flight");
    shoal_result rc = SH_FAIL(SHOAL_ERR_INVALID, "the step failed here");
    sh_agree_abandon(&a, rc);
    CHECK(a.req == NULL && f.drains == 1 && s.may_defer == 0, "waited, drained, off (%d drains)", f.drains);
    CHECK(strstr(shoal_last_error_message(), "the step failed here") != NULL, "message kept: %s",
          shoal_last_error_message());
}

static void alone_acts_on_its_own(void)
{
    fake f;
    sh_strategy s;
    memset(&f, 0, sizeof f);
    memset(&s, 0, sizeof s);
    f.defers = 1;
    s.ops = &fake_ops;
    s.impl = &f;
    s.world = s.job_world = 1;
    sh_agree a;
    sh_agree_begin(&a, &s);
    CHECK(!a.on && s.may_defer == 0, "one rank neither agrees nor defers");
    volatile sig_atomic_t flag = 1;
    CHECK(sh_agree_settle(&a, 1) == SHOAL_OK, "settle");
    sh_agree_votes v = {.save = 1, .stop = 0, .grad_sq = 2.5};
    CHECK(sh_agree_vote(&a, &v, &flag) == SHOAL_OK, "vote");
    CHECK(v.save && !v.stop && v.grad_sq == 2.5 && flag == 0, "its own requests, the flag cleared");
    CHECK(f.drains == 1, "and every step drains (%d)", f.drains);
    CHECK(sh_agree_end(&a) == SHOAL_OK, "end");
}

/* Each case on 2 and 4 ranks over socket pairs, and on 3 over TCP. */
static void on_ranks(sh_test_rank_fn fn)
{
    sh_test_ranks_opts pairs = {.links = SH_TEST_SOCKETPAIR, .deadline_s = 60};
    sh_test_ranks_opts tcp = {.links = SH_TEST_REAL, .transport = "tcp", .deadline_s = 60};
    CHECK(RUN_RANKS(2, &pairs, fn, NULL) == 0, "2 ranks");
    CHECK(RUN_RANKS(4, &pairs, fn, NULL) == 0, "4 ranks");
    CHECK(RUN_RANKS(3, &tcp, fn, NULL) == 0, "3 ranks over tcp");
}

static void acts_at_once_without_deferral(void) { on_ranks(at_once_without_deferral); }
static void acts_one_step_late_after_a_quiet_step(void) { on_ranks(one_step_late_after_a_quiet_step); }
static void sums_the_norm_shares(void) { on_ranks(norm_shares_are_summed); }
static void abandon_keeps_the_error(void) { on_ranks(an_error_keeps_its_message); }

int main(void)
{
    check_begin("test_agree", 120);
    RUN(alone_acts_on_its_own);
    RUN(acts_at_once_without_deferral);
    RUN(acts_one_step_late_after_a_quiet_step);
    RUN(sums_the_norm_shares);
    RUN(abandon_keeps_the_error);
    return check_end();
}
