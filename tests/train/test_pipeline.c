/* test_pipeline.c — proves pipeline parallelism (src/train/mp/pipeline.c, and the
 * net's parts in src/nn/net.c) with the real trainer and real processes: 2 and 3 stages,
 * and 2 stages x 2 replicas on 4 ranks, match one process with the same global batch after
 * 50 steps (SGD with momentum and decay, and Adam); each rank allocates only its stage's
 * parameters, gradients and optimizer state; the cut follows stage= keys or balances the
 * cost; impossible layouts get one clear error; ranks started with different layouts stop
 * at start-up naming who differs; a killed stage stops its neighbours, naming it;
 * checkpoints and Darknet's .weights files cross one process and pipelines both ways;
 * SHOAL_PIPE_DEFER=0 (weight gradients in each micro-batch's backward) matches too, and so
 * do stages with and without packed weights (SHOAL_PIPE_PACK). */
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "lib/layout.h"
#include "lib/layout_checks.h"
#include "lib/pipeline_job.h"
#include "lib/ranks.h"
#include "lib/reference.h"
#include "nn/net.h"
#include "shoal/comm.h"
#include "train/mp/pipeline.h"
#include "train/tiny_data.h"
#include "train/trainer.h"

static char dir[256], sgd_cfg[512], adam_cfg[512], keyed_cfg[512], bn_cfg[512];
enum { STEPS = 50, GLOBAL_BATCH = 16 };

/* No dropout, no batch norm: the pipeline must reproduce one process. */
static const char sgd_text[] =
    "[net]\nbatch=16\nwidth=8\nheight=8\nchannels=1\n"
    "learning_rate=0.05\nmomentum=0.9\ndecay=0.0005\n"
    "\n[convolutional]\nfilters=4\nsize=3\nstride=1\npad=1\nactivation=relu\n"
    "\n[maxpool]\nsize=2\nstride=2\n"
    "\n[connected]\noutput=24\nactivation=relu\n"
    "\n[connected]\noutput=16\nactivation=leaky\n"
    "\n[connected]\noutput=4\nactivation=linear\n"
    "\n[softmax]\n\n[cost]\n";

static const char adam_text[] =
    "[net]\nbatch=16\nwidth=8\nheight=8\nchannels=1\n"
    "learning_rate=0.002\nadam=1\ndecay=0.0005\n"
    "\n[connected]\noutput=32\nactivation=relu\n"
    "\n[connected]\noutput=24\nactivation=relu\n"
    "\n[connected]\noutput=4\nactivation=linear\n"
    "\n[softmax]\n\n[cost]\n";

/* Batch norm in stage 0 (its statistics are in the whole model's too); one micro-batch a
 * step, so its statistics are one process's. */
static const char bn_text[] =
    "[net]\nbatch=16\nwidth=8\nheight=8\nchannels=1\n"
    "learning_rate=0.05\nmomentum=0.9\ndecay=0.0005\n"
    "\n[convolutional]\nbatch_normalize=1\nfilters=4\nsize=3\nstride=1\npad=1\nactivation=relu\n"
    "\n[maxpool]\nsize=2\nstride=2\n"
    "\n[connected]\noutput=24\nactivation=relu\n"
    "\n[connected]\noutput=4\nactivation=linear\n"
    "\n[softmax]\n\n[cost]\n";

/* Stages placed by hand: the first connected layer alone in stage 0. */
static const char keyed_text[] =
    "[net]\nbatch=16\nwidth=8\nheight=8\nchannels=1\nlearning_rate=0.05\n"
    "\n[connected]\noutput=32\nactivation=relu\nstage=0\n"
    "\n[connected]\noutput=24\nactivation=relu\nstage=1\n"
    "\n[connected]\noutput=4\nactivation=linear\n"
    "\n[softmax]\n\n[cost]\n";

static void opts_for(sh_train_opts *o, const char *c, int batch, int64_t steps)
{
    sh_test_train_opts(o, c, dir, batch, steps, 7);
    o->eval_each_epoch = 0;
}

