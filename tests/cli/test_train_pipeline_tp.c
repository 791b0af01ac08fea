/* test_train_pipeline_tp.c — proves `shoal train --pipeline S --tensor-parallel T` end to end
 * (cmd_train.c, src/train/job.c's pipeline layout with split stages): the layout (replicas x
 * stages x tensor ranks, each stage's ranks, its split pairs and those left whole with why)
 * is printed once at start-up; 2 x 2 ranks end with one process's accuracy and test loss;
 * a checkpoint crosses one process and a plain pipeline both ways; --save-darknet writes
 * the whole model and --weights reads it back; ranks started with different layouts stop at
 * start-up naming what differs; a killed rank stops the job, named; impossible layouts are
 * one clear error. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "check.h"
#include "lib/cli_layout_checks.h"
#include "lib/layout_cfgs.h"
#include "lib/run.h"
#include "lib/tfrecord.h"
#include "train/tiny_data.h"

static char dir[256], out[1 << 20];

/* layers 0-1 | 2-6: a pair worth splitting in each stage */
static const char deep_cfg[] = SH_TEST_STAGED_CFG;
static const char odd_cfg[] = SH_TEST_ODD_CFG;

static int run(const char *env, const char *args)
{
    return sh_test_shoal_in(dir, env, "train", args, out, sizeof out);
}

static void trains_like_one_process_and_prints_the_layout(void)
{
    double acc1, loss1;
    check_one_process_json(dir, "deep.cfg --data . --max-steps 30 --threads 1 --json", out, sizeof out, &acc1, &loss1);
    int rc = run("", "deep.cfg --data . -n 4 --pipeline 2 --tensor-parallel 2 --max-steps 30 --threads 1 --json "
                 "--profile");
    CHECK(rc == 0, "2 x 2: exit %d: %s", rc, out);
    CHECK(sh_test_count(out, "pipeline x tensor parallel: 1 replica x 2 stages x 2 tensor ranks on 4 ranks") == 1,
          "layout line once: %s", out);
    CHECK(strstr(out, "stage 0: layers 0-1, 2872 parameters, ranks 0,1") &&
              strstr(out, "stage 1: layers 2-6, 3812 parameters, ranks 2,3") &&
              strstr(out, "layers 0 (32 outputs, 16 per rank, by output columns) + 1 (24 outputs, by input rows)") &&
              strstr(out, "layers 2 (64 outputs, 32 per rank, by output columns) + 3 (32 outputs, by input rows)") &&
              strstr(out, "not split: layers 3 + 4 (272 bytes per image for 2176 multiply-adds): costs more"),
          "stages and pairs listed: %s", out);
    check_matches_one_process("2 x 2", out, acc1, loss1);
    CHECK(sh_test_count(out, "\"bubble_share\":") == 2 && strstr(out, "\"stage\":1"), "JSON per stage: %s", out);
    rc = run("", "deep.cfg --data . -n 8 --pipeline 2 --tensor-parallel 2 --scaling strong --max-steps 3 --threads 1");
    CHECK(rc == 0 && strstr(out, "2 replicas x 2 stages x 2 tensor ranks on 8 ranks") &&
              strstr(out, "ranks 0,1 | 4,5") && strstr(out, "ranks 2,3 | 6,7"),
          "exit %d: %s", rc, out);
}

/* The logged gradient norm is the whole model's, each share and each value every tensor rank
 * holds counted once: what one process with the same batch logs. */
static void gradient_norm_is_the_whole_models(void)
{
    check_one_process_logs(dir, "deep.cfg", out, sizeof out);
    check_gradient_norm_is_whole(dir, "deep.cfg", "-n 4 --pipeline 2 --tensor-parallel 2", "g4", out, sizeof out);
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
    check_killed_rank_stops_the_job(dir, "deep.cfg --data . -n 4 --pipeline 2 --tensor-parallel 2 --max-steps 400 "
                                         "--threads 1 --debug-die-rank 3 --debug-die-step 5", 3, out, sizeof out);
    CHECK(strstr(out, "job rank 3"), "no survivor names rank 3: %s", out);
}

static void impossible_layouts_are_refused(void)
{
    int rc = run("", "deep.cfg --data . -n 6 --pipeline 2 --tensor-parallel 2");
    CHECK(rc == 2 && sh_test_count(out, "--pipeline 2 --tensor-parallel 2 runs on -n 4 ranks or a multiple") == 1,
          "exit %d: %s", rc, out);
    rc = run("", "deep.cfg --data . --pipeline 2 --tensor-parallel 2");
    CHECK(rc == 2 && strstr(out, "runs on -n 4 ranks"), "exit %d: %s", rc, out);
    rc = run("", "odd.cfg --data . -n 4 --pipeline 2 --tensor-parallel 2 --max-steps 2");
    CHECK(rc == 1 && strstr(out, "no stage of odd.cfg has a pair of layers to split inside it"), "exit %d: %s", rc,
          out);
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
