/* test_train_pipeline_tp.c — proves `shoal train --pipeline S --tensor-parallel T` end to end
 * (cmd_train.c, src/train/job.c's pipeline layout with split stages): the layout (replicas x
 * stages x tensor ranks, each stage's ranks and pairs) is printed once at start-up; 2 x 2
 * ranks end with one process's accuracy and test loss; a checkpoint crosses one process and
 * a plain pipeline both ways; --save-darknet writes the whole model and --weights reads it
 * back; ranks started with different layouts stop at start-up naming what differs; a
 * killed rank stops the job, named; impossible layouts are one clear error. */
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

/* balanced on 2 stages as layers 0-1 | 2-6: a pair in each stage */
static const char deep_cfg[] =
    "[net]\nbatch=16\nwidth=8\nheight=8\nchannels=1\nlearning_rate=0.05\nmomentum=0.9\n"
    "\n[connected]\noutput=32\nactivation=relu\nstage=0\n"
    "\n[connected]\noutput=24\nactivation=relu\n"
    "\n[connected]\noutput=16\nactivation=relu\nstage=1\n"
    "\n[connected]\noutput=8\nactivation=relu\n"
    "\n[connected]\noutput=4\nactivation=linear\n"
    "\n[softmax]\n\n[cost]\n";

static const char odd_cfg[] =
    "[net]\nbatch=16\nwidth=8\nheight=8\nchannels=1\nlearning_rate=0.05\n"
    "\n[connected]\noutput=7\nactivation=relu\n"
    "\n[connected]\noutput=5\nactivation=relu\n"
    "\n[connected]\noutput=4\nactivation=linear\n"
    "\n[softmax]\n\n[cost]\n";

static int run(const char *env, const char *args)
{
    return sh_test_shoal_in(dir, env, "train", args, out, sizeof out);
}

static int count_of(const char *s)
{
    int n = 0;
    for (const char *p = out; (p = strstr(p, s)) != NULL; p++) n++;
    return n;
}

static void trains_like_one_process_and_prints_the_layout(void)
{
    int rc = run("", "deep.cfg --data . --max-steps 30 --threads 1 --json");
    CHECK(rc == 0, "one process: exit %d: %s", rc, out);
    double acc1 = sh_test_json_number(out, "accuracy"), loss1 = sh_test_json_number(out, "test_loss");
    rc = run("", "deep.cfg --data . -n 4 --pipeline 2 --tensor-parallel 2 --max-steps 30 --threads 1 --json "
                 "--profile");
    CHECK(rc == 0, "2 x 2: exit %d: %s", rc, out);
    CHECK(count_of("pipeline x tensor parallel: 1 replica x 2 stages x 2 tensor ranks on 4 ranks") == 1,
          "layout line once: %s", out);
    CHECK(strstr(out, "stage 0: layers 0-1, 2872 parameters, ranks 0,1") &&
              strstr(out, "stage 1: layers 2-6, 572 parameters, ranks 2,3") &&
              strstr(out, "split: layers 0 (by output columns) + 1 (by input rows)") &&
              strstr(out, "split: layers 2 (by output columns) + 3 (by input rows)"),
          "stages and pairs listed: %s", out);
    double acc2 = sh_test_json_number(out, "accuracy"), loss2 = sh_test_json_number(out, "test_loss");
    CHECK(acc2 == acc1, "accuracy %.6f, one process %.6f", acc2, acc1);
    CHECK(loss2 > 0 && loss2 - loss1 < 1e-5 && loss1 - loss2 < 1e-5, "test loss %.6f, one process %.6f", loss2, loss1);
    CHECK(count_of("\"bubble_share\":") == 2 && strstr(out, "\"stage\":1"), "JSON per stage: %s", out);
    rc = run("", "deep.cfg --data . -n 8 --pipeline 2 --tensor-parallel 2 --scaling strong --max-steps 3 --threads 1");
    CHECK(rc == 0 && strstr(out, "2 replicas x 2 stages x 2 tensor ranks on 8 ranks") &&
              strstr(out, "ranks 0,1 | 4,5") && strstr(out, "ranks 2,3 | 6,7"),
          "exit %d: %s", rc, out);
}

/* The logged gradient norm is the whole model's, each share and each value every tensor rank
 * holds counted once: what one process with the same batch logs. */
static void gradient_norm_is_the_whole_models(void)
{
    int rc = run("", "deep.cfg --data . --max-steps 5 --threads 1 --quiet --logdir g1");
    CHECK(rc == 0, "one process: exit %d: %s", rc, out);
    rc = run("", "deep.cfg --data . -n 4 --pipeline 2 --tensor-parallel 2 --max-steps 5 --threads 1 --quiet --logdir g4");
    CHECK(rc == 0, "2 x 2: exit %d: %s", rc, out);
    char a[600], b[600], why[512] = "";
    snprintf(a, sizeof a, "%s/g1", dir);
    snprintf(b, sizeof b, "%s/g4", dir);
    CHECK(tbr_same_scalars(a, b, "train/gradient_norm", 1, 5, 1e-4, why, sizeof why), "2 x 2: %s", why);
}

