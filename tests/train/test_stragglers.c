/* test_stragglers.c — proves src/train/dp/hogwild.c and dp/quorum.c at the strategy level,
 * ranks as real processes on one host with the steps interleaved on purpose: a hogwild rank
 * sees the other's update land in the shared weights and counts it as staleness; under a
 * quorum of one of two a fresh gradient makes the step at once, a late one is added to the
 * next step and its rank skips ahead; at F = 1 a rank that sends nothing stops the waiting
 * one after the timeout, naming it, and a dead one is named at once. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/err.h"
#include "check.h"
#include "lib/ranks.h"
#include "nn/net.h"
#include "train/dp/hogwild.h"
#include "train/dp/quorum.h"
#include "train/tiny_data.h"

static char dir[256], cfg[512];

typedef struct {
    sh_net *net;
    sh_optim *opt;
    sh_lr_policy lr;
    sh_strategy *s;
} rig;

/* The tiny mlp at batch 16, its optimizer and the strategy made by make, attached. */
static int rig_up(rig *g, shoal_comm *c, int quorum_of_half, double fraction)
{
    memset(g, 0, sizeof *g);
    if (sh_net_load(cfg, 16, 3, &g->net) != SHOAL_OK) return 0;
    int nr = 0;
    const sh_param_range *r = sh_net_param_ranges(g->net, &nr);
    if (sh_optim_create(&sh_net_get_config(g->net)->optim, sh_net_nparams(g->net), r, nr, &g->opt) != SHOAL_OK) return 0;
    g->lr = sh_net_get_config(g->net)->lr;
    shoal_result rc = quorum_of_half ? sh_strategy_quorum_create(c, 16, fraction, &g->s)
                                     : sh_strategy_hogwild_create(c, 16, &g->s);
    if (rc != SHOAL_OK) return 0;
    g->s->opt = g->opt;
    g->s->lr = &g->lr;
    rc = g->s->ops->attach(g->s, g->net);
    CHECK(rc == SHOAL_OK, "attach: %s", shoal_last_error());
    return rc == SHOAL_OK;
}

static void rig_down(rig *g)
{
    sh_strategy_destroy(g->s);
    sh_optim_destroy(g->opt);
    sh_net_destroy(g->net);
}

/* A step with gradient value v everywhere. */
static shoal_result step(rig *g, int64_t k, float v, int begin)
{
    if (begin) SH_TRY(g->s->ops->begin(g->s, k));
    float *grad = sh_net_grads(g->net);
    for (size_t i = 0; i < sh_net_nparams(g->net); i++) grad[i] = v;
    return g->s->ops->finish(g->s);
}

/* Rank 0 reads, rank 1 updates, rank 0 writes: rank 0 saw one update land in between. */
static void hogwild_rank(shoal_comm *c, void *arg)
{
    (void)arg;
    rig g;
    if (!rig_up(&g, c, 0, 0)) return;
    int me = shoal_comm_rank(c);
    const float *w = sh_net_params(g.net);
    float w0 = w[0];
    if (me == 0) CHECK_OK(g.s->ops->begin(g.s, 0));
    CHECK_OK(shoal_barrier(c));
    if (me == 1) CHECK_OK(step(&g, 0, 1.0f, 1));
    CHECK_OK(shoal_barrier(c));
    CHECK(w[0] != w0, "rank %d does not see rank 1's update in the shared weights", me);
    float w1 = w[0];
    CHECK_OK(shoal_barrier(c)); /* both have read w1 */
    if (me == 0) CHECK_OK(step(&g, 0, 1.0f, 0));
    CHECK_OK(g.s->ops->end(g.s));
    CHECK(w[0] < w1, "rank 0's update did not land after rank 1's: %g then %g", (double)w1, (double)w[0]);
    sh_hogwild_stats st;
    sh_strategy_hogwild_stats(g.s, &st);
    CHECK(st.updates == 2 && st.staleness_sum == 1 && st.staleness_max == 1,
          "updates %lld, staleness sum %g, max %lld: rank 0 passed over one update", (long long)st.updates,
          st.staleness_sum, (long long)st.staleness_max);
    rig_down(&g);
}