static void t_two_stages_sgd_match_one_process(void)
{
    sh_test_pipe_arg a = {sgd_cfg, 2, 4, STEPS, NULL, NULL, NULL, NULL};
    sh_test_ranks_opts o = {.links = SH_TEST_REAL, .deadline_s = 120};
    RUN_RANKS(2, &o, sh_test_pipe_exact_job, &a);
}

static void t_two_stages_adam_match_one_process(void)
{
    sh_test_pipe_arg a = {adam_cfg, 2, 4, STEPS, NULL, NULL, NULL, NULL};
    sh_test_ranks_opts o = {.links = SH_TEST_REAL, .deadline_s = 120};
    RUN_RANKS(2, &o, sh_test_pipe_exact_job, &a);
}

static void t_three_stages_eight_micro_batches_match(void)
{
    sh_test_pipe_arg a = {sgd_cfg, 3, 8, STEPS, NULL, NULL, NULL, NULL};
    sh_test_ranks_opts o = {.links = SH_TEST_REAL, .deadline_s = 120};
    RUN_RANKS(3, &o, sh_test_pipe_exact_job, &a);
}

/* SHOAL_PIPE_DEFER=1 (the default) leaves every [connected] layer's weight gradients of the
 * stage for after its last backward, 0 none; in the environment before the ranks start. */
static void defers_job(shoal_comm *c, void *arg)
{
    int want_on = *(const int *)arg, r = shoal_comm_rank(c);
    sh_pipe_opts po = {adam_cfg, 2, 4, GLOBAL_BATCH, 7};
    sh_strategy *st = NULL;
    sh_net *net = NULL;
    CHECK(sh_strategy_pipeline_create(c, &po, &st, &net) == SHOAL_OK, "%s", shoal_last_error_message());
    if (!st) return;
    int lo, hi, dense = 0;
    sh_net_part(net, &lo, &hi);
    for (int i = lo; i < hi; i++) dense += sh_net_layer_defers(net, i);
    sh_pipe_profile prof;
    sh_strategy_pipeline_profile(st, &prof);
    CHECK(dense > 0, "rank %d: stage %d-%d has no [connected] layer to defer", r, lo, hi - 1);
    CHECK(prof.deferred_layers == (want_on ? dense : 0), "rank %d: %d of %d layers defer, SHOAL_PIPE_DEFER=%d", r,
          prof.deferred_layers, dense, want_on);
    sh_strategy_destroy(st);
    sh_net_destroy(net);
}

/* Without deferred weight gradients (each micro-batch's backward computes them, summed over
 * the micro-batches) the stages still match one process. */
static void t_without_deferral_match_one_process(void)
{
    sh_test_ranks_opts o = {.links = SH_TEST_REAL, .deadline_s = 120};
    int on = 1, off = 0;
    RUN_RANKS(2, &o, defers_job, &on);
    setenv("SHOAL_PIPE_DEFER", "0", 1);
    RUN_RANKS(2, &o, defers_job, &off);
    sh_test_pipe_arg a = {sgd_cfg, 2, 4, STEPS, NULL, NULL, NULL, NULL};
    RUN_RANKS(2, &o, sh_test_pipe_exact_job, &a);
    sh_test_pipe_arg b = {adam_cfg, 3, 8, STEPS, NULL, NULL, NULL, NULL};
    RUN_RANKS(3, &o, sh_test_pipe_exact_job, &b);
    unsetenv("SHOAL_PIPE_DEFER");
}

/* SHOAL_PIPE_PACK=0 (no packed weights: the trainer applies the update, the products are
 * gemm_small.c's or OpenBLAS's, as the default chooses for micro-batches of 24-48 rows under
 * the older rules), =1 (both copies packed), =3 (W alone: dX on it, forward on the layers'
 * own products, as the default chooses from 16 rows under the newer) all match one
 * process. */
static void t_packed_or_not_match_one_process(void)
{
    sh_test_ranks_opts o = {.links = SH_TEST_REAL, .deadline_s = 120};
    const char *modes[] = {"0", "1", "3"};
    for (int k = 0; k < 3; k++) {
        setenv("SHOAL_PIPE_PACK", modes[k], 1);
        sh_test_pipe_arg a = {sgd_cfg, 2, 4, STEPS, NULL, NULL, NULL, NULL};
        RUN_RANKS(2, &o, sh_test_pipe_exact_job, &a);
        sh_test_pipe_arg b = {adam_cfg, 3, 8, STEPS, NULL, NULL, NULL, NULL};
        RUN_RANKS(3, &o, sh_test_pipe_exact_job, &b);
    }
    unsetenv("SHOAL_PIPE_PACK");
}

