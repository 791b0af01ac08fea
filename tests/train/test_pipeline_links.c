/* test_pipeline_links.c — proves that routes and shortcuts may cross a pipeline stage
 * boundary (src/train/mp/pipeline.c's links, src/nn/net_cut.c's held and sent outputs):
 * with the cut forced by stage= keys across [shortcut] from= and [route] layers= (a stage's
 * input read again further on, a stage's own output sent on as well as read by its layers, an
 * output passed through a middle stage, a stage whose first layer does not read its input),
 * 2 and 3 stages with SGD and Adam (and 2 replicas of 3 stages) match one process with the
 * same batch within 1e-5 after 50 steps, each rank holding only its stage's parameters;
 * checkpoints written under such a pipeline resume in one process and the other way round;
 * the planner cuts across routes.
 * Not here: the pipeline without links (test_pipeline.c), the CLI (tests/cli/test_train_pipeline.c). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

static char dir[256];
enum { STEPS = 50, GLOBAL_BATCH = 16 };

/* A CNN: layer 4 adds layer 0 back ([shortcut] from=0), layer 5 joins layers 4 and 1. */
static const char *const conv_head =
    "[net]\nbatch=16\nwidth=8\nheight=8\nchannels=1\nlearning_rate=0.05\nmomentum=0.9\ndecay=0.0005\n";
static const char *const conv_layers[] = {
    "[convolutional]\nfilters=4\nsize=3\nstride=1\npad=1\nactivation=relu\n",
    "[convolutional]\nfilters=4\nsize=3\nstride=1\npad=1\nactivation=leaky\n",
    "[convolutional]\nfilters=4\nsize=3\nstride=1\npad=1\nactivation=relu\n",
    "[convolutional]\nfilters=4\nsize=3\nstride=1\npad=1\nactivation=relu\n",
    "[shortcut]\nfrom=0\nactivation=linear\n",
    "[route]\nlayers=-1,-4\n",
    "[maxpool]\nsize=2\nstride=2\n",
    "[connected]\noutput=4\nactivation=linear\n",
    "[softmax]\n",
    "[cost]\n",
    NULL};

/* An MLP with Adam: layer 3 reads only layer 0 (so a stage starting there does not read its
 * input), layer 5 joins layers 4 and 1. */
static const char *const mlp_head = "[net]\nbatch=16\nwidth=8\nheight=8\nchannels=1\nlearning_rate=0.002\nadam=1\n"
                                    "decay=0.0005\n";
static const char *const mlp_layers[] = {
    "[connected]\noutput=32\nactivation=relu\n",
    "[connected]\noutput=24\nactivation=relu\n",
    "[connected]\noutput=24\nactivation=leaky\n",
    "[route]\nlayers=-3\n",
    "[connected]\noutput=16\nactivation=relu\n",
    "[route]\nlayers=-1,-4\n",
    "[connected]\noutput=4\nactivation=linear\n",
    "[softmax]\n",
    "[cost]\n",
    NULL};

/* Write NAME.cfg with stage=k+1 on layer cuts[k] (and stage=0 on layer 0 when any), into path. */
static int write_cfg(const char *name, const char *head, const char *const *layers, const int *cuts, int ncuts,
                     char *path, size_t path_nbytes)
{
    char text[4096];
    size_t len = (size_t)snprintf(text, sizeof text, "%s", head);
    for (int i = 0; layers[i]; i++) {
        len += (size_t)snprintf(text + len, sizeof text - len, "\n%s", layers[i]);
        if (ncuts && i == 0) len += (size_t)snprintf(text + len, sizeof text - len, "stage=0\n");
        for (int k = 0; k < ncuts; k++)
            if (cuts[k] == i) len += (size_t)snprintf(text + len, sizeof text - len, "stage=%d\n", k + 1);
    }
    snprintf(path, path_nbytes, "%s/%s.cfg", dir, name);
    return tiny_write_file(dir, strrchr(path, '/') + 1, text);
}

/* The shared options (a test evaluation each epoch), seed 7. */
static void opts_for(sh_train_opts *o, const char *c, int batch, int64_t steps)
{
    sh_test_train_opts(o, c, dir, batch, steps, 7);
}

