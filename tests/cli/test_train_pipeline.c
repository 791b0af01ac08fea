/* test_train_pipeline.c — proves `shoal train --pipeline S [--micro-batches M]` end to end
 * (cmd_train.c, src/train/job.c's pipeline layout): the layout is printed once at start-up;
 * a 2-stage pipeline ends with the accuracy one process reaches; --profile and --json give
 * every stage's forward, backward, bubble and communication; a checkpoint written by a
 * pipeline resumes in one process and the other way round; --save-darknet writes the whole
 * model and --weights reads it back into 2 stages; impossible layouts are one
 * clear usage error; a killed stage stops the job, named; routes across the cuts forced by
 * stage= keys are listed in the layout and train as one process does. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "check.h"
#include "lib/cli_layout_checks.h"
#include "lib/run.h"
#include "lib/tfrecord.h"
#include "train/tiny_data.h"

static char dir[256], out[1 << 20];

static const char deep_cfg[] =
    "[net]\nbatch=16\nwidth=8\nheight=8\nchannels=1\nlearning_rate=0.05\nmomentum=0.9\n"
    "\n[connected]\noutput=32\nactivation=relu\n"
    "\n[connected]\noutput=24\nactivation=relu\n"
    "\n[connected]\noutput=4\nactivation=linear\n"
    "\n[softmax]\n\n[cost]\n";

static const char keyed_cfg[] =
    "[net]\nbatch=16\nwidth=8\nheight=8\nchannels=1\nlearning_rate=0.05\n"
    "\n[connected]\noutput=32\nactivation=relu\nstage=0\n"
    "\n[connected]\noutput=4\nactivation=linear\nstage=2\n"
    "\n[softmax]\n\n[cost]\n";

/* Layer 3 reads layer 0 and layer 5 layers 4 and 1: the cuts before 3 and 5 are crossed. */
static const char routed_cfg[] =
    "[net]\nbatch=16\nwidth=8\nheight=8\nchannels=1\nlearning_rate=0.05\nmomentum=0.9\n"
    "\n[connected]\noutput=32\nactivation=relu\nstage=0\n"
    "\n[connected]\noutput=24\nactivation=relu\n"
    "\n[connected]\noutput=24\nactivation=leaky\n"
    "\n[route]\nlayers=-3\nstage=1\n"
    "\n[connected]\noutput=16\nactivation=relu\n"
    "\n[route]\nlayers=-1,-4\nstage=2\n"
    "\n[connected]\noutput=4\nactivation=linear\n"
    "\n[softmax]\n\n[cost]\n";

/* `ENV shoal train ARGS` in the run's directory, its output in out. */
static int run(const char *env, const char *args)
{
    return sh_test_shoal_in(dir, env, "train", args, out, sizeof out);
}

static void trains_like_one_process_and_prints_the_layout(void)
{
    double acc1, loss1;
    check_one_process_json(dir, "deep.cfg --data . --max-steps 30 --threads 1 --json", out, sizeof out, &acc1, &loss1);
    int rc = run("", "deep.cfg --data . -n 2 --pipeline 2 --micro-batches 4 --max-steps 30 --threads 1 --json --profile");
    CHECK(rc == 0, "pipeline: exit %d: %s", rc, out);
    CHECK(sh_test_count(out, "pipeline: 2 stages x 1 replica on 2 ranks, 4 micro-batches of 4 images") == 1,
          "layout line once: %s", out);
    CHECK(strstr(out, "stage 0: layers 0-") && strstr(out, "stage 1: layers "), "stages listed: %s", out);
    check_matches_one_process("pipeline", out, acc1, loss1);
    CHECK(sh_test_count(out, "\"bubble_share\":") == 2 && strstr(out, "\"stage\":1"), "JSON per stage: %s", out);
    CHECK(sh_test_count(out, "profile stage ") == 2 && strstr(out, "bubble"), "--profile per stage: %s", out);
}

/* The logged gradient norm is the whole model's, summed over the stages (and counted once
 * over the replicas): what one process with the same batch logs. */
static void gradient_norm_covers_every_stage(void)
{
    check_one_process_logs(dir, "deep.cfg", out, sizeof out);
    check_gradient_norm_is_whole(dir, "deep.cfg", "-n 2 --pipeline 2 --micro-batches 4", "g2", out, sizeof out);
    check_gradient_norm_is_whole(dir, "deep.cfg", "-n 4 --pipeline 2 --scaling strong --batch 16", "g4", out,
                                 sizeof out);
}

static void replicas_of_stages(void)
{
    int rc = run("", "deep.cfg --data . -n 4 --pipeline 2 --max-steps 10 --threads 1 --scaling strong --batch 16");
    CHECK(rc == 0, "exit %d: %s", rc, out);
    CHECK(strstr(out, "2 stages x 2 replicas on 4 ranks") && strstr(out, "ranks 0,2") && strstr(out, "ranks 1,3"),
          "layout of 2 x 2: %s", out);
}