static void checkpoints_cross_layouts(void)
{
    int rc = run("", "deep.cfg --data . -n 4 --pipeline 2 --tensor-parallel 2 --max-steps 10 --threads 1 --save p.ckpt "
                     "--quiet");
    CHECK(rc == 0, "exit %d: %s", rc, out);
    rc = run("", "deep.cfg --data . --max-steps 20 --threads 1 --resume p.ckpt --save one.ckpt");
    CHECK(rc == 0 && strstr(out, "steps 11..20"), "one process did not continue 2 x 2 ranks' run: %s", out);
    rc = run("", "deep.cfg --data . -n 4 --pipeline 2 --tensor-parallel 2 --max-steps 30 --threads 1 --resume one.ckpt "
                 "--save q.ckpt --quiet");
    CHECK(rc == 0, "2 x 2 ranks did not continue one process's run: exit %d: %s", rc, out);
    rc = run("", "deep.cfg --data . -n 2 --pipeline 2 --max-steps 40 --threads 1 --resume q.ckpt");
    CHECK(rc == 0 && strstr(out, "steps 31..40"), "a plain pipeline did not continue 2 x 2 ranks' run: %s", out);
}

static void darknet_weights_are_the_whole_model(void)
{
    check_darknet_round_trip(dir, "deep.cfg", "-n 4 --pipeline 2 --tensor-parallel 2",
                             "-n 4 --pipeline 2 --tensor-parallel 2", out, sizeof out);
}

/* Rank 1 started with --pipeline 2 alone, rank 0 with --tensor-parallel 2 too. */
static void different_layouts_stop_at_start_up(void)
{
    char args[1024];
    snprintf(args, sizeof args,
             "-n 2 -- sh -c 'T=2; [ \"$SHOAL_RANK\" = 1 ] && T=1; exec %s train deep.cfg --data . --pipeline 2 "
             "--tensor-parallel $T --max-steps 2 --threads 1'", sh_test_shoal_bin());
    int rc = sh_test_shoal_in(dir, "SHOAL_TIMEOUT=5000", "launch", args, out, sizeof out);
    CHECK(rc != 0 && strstr(out, "rank 1 was started with --pipeline 2 but rank 0 with --pipeline 2 "
                                 "--tensor-parallel 2"),
          "exit %d: %s", rc, out);
}

/* Rank 3 dies at step 5: the others stop within SHOAL_TIMEOUT, the launcher naming it. */
static void killed_rank_stops_the_job(void)
{
    uint64_t t0 = sh_now_ns();
    int rc = run("SHOAL_TIMEOUT=3000", "deep.cfg --data . -n 4 --pipeline 2 --tensor-parallel 2 --max-steps 400 "
                 "--threads 1 --debug-die-rank 3 --debug-die-step 5");
    double s = (double)(sh_now_ns() - t0) / 1e9;
    CHECK(rc != 0, "the job went on without rank 3: %s", out);
    CHECK(strstr(out, "rank 3 was killed by SIGKILL") != NULL, "the launcher does not name the lost rank: %s", out);
    CHECK(strstr(out, "job rank 3"), "no survivor names rank 3: %s", out);
    CHECK(s < 30, "stopping took %.1f s", s);
}

static void impossible_layouts_are_refused(void)
{
    int rc = run("", "deep.cfg --data . -n 6 --pipeline 2 --tensor-parallel 2");
    CHECK(rc == 2 && count_of("--pipeline 2 --tensor-parallel 2 runs on -n 4 ranks or a multiple") == 1,
          "exit %d: %s", rc, out);
    rc = run("", "deep.cfg --data . --pipeline 2 --tensor-parallel 2");
    CHECK(rc == 2 && strstr(out, "runs on -n 4 ranks"), "exit %d: %s", rc, out);
    rc = run("", "odd.cfg --data . -n 4 --pipeline 2 --tensor-parallel 2 --max-steps 2");
    CHECK(rc == 1 && strstr(out, "no stage of odd.cfg has two consecutive [connected] layers"), "exit %d: %s", rc, out);
    rc = run("", "odd.cfg --data . -n 12 --pipeline 6 --tensor-parallel 2 --max-steps 2");
    CHECK(rc == 1 && strstr(out, "has only 5 layers"), "exit %d: %s", rc, out);
}

int main(void)
{
    check_begin("test_train_pipeline_tp", 300);
    if (tiny_make_dir(dir, sizeof dir) != 0 || tiny_write_file(dir, "deep.cfg", deep_cfg) ||
        tiny_write_file(dir, "odd.cfg", odd_cfg)) {
        CHECK(0, "cannot make the tiny dataset");
        return check_end();
    }
    RUN(trains_like_one_process_and_prints_the_layout);
    RUN(gradient_norm_is_the_whole_models);
    RUN(checkpoints_cross_layouts);
    RUN(darknet_weights_are_the_whole_model);
    RUN(different_layouts_stop_at_start_up);
    RUN(killed_rank_stops_the_job);
    RUN(impossible_layouts_are_refused);
    tiny_remove_dir(dir);
    return check_end();
}