static void run_layout(const char *name, const char *head, const char *const *layers, const int *cuts, int ncuts,
                       int micro, int replicas)
{
    char path[600];
    CHECK(write_cfg(name, head, layers, cuts, ncuts, path, sizeof path) == 0, "cannot write %s", name);
    sh_test_pipe_arg a = {path, ncuts + 1, micro, STEPS, NULL, NULL, NULL, NULL};
    sh_test_ranks_opts o = {.links = SH_TEST_REAL, .deadline_s = 120};
    RUN_RANKS((ncuts + 1) * replicas, &o, sh_test_pipe_exact_job, &a);
}

/* Cut before layer 3: layers 0 (the shortcut's) and 1 (the route's) cross with layer 2;
 * layer 0 is also read by stage 0's layer 1. */
static void t_two_stages_sgd_shortcut_and_route_across(void)
{
    run_layout("conv2", conv_head, conv_layers, (const int[]){3}, 1, 4, 1);
}

/* Stages [0], [1, 2], [3 ...]: stage 1 sends its own input (layer 0) on, and layer 1, which
 * its layer 2 also reads. */
static void t_three_stages_sgd_input_sent_on(void)
{
    run_layout("conv3a", conv_head, conv_layers, (const int[]){1, 3}, 2, 8, 1);
}

/* Stages [0, 1], [2], [3 ...]: stage 1 passes layer 0's output through untouched. */
static void t_three_stages_sgd_output_passed_through(void)
{
    run_layout("conv3b", conv_head, conv_layers, (const int[]){2, 3}, 2, 4, 1);
}

/* Cut before layer 3, which reads only layer 0: stage 1 does not read its input (layer 2). */
static void t_two_stages_adam_stage_skips_its_input(void)
{
    run_layout("mlp2", mlp_head, mlp_layers, (const int[]){3}, 1, 4, 1);
}

/* Stages [0 .. 2], [3, 4], [5 ...]: layer 1 passes through stage 1 to the route in stage 2. */
static void t_three_stages_adam_route_two_stages_on(void)
{
    run_layout("mlp3", mlp_head, mlp_layers, (const int[]){3, 5}, 2, 8, 1);
}

/* 2 replicas of 3 stages, stage 1 passing layer 1 on: each stage's replicas average. */
static void t_three_stages_two_replicas_match(void)
{
    run_layout("mlp3r", mlp_head, mlp_layers, (const int[]){3, 5}, 2, 2, 2);
}

/* A checkpoint written by a pipeline cut across routes resumes in one process, and one
 * process's in that pipeline: both end where one process that never stopped does. */
static void t_checkpoints_cross_layouts(void)
{
    char path[600], ckpt_one[700], ckpt_pipe[700];
    CHECK(write_cfg("mlpck", mlp_head, mlp_layers, (const int[]){3, 5}, 2, path, sizeof path) == 0, "cfg");
    snprintf(ckpt_one, sizeof ckpt_one, "%s/one.ckpt", dir);
    snprintf(ckpt_pipe, sizeof ckpt_pipe, "%s/pipe.ckpt", dir);
    sh_train_opts so, ro;
    opts_for(&so, path, GLOBAL_BATCH, STEPS / 2);
    so.eval_each_epoch = 0;
    so.save_path = ckpt_one;
    opts_for(&ro, path, GLOBAL_BATCH, STEPS);
    ro.eval_each_epoch = 0;
    sh_test_pipe_arg resume = {path, 3, 4, STEPS, ckpt_one, NULL, NULL, NULL};
    sh_test_pipe_arg first = {path, 3, 4, STEPS / 2, NULL, ckpt_pipe, NULL, NULL};
    check_checkpoints_cross("pipeline across routes", &so, sh_test_pipe_exact_job, 3, &resume, 3, &first, &ro, ckpt_pipe, 0);
}

/* Where a route crosses the net may be cut, and the balanced plan may do it; links are
 * counted and listed; only [cost] refuses a cut. */