/* F = 0.5 over two ranks: a step needs one fresh gradient. */
static void quorum_rank(shoal_comm *c, void *arg)
{
    (void)arg;
    rig g;
    if (!rig_up(&g, c, 1, 0.5)) return;
    int me = shoal_comm_rank(c);
    g.s->steps_planned = 100;
    CHECK_OK(g.s->ops->begin(g.s, 0)); /* both read version 0 */
    CHECK_OK(shoal_barrier(c));
    if (me == 0) { /* fresh: the step is made at once, without rank 1 */
        CHECK_OK(step(&g, 0, 1.0f, 0));
        CHECK(g.s->job_steps == 1, "rank 0 after its step: job at %lld", (long long)g.s->job_steps);
    }
    CHECK_OK(shoal_barrier(c));
    if (me == 1) { /* late: added to the next step, and the rank skips to where the job is */
        CHECK_OK(step(&g, 0, 3.0f, 0));
        CHECK(g.s->job_steps == 1, "rank 1 after its late step: job at %lld", (long long)g.s->job_steps);
    }
    CHECK_OK(shoal_barrier(c));
    sh_quorum_stats st;
    sh_strategy_quorum_stats(g.s, &st);
    CHECK(st.updates == 1 && st.fresh == 1 && st.late == 1 && st.late_unused == 1, "after one step: %lld %lld %lld %lld",
          (long long)st.updates, (long long)st.fresh, (long long)st.late, (long long)st.late_unused);
    CHECK_OK(shoal_barrier(c));
    if (me == 0) CHECK_OK(step(&g, 1, 1.0f, 1)); /* takes rank 1's late gradient with it */
    CHECK_OK(g.s->ops->end(g.s));
    sh_strategy_quorum_stats(g.s, &st);
    CHECK(st.updates == 2 && st.late_unused == 0 && st.ranks == 1, "the late gradient was not added: %lld %lld",
          (long long)st.updates, (long long)st.late_unused);
    rig_down(&g);
}

/* F = 1: rank 1 never sends; rank 0 gives up after the timeout naming it. */
static void quorum_silent_rank(shoal_comm *c, void *arg)
{
    (void)arg;
    setenv("SHOAL_TIMEOUT", "1500", 1);
    rig g;
    if (!rig_up(&g, c, 1, 1.0)) return;
    int me = shoal_comm_rank(c);
    if (me == 0) {
        shoal_result rc = step(&g, 0, 1.0f, 1);
        CHECK(rc == SHOAL_ERR_TIMEOUT && strstr(shoal_last_error(), "no gradient from rank 1"), "%s: %s",
              shoal_result_name(rc), shoal_last_error());
    }
    CHECK_OK(shoal_barrier(c));
    rig_down(&g);
}

/* F = 1: rank 1 dies before sending; rank 0 names it well before the timeout. */
static void quorum_dead_rank(shoal_comm *c, void *arg)
{
    (void)arg;
    setenv("SHOAL_TIMEOUT", "60000", 1);
    rig g;
    if (!rig_up(&g, c, 1, 1.0)) return;
    if (shoal_comm_rank(c) == 1) _exit(0);
    shoal_result rc = step(&g, 0, 1.0f, 1);
    CHECK(rc == SHOAL_ERR_PEER && strstr(shoal_last_error(), "rank 1"), "%s: %s", shoal_result_name(rc),
          shoal_last_error());
    rig_down(&g);
}

int main(void)
{
    check_begin("test_stragglers", 180);
    if (tiny_make_dir(dir, sizeof dir) != 0) {
        CHECK(0, "cannot make the tiny dataset");
        return check_end();
    }
    snprintf(cfg, sizeof cfg, "%s/mlp.cfg", dir);
    sh_test_ranks_opts o = {.links = SH_TEST_REAL, .deadline_s = 60};
    RUN_RANKS(2, &o, hogwild_rank, NULL);
    RUN_RANKS(2, &o, quorum_rank, NULL);
    RUN_RANKS(2, &o, quorum_silent_rank, NULL);
    sh_test_ranks_opts dying = {.links = SH_TEST_REAL, .deadline_s = 60, .dying_mask = 2};
    RUN_RANKS(2, &dying, quorum_dead_rank, NULL);
    tiny_remove_dir(dir);
    return check_end();
}