static void checkpoints_cross_layouts(void)
{
    int rc = run("", "deep.cfg --data . -n 2 --pipeline 2 --max-steps 10 --threads 1 --save p.ckpt --quiet");
    CHECK(rc == 0, "exit %d: %s", rc, out);
    rc = run("", "deep.cfg --data . --max-steps 20 --threads 1 --resume p.ckpt --save one.ckpt");
    CHECK(rc == 0 && strstr(out, "steps 11..20"), "one process did not continue the pipeline's run: %s", out);
    rc = run("", "deep.cfg --data . -n 2 --pipeline 2 --max-steps 30 --threads 1 --resume one.ckpt");
    CHECK(rc == 0 && strstr(out, "steps 21..30"), "the pipeline did not continue one process's run: %s", out);
}

/* Stage 1 dies at step 5: stage 0 stops within SHOAL_TIMEOUT naming it. */
static void killed_stage_stops_the_job(void)
{
    check_killed_rank_stops_the_job(dir, "deep.cfg --data . -n 2 --pipeline 2 --max-steps 400 --threads 1 "
                                         "--debug-die-rank 1 --debug-die-step 5", 1, out, sizeof out);
    CHECK(strstr(out, "shoal: rank 0: ") && strstr(out, "rank 1"), "rank 0's error does not name rank 1: %s", out);
}

static void impossible_layouts_are_usage_errors(void)
{
    int rc = run("", "deep.cfg --data . -n 3 --pipeline 2");
    CHECK(rc == 2 && sh_test_count(out, "does not divide -n 3") == 1, "exit %d: %s", rc, out);
    rc = run("", "deep.cfg --data . --pipeline 2");
    CHECK(rc == 2 && strstr(out, "needs ranks"), "exit %d: %s", rc, out);
    rc = run("", "deep.cfg --data . -n 2 --micro-batches 2");
    CHECK(rc == 2 && strstr(out, "goes with --pipeline"), "exit %d: %s", rc, out);
    rc = run("", "deep.cfg --data . -n 2 --pipeline 2 --ps --compress fp16"); /* --ps over stages: float32 */
    CHECK(rc == 2 && strstr(out, "pushes float32 shards"), "exit %d: %s", rc, out);
    rc = run("", "deep.cfg --data . -n 2 --pipeline 2 --micro-batches 3 --max-steps 2");
    CHECK(rc == 1 && strstr(out, "--micro-batches 3 does not divide the batch of 16"), "exit %d: %s", rc, out);
    rc = run("", "deep.cfg --data . -n 6 --pipeline 6 --max-steps 2");
    CHECK(rc == 1 && strstr(out, "has only 5 layers"), "exit %d: %s", rc, out);
    rc = run("", "keyed.cfg --data . -n 2 --pipeline 2 --max-steps 2");
    CHECK(rc == 1 && strstr(out, "keyed.cfg:") && strstr(out, "stage=2 but --pipeline 2"), "exit %d: %s", rc, out);
}

static void routes_across_cuts_are_listed_and_train_alike(void)
{
    double acc1, loss1;
    check_one_process_json(dir, "routed.cfg --data . --max-steps 30 --threads 1 --json", out, sizeof out, &acc1, &loss1);
    int rc = run("", "routed.cfg --data . -n 3 --pipeline 3 --micro-batches 4 --max-steps 30 --threads 1 --json");
    CHECK(rc == 0, "pipeline: exit %d: %s", rc, out);
    CHECK(strstr(out, "stage 1: layers 3-4, ") && strstr(out, "; also receives layer 0's output (for route 3), "
                                                               "layer 1's output (for route 5)\n"),
          "stage 1's links: %s", out);
    CHECK(strstr(out, "stage 2: layers 5-8, ") && strstr(out, "; also receives layer 1's output (for route 5)\n"),
          "stage 2's links: %s", out);
    check_matches_one_process("3 stages across routes", out, acc1, loss1);
}

/* --save-darknet from 2 stages writes the whole model, and --weights takes it back into
 * 2 stages of 4 micro-batches. */
static void darknet_weights_are_the_whole_model(void)
{
    check_darknet_round_trip(dir, "deep.cfg", "-n 2 --pipeline 2", "-n 2 --pipeline 2 --micro-batches 4", out,
                             sizeof out);
}

int main(void)
{
    check_begin("test_train_pipeline", 240);
    if (tiny_make_dir(dir, sizeof dir) != 0 || tiny_write_file(dir, "deep.cfg", deep_cfg) ||
        tiny_write_file(dir, "keyed.cfg", keyed_cfg) || tiny_write_file(dir, "routed.cfg", routed_cfg)) {
        CHECK(0, "cannot make the tiny dataset");
        return check_end();
    }
    RUN(trains_like_one_process_and_prints_the_layout);
    RUN(replicas_of_stages);
    RUN(gradient_norm_covers_every_stage);
    RUN(checkpoints_cross_layouts);
    RUN(killed_stage_stops_the_job);
    RUN(impossible_layouts_are_usage_errors);
    RUN(darknet_weights_are_the_whole_model);
    RUN(routes_across_cuts_are_listed_and_train_alike);
    tiny_remove_dir(dir);
    return check_end();
}