static void t_plan_cuts_across_routes(void)
{
    char path[600];
    CHECK(write_cfg("plan", conv_head, conv_layers, NULL, 0, path, sizeof path) == 0, "cfg");
    sh_net *n = NULL;
    CHECK(sh_net_load(path, 1, 1, &n) == SHOAL_OK, "%s", shoal_last_error_message());
    if (!n) return;
    int links[16];
    CHECK(!sh_net_cut_ok(n, 3) && sh_net_can_cut(n, 3), "cut before layer 3: crossed by routes, allowed");
    CHECK(sh_net_cut_links(n, 3, links) == 2 && links[0] == 0 && links[1] == 1, "links of the cut before 3");
    CHECK(sh_net_cut_links(n, 1, links) == 0 && sh_net_crosses(n, 0, 1) && sh_net_crosses(n, 0, 4) &&
              !sh_net_crosses(n, 0, 5),
          "layer 0 is read by layer 4 last");
    CHECK(!sh_net_can_cut(n, 9), "a cut before [cost]");
    int cuts[12];
    /* 10 layers, 8 places to cut (all but before layer 0 and [cost]): 9 stages */
    CHECK(sh_pipe_plan(n, 9, cuts) == SHOAL_OK, "9 stages: %s", shoal_last_error_message());
    CHECK(sh_pipe_plan(n, 10, cuts) == SHOAL_ERR_INVALID && strstr(shoal_last_error_message(), "at most 9"),
          "10 stages: %s", shoal_last_error_message());
    CHECK(sh_pipe_plan(n, 3, cuts) == SHOAL_OK, "%s", shoal_last_error_message());
    int crossed = 0;
    for (int k = 1; k < 3; k++) crossed += sh_net_cut_links(n, cuts[k], NULL);
    CHECK(crossed > 0, "3 balanced stages (cuts %d, %d) cross no route: the four convolutions would not spread",
          cuts[1], cuts[2]);
    sh_net_destroy(n);
    /* a middle part [2, 3): holds layer 0 (passed through), takes layer 1 as its input, and
     * sends layers 0, 1 and 2 on; it holds no parameters but its own layer's */
    sh_cfg *cfg = NULL;
    sh_net *mid = NULL, *last = NULL;
    CHECK(sh_cfg_load(path, &cfg) == SHOAL_OK, "%s", shoal_last_error_message());
    CHECK(cfg && sh_net_create_part(cfg, 4, 7, 2, 3, &mid) == SHOAL_OK, "%s", shoal_last_error_message());
    CHECK(cfg && sh_net_create_part(cfg, 4, 7, 3, -1, &last) == SHOAL_OK, "%s", shoal_last_error_message());
    if (mid && last) {
        CHECK(sh_net_part_holds(mid, 0) && !sh_net_part_holds(mid, 1) && !sh_net_part_holds(mid, 2),
              "the middle part holds layer 0 only");
        CHECK(sh_net_part_sends(mid, 0) && sh_net_part_sends(mid, 1) && sh_net_part_sends(mid, 2),
              "the middle part sends layers 0, 1, 2");
        CHECK(sh_net_nparams(mid) == 4 * 4 * 9 + 4, "the middle part holds %zu parameters", sh_net_nparams(mid));
        CHECK(sh_net_part_holds(last, 0) && sh_net_part_holds(last, 1) && !sh_net_part_sends(last, 5),
              "the last part holds layers 0 and 1 and sends nothing");
    }
    sh_net_destroy(last);
    sh_net_destroy(mid);
    sh_cfg_destroy(cfg);
}

/* The balanced plan of 3 stages with no keys (it cuts across a route) matches one process. */
static void t_balanced_three_stages_match(void)
{
    char path[600];
    CHECK(write_cfg("balanced", conv_head, conv_layers, NULL, 0, path, sizeof path) == 0, "cfg");
    sh_test_pipe_arg a = {path, 3, 4, STEPS, NULL, NULL, NULL, NULL};
    sh_test_ranks_opts o = {.links = SH_TEST_REAL, .deadline_s = 120};
    RUN_RANKS(3, &o, sh_test_pipe_exact_job, &a);
}

int main(void)
{
    check_begin("test_pipeline_links", 300);
    if (tiny_make_dir(dir, sizeof dir)) {
        fprintf(stderr, "cannot write the test data\n");
        return 1;
    }
    sh_test_pipe_data_dir = dir;
    RUN(t_plan_cuts_across_routes);
    RUN(t_two_stages_sgd_shortcut_and_route_across);
    RUN(t_three_stages_sgd_input_sent_on);
    RUN(t_three_stages_sgd_output_passed_through);
    RUN(t_two_stages_adam_stage_skips_its_input);
    RUN(t_three_stages_adam_route_two_stages_on);
    RUN(t_balanced_three_stages_match);
    RUN(t_three_stages_two_replicas_match);
    RUN(t_checkpoints_cross_layouts);
    tiny_remove_dir(dir);
    return check_end();
}
