/* test_train_hybrid.c — proves `shoal train --hybrid SCHEME` end to end (cmd_train.c,
 * src/train/job.c's hybrid layout): the layout is printed once at start-up, 2 ranks end
 * with one process's accuracy and test loss, --json reports the bytes sent per step, a
 * checkpoint of 2 ranks resumes in one process, --save-darknet writes the whole model and
 * --weights reads it back into 2 ranks, and impossible layouts are one clear line. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "lib/cli_layout_checks.h"
#include "lib/run.h"
#include "lib/tfrecord.h"
#include "train/tiny_data.h"

static char dir[256], out[1 << 20];

static const char convfc_cfg[] =
    "[net]\nbatch=16\nwidth=8\nheight=8\nchannels=1\nlearning_rate=0.05\nmomentum=0.9\n"
    "\n[convolutional]\nfilters=4\nsize=3\nstride=1\npad=1\nactivation=relu\n"
    "\n[maxpool]\nsize=2\nstride=2\n"
    "\n[connected]\noutput=24\nactivation=relu\n"
    "\n[connected]\noutput=4\nactivation=linear\n"
    "\n[softmax]\n\n[cost]\n";

/* `shoal train ARGS` in the run's directory, its output in out. */
static int run(const char *args)
{
    return sh_test_shoal_in(dir, "", "train", args, out, sizeof out);
}

static double json_number(const char *key)
{
    return sh_test_json_number(out, key);
}

static void trains_like_one_process(void)
{
    double acc1, loss1;
    check_one_process_json(dir, "convfc.cfg --data . --max-steps 30 --threads 1 --json", out, sizeof out, &acc1,
                           &loss1);
    static const char *schemes[] = {"broadcast", "vertical", "horizontal"};
    for (int k = 0; k < 3; k++) {
        char args[256];
        snprintf(args, sizeof args, "convfc.cfg --data . -n 2 --hybrid %s --max-steps 30 --threads 1 --json",
                 schemes[k]);
        int rc = run(args);
        CHECK(rc == 0, "%s: exit %d: %s", schemes[k], rc, out);
        char want[64];
        snprintf(want, sizeof want, "hybrid (%s) on 2 ranks: layers 0-1 data-parallel", schemes[k]);
        CHECK(strstr(out, want) && strstr(out, "layer 2: connected, 24 outputs, 12 per rank"), "layout: %s", out);
        check_matches_one_process(schemes[k], out, acc1, loss1);
        CHECK(json_number("bytes_sent_per_step") > json_number("activity_bytes_per_step") &&
                  json_number("activity_bytes_per_step") > 0,
              "%s: bytes per step: %s", schemes[k], out);
        /* broadcast steps the shares inside backward, and says how long that took; the others
         * leave the step to the trainer */
        double fused = json_number("fused_update_ms"), rest = json_number("rest_update_ms");
        CHECK(k == 0 ? fused > 0 && rest > 0 : fused == 0 && rest == 0, "%s: fused %g ms, rest %g ms: %s",
              schemes[k], fused, rest, out);
    }
}

/* The logged gradient norm is the whole model's: the convolutional gradients once and every
 * rank's shares of the connected layers, as one process logs it. */
static void gradient_norm_covers_every_share(void)
{
    check_one_process_logs(dir, "convfc.cfg", out, sizeof out);
    check_gradient_norm_is_whole(dir, "convfc.cfg", "-n 2 --hybrid broadcast", "g2", out, sizeof out);
}

static void checkpoints_and_refusals(void)
{
    int rc = run("convfc.cfg --data . -n 2 --hybrid vertical --max-steps 3 --threads 1 --save h.ckpt --quiet");
    CHECK(rc == 0, "exit %d: %s", rc, out);
    rc = run("convfc.cfg --data . --max-steps 6 --threads 1 --resume h.ckpt");
    CHECK(rc == 0 && strstr(out, "steps 4..6"), "one process did not continue the hybrid run: %s", out);
    rc = run("convfc.cfg --data . -n 2 --hybrid broadcast --max-steps 6 --threads 1 --resume h.ckpt --profile");
    CHECK(rc == 0 && strstr(out, "steps 4..6") && strstr(out, "MB sent per rank"), "hybrid resume: %s", out);
    rc = run("convfc.cfg --data . --hybrid broadcast");
    CHECK(rc == 2 && strstr(out, "add -n N"), "exit %d: %s", rc, out);
    rc = run("convfc.cfg --data . -n 2 --hybrid diagonal");
    CHECK(rc == 2 && strstr(out, "broadcast, vertical and horizontal"), "exit %d: %s", rc, out);
    rc = run("convfc.cfg --data . -n 2 --hybrid broadcast --pipeline 2");
    CHECK(rc == 2 && strstr(out, "leave out --pipeline"), "exit %d: %s", rc, out);
    rc = run("convfc.cfg --data . -n 2 --hybrid broadcast --tensor-parallel 2");
    CHECK(rc == 2 && strstr(out, "leave out --tensor-parallel"), "exit %d: %s", rc, out);
    rc = run("convfc.cfg --data . -n 5 --hybrid broadcast --batch 20 --max-steps 2"); /* 4 outputs */
    CHECK(rc == 1 && strstr(out, "fewer than the 5 ranks"), "exit %d: %s", rc, out);
    rc = run("mlp.cfg --data . -n 2 --hybrid broadcast --max-steps 2"); /* starts with [connected] */
    CHECK(rc == 1 && strstr(out, "nothing runs data-parallel"), "exit %d: %s", rc, out);
}

/* --save-darknet from 2 hybrid ranks writes the whole model, and --weights takes it back into
 * 2 hybrid ranks. */
static void darknet_weights_are_the_whole_model(void)
{
    check_darknet_round_trip(dir, "convfc.cfg", "-n 2 --hybrid broadcast", "-n 2 --hybrid horizontal", out,
                             sizeof out);
}

int main(void)
{
    check_begin("test_train_hybrid", 240);
    if (tiny_make_dir(dir, sizeof dir) != 0 || tiny_write_file(dir, "convfc.cfg", convfc_cfg)) {
        CHECK(0, "cannot make the tiny dataset");
        return check_end();
    }
    RUN(trains_like_one_process);
    RUN(gradient_norm_covers_every_share);
    RUN(checkpoints_and_refusals);
    RUN(darknet_weights_are_the_whole_model);
    tiny_remove_dir(dir);
    return check_end();
}