static char ckpt_one[600], ckpt_pipe[600], dn_one[600], dn_pipe[600];

/* A checkpoint written by one process resumes in a pipeline, and one written by a
 * pipeline in one process: both end where one process that never stopped does. */
static void t_checkpoints_cross_layouts(void)
{
    sh_train_opts so, ro;
    opts_for(&so, adam_cfg, GLOBAL_BATCH, STEPS / 2);
    so.save_path = ckpt_one;
    opts_for(&ro, adam_cfg, GLOBAL_BATCH, STEPS);
    sh_test_pipe_arg resume = {adam_cfg, 2, 4, STEPS, ckpt_one, NULL, NULL, NULL};
    sh_test_pipe_arg first = {adam_cfg, 2, 4, STEPS / 2, NULL, ckpt_pipe, NULL, NULL};
    check_checkpoints_cross("pipeline", &so, sh_test_pipe_exact_job, 2, &resume, 2, &first, &ro, ckpt_pipe, 0);
}

/* Darknet's file: one process's loaded into 2 replicas of 2 stages, 2 stages' written whole
 * (the checkpoint's parts, bitwise; one process's within rounding), batch norm's statistics
 * too, and loaded into 3 stages and into one process; each run from a file ends where one
 * process from it does. */
static void t_darknet_weights_cross_layouts(void)
{
    sh_test_ranks_opts o = {.links = SH_TEST_REAL, .deadline_s = 120};
    sh_train_opts so;
    opts_for(&so, sgd_cfg, GLOBAL_BATCH, STEPS / 2);
    so.save_darknet_path = dn_one;
    CHECK(sh_test_write_one(&so) == SHOAL_OK, "%s", shoal_last_error_message());
    sh_test_pipe_arg from_one = {sgd_cfg, 2, 2, STEPS, NULL, NULL, dn_one, NULL};
    RUN_RANKS(4, &o, sh_test_pipe_exact_job, &from_one);
    sh_test_pipe_arg write = {bn_cfg, 2, 1, STEPS, NULL, NULL, NULL, dn_pipe};
    RUN_RANKS(2, &o, sh_test_pipe_exact_job, &write);
    sh_test_pipe_arg from_pipe = {bn_cfg, 3, 1, STEPS, NULL, NULL, dn_pipe, NULL};
    RUN_RANKS(3, &o, sh_test_pipe_exact_job, &from_pipe);
}

static void t_two_stages_two_replicas_match(void)
{
    sh_test_pipe_arg a = {adam_cfg, 2, 2, STEPS, NULL, NULL, NULL, NULL};
    sh_test_ranks_opts o = {.links = SH_TEST_REAL, .deadline_s = 120};
    RUN_RANKS(4, &o, sh_test_pipe_exact_job, &a);
    sh_test_pipe_arg b = {sgd_cfg, 2, 4, STEPS, NULL, NULL, NULL, NULL};
    RUN_RANKS(4, &o, sh_test_pipe_exact_job, &b);
}

/* The cut: stage= keys where given, else the costs balanced with cuts only where allowed. */
static void t_plan(void)
{
    int cuts[4];
    sh_net *n = NULL;
    CHECK(sh_net_load(keyed_cfg, 1, 1, &n) == SHOAL_OK, "%s", shoal_last_error_message());
    CHECK(sh_pipe_plan(n, 2, cuts) == SHOAL_OK && cuts[0] == 0 && cuts[1] == 1 && cuts[2] == 5,
          "keyed plan %d %d %d", cuts[0], cuts[1], cuts[2]);
    CHECK(sh_pipe_plan(n, 3, cuts) == SHOAL_ERR_INVALID && strstr(shoal_last_error_message(), "--pipeline 2"),
          "keys name 2 stages: %s", shoal_last_error_message());
    sh_net_destroy(n);
    CHECK(sh_net_load(sgd_cfg, 1, 1, &n) == SHOAL_OK, "%s", shoal_last_error_message());
    CHECK(sh_pipe_plan(n, 2, cuts) == SHOAL_OK, "%s", shoal_last_error_message());
    /* conv (8x8x4 outputs, 36 products each) against the connected layers (64x24 + 24x16 +
     * 16x4): the conv and pool on one side */
    CHECK(cuts[1] >= 1 && cuts[1] <= 3, "balanced cut at %d", cuts[1]);
    /* [cost] cannot start a stage: 7 layers, 5 places to cut */
    CHECK(sh_pipe_plan(n, 7, cuts) == SHOAL_ERR_INVALID && strstr(shoal_last_error_message(), "at most 6"),
          "7 stages: %s", shoal_last_error_message());
    CHECK(sh_pipe_plan(n, 9, cuts) == SHOAL_ERR_INVALID && strstr(shoal_last_error_message(), "only 7 layers"),
          "9 stages: %s", shoal_last_error_message());
    sh_net_destroy(n);
}

/* A part's blocks hold only its layers, with the whole net's initial values. */
static void t_part_holds_its_layers_only(void)
{
    sh_cfg *cfg = NULL;
    CHECK(sh_cfg_load(sgd_cfg, &cfg) == SHOAL_OK, "%s", shoal_last_error_message());
    sh_net *whole = NULL, *a = NULL, *b = NULL;
    CHECK(sh_net_create_part(cfg, 4, 3, 0, -1, &whole) == SHOAL_OK, "%s", shoal_last_error_message());
    CHECK(sh_net_create_part(cfg, 4, 3, 0, 2, &a) == SHOAL_OK, "%s", shoal_last_error_message());
    CHECK(sh_net_create_part(cfg, 4, 3, 2, -1, &b) == SHOAL_OK, "%s", shoal_last_error_message());
    if (whole && a && b) {
        CHECK(sh_net_nparams(a) + sh_net_nparams(b) == sh_net_nparams(whole), "%zu + %zu != %zu",
              sh_net_nparams(a), sh_net_nparams(b), sh_net_nparams(whole));
        CHECK(!memcmp(sh_net_params(a), sh_net_params(whole), sh_net_nparams(a) * sizeof(float)),
              "stage 0's weights differ from the whole net's");
        CHECK(!memcmp(sh_net_params(b), sh_net_params(whole) + sh_net_nparams(a), sh_net_nparams(b) * sizeof(float)),
              "stage 1's weights differ from the whole net's");
        CHECK(sh_net_part_input_count(b) == 64 && sh_net_part_output_count(a) == 64, "part shapes %zu %zu",
              sh_net_part_input_count(b), sh_net_part_output_count(a));
    }
    sh_net *bad = NULL;
    CHECK(sh_net_create_part(cfg, 4, 3, 6, -1, &bad) == SHOAL_ERR_INVALID && !bad &&
              strstr(shoal_last_error_message(), "cannot be cut before layer 6"),
          "a cut before [cost]: %s", shoal_last_error_message());
    sh_net_destroy(b);
    sh_net_destroy(a);
    sh_net_destroy(whole);
    sh_cfg_destroy(cfg);
}

typedef struct {
    int stages, micro;
    const char *want;
} bad_arg;

static void bad_layout_job(shoal_comm *c, void *arg)
{
    const bad_arg *a = arg;
    sh_pipe_opts po = {sgd_cfg, a->stages, a->micro, 0, 7};
    sh_strategy *st = NULL;
    sh_net *net = NULL;
    shoal_result rc = sh_strategy_pipeline_create(c, &po, &st, &net);
    CHECK(rc == SHOAL_ERR_INVALID && !st && !net, "rank %d: rc %d", shoal_comm_rank(c), rc);
    CHECK(strstr(shoal_last_error_message(), a->want) != NULL, "wanted \"%s\" in: %s", a->want,
          shoal_last_error_message());
}

/* The last rank was started with another micro-batch count: every rank stops, naming it. */
static void mismatched_job(shoal_comm *c, void *arg)
{
    (void)arg;
    int r = shoal_comm_rank(c), n = shoal_comm_world(c);
    sh_pipe_opts po = {sgd_cfg, 2, r == n - 1 ? 2 : 4, 0, 7};
    sh_strategy *st = NULL;
    sh_net *net = NULL;
    shoal_result rc = sh_strategy_pipeline_create(c, &po, &st, &net);
    CHECK(rc == SHOAL_ERR_MISMATCH && !st && !net, "rank %d: rc %d", r, rc);
    CHECK(strstr(shoal_last_error_message(), "rank 1 runs --pipeline 2 --micro-batches 2"), "%s",
          shoal_last_error_message());
}

static void t_impossible_layouts_are_refused(void)
{
    sh_test_ranks_opts mo = {.links = SH_TEST_REAL, .deadline_s = 60};
    RUN_RANKS(2, &mo, mismatched_job, NULL);
    sh_test_ranks_opts o = {.links = SH_TEST_REAL, .deadline_s = 60};
    bad_arg not_divisible = {2, 1, "does not divide the 3 ranks"};
    RUN_RANKS(3, &o, bad_layout_job, &not_divisible);
    bad_arg micro = {2, 3, "--micro-batches 3 does not divide the batch of 16"};
    RUN_RANKS(2, &o, bad_layout_job, &micro);
}

/* Stage 1 dies at step 3: stage 0, waiting for its gradients, stops naming it. */
static void killed_job(shoal_comm *c, void *arg)
{
    (void)arg;
    sh_pipe_opts po = {sgd_cfg, 2, 4, 0, 7};
    sh_strategy *st = NULL;
    sh_net *net = NULL;
    CHECK(sh_strategy_pipeline_create(c, &po, &st, &net) == SHOAL_OK, "%s", shoal_last_error_message());
    if (!st) return;
    sh_train_opts o;
    opts_for(&o, sgd_cfg, GLOBAL_BATCH, 20);
    o.strategy = st;
    const char *msg = check_stops_when_one_dies(c, &o, net, 20, 1, 3);
    CHECK(strstr(msg, "rank 1") != NULL, "the error names rank 1: %s", msg);
    sh_strategy_destroy(st);
}

static void t_killed_stage_stops_the_other(void)
{
    sh_test_ranks_opts o = {.links = SH_TEST_REAL, .deadline_s = 60, .timeout_ms = 5000, .dying_mask = 2};
    RUN_RANKS(2, &o, killed_job, NULL);
}

int main(void)
{
    check_begin("test_pipeline", 240);
    const sh_test_file files[] = {
        SH_TEST_FILE("sgd.cfg", sgd_text, sgd_cfg),       SH_TEST_FILE("adam.cfg", adam_text, adam_cfg),
        SH_TEST_FILE("keyed.cfg", keyed_text, keyed_cfg), SH_TEST_FILE("bn.cfg", bn_text, bn_cfg),
        SH_TEST_FILE("one.ckpt", NULL, ckpt_one),         SH_TEST_FILE("pipe.ckpt", NULL, ckpt_pipe),
        SH_TEST_FILE("one.weights", NULL, dn_one),        SH_TEST_FILE("pipe.weights", NULL, dn_pipe)};
    if (tiny_make_dir(dir, sizeof dir) || sh_test_files_write(dir, files, SH_TEST_NFILES(files))) {
        fprintf(stderr, "cannot write the test data\n");
        return 1;
    }
    sh_test_pipe_data_dir = dir;
    RUN(t_part_holds_its_layers_only);
    RUN(t_plan);
    RUN(t_two_stages_sgd_match_one_process);
    RUN(t_two_stages_adam_match_one_process);
    RUN(t_three_stages_eight_micro_batches_match);
    RUN(t_two_stages_two_replicas_match);
    RUN(t_without_deferral_match_one_process);
    RUN(t_packed_or_not_match_one_process);
    RUN(t_checkpoints_cross_layouts);
    RUN(t_darknet_weights_cross_layouts);
    RUN(t_impossible_layouts_are_refused);
    RUN(t_killed_stage_stops_the_other);
    tiny_remove_dir(dir);
    return check_end();
}
