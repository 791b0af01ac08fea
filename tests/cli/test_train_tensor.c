/* test_train_tensor.c — proves `shoal train --tensor-parallel T` end to end (cmd_train.c,
 * src/train/job.c's tensor layout): the split pairs are printed once at start-up with their
 * bytes, and the pairs left whole with why; 2 ranks end with one process's accuracy and test
 * loss (an MLP, and a CNN whose convolutions split by channels), a checkpoint of 2 ranks resumes in one
 * process, --save-darknet writes the whole model and --weights reads it back into 2 ranks,
 * and layouts it does not do are one clear usage error. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "lib/cli_layout_checks.h"
#include "lib/layout_cfgs.h"
#include "lib/run.h"
#include "train/tiny_data.h"

static char dir[256], out[1 << 20];

static const char deep_cfg[] =
    "[net]\nbatch=16\nwidth=8\nheight=8\nchannels=1\nlearning_rate=0.05\nmomentum=0.9\n"
    "\n[connected]\noutput=32\nactivation=relu\n"
    "\n[connected]\noutput=24\nactivation=relu\n"
    "\n[connected]\noutput=4\nactivation=linear\n"
    "\n[softmax]\n\n[cost]\n";

/* wide enough that a step of its shares shows in --profile's hundredths of a ms */
static const char wide_cfg[] =
    "[net]\nbatch=16\nwidth=8\nheight=8\nchannels=1\nlearning_rate=0.05\nmomentum=0.9\n"
    "\n[connected]\noutput=1024\nactivation=relu\n"
    "\n[connected]\noutput=1024\nactivation=relu\n"
    "\n[connected]\noutput=4\nactivation=linear\n"
    "\n[softmax]\n\n[cost]\n";

/* conv + conv by channels, conv + connected through maxpool; conv 1 + 2 overlaps both */
static const char cnn_cfg[] = SH_TEST_NET_8X8("0.02", "momentum=0.9\n") SH_TEST_CNN_LAYERS("", "");

/* `shoal train ARGS` in the run's directory, its output in out. */
static int run(const char *args)
{
    return sh_test_shoal_in(dir, "", "train", args, out, sizeof out);
}

static void trains_like_one_process(void)
{
    double acc1, loss1;
    check_one_process_json(dir, "deep.cfg --data . --max-steps 30 --threads 1 --json", out, sizeof out, &acc1, &loss1);
    int rc = run("deep.cfg --data . -n 2 --tensor-parallel 2 --max-steps 30 --threads 1 --json");
    CHECK(rc == 0, "tensor parallel: exit %d: %s", rc, out);
    CHECK(strstr(out, "tensor parallel: 2 ranks") && strstr(out, "layers 0 (32 outputs, 16 per rank, by output "
                                                             "columns) + 1 (24 outputs, by input rows)"),
          "layout: %s", out);
    check_matches_one_process("tensor parallel", out, acc1, loss1);
}

static void cnn_splits_by_channels_like_one_process(void)
{
    double acc1, loss1;
    check_one_process_json(dir, "cnn.cfg --data . --max-steps 30 --threads 1 --json", out, sizeof out, &acc1, &loss1);
    int rc = run("cnn.cfg --data . -n 2 --tensor-parallel 2 --max-steps 30 --threads 1 --json");
    CHECK(rc == 0, "tensor parallel: exit %d: %s", rc, out);
    CHECK(strstr(out, "layers 0 (8 filters, 4 per rank, by output channels) + 1 (8 filters, by input channels)") &&
              strstr(out, "layers 2 (8 filters, 4 per rank, by output channels) + 4 (16 outputs, by input rows)") &&
              strstr(out, "not split: layers 1 + 2") && strstr(out, "bytes per image"),
          "layout: %s", out);
    check_matches_one_process("tensor parallel", out, acc1, loss1);
}

/* With one replica the split layers step inside backward: --profile counts that as the
 * optimizer's time, not backward's (it read 0.00 when the step moved into backward). */
static void profile_counts_the_shares_steps_as_the_optimizers(void)
{
    int rc = run("wide.cfg --data . -n 2 --tensor-parallel 2 --max-steps 30 --threads 1 --profile --quiet");
    const char *line = strstr(out, "profile per step (ms):");
    const char *opt = line ? strstr(line, "optimizer ") : NULL;
    double ms = opt ? atof(opt + strlen("optimizer ")) : -1;
    CHECK(rc == 0 && opt && ms > 0, "exit %d, optimizer %.3f ms: %s", rc, ms, out);
}

static void refusals(void)
{
    int rc = run("deep.cfg --data . -n 2 --tensor-parallel 2 --max-steps 3 --threads 1 --save t.ckpt --quiet");
    CHECK(rc == 0, "exit %d: %s", rc, out);
    rc = run("deep.cfg --data . --max-steps 6 --threads 1 --resume t.ckpt");
    CHECK(rc == 0 && strstr(out, "steps 4..6"), "one process did not continue the tensor-parallel run: %s", out);
    rc = run("deep.cfg --data . -n 3 --tensor-parallel 2");
    CHECK(rc == 2 && strstr(out, "runs on -n 2 ranks or a multiple"), "exit %d: %s", rc, out);
    rc = run("deep.cfg --data . -n 4 --tensor-parallel 2 --scaling strong --max-steps 3 --threads 1 --save r.ckpt");
    CHECK(rc == 0 && strstr(out, "tensor parallel: 2 ranks x 2 replicas"), "exit %d: %s", rc, out);
    rc = run("deep.cfg --data . --max-steps 6 --threads 1 --resume r.ckpt");
    CHECK(rc == 0 && strstr(out, "steps 4..6"), "one process did not continue 2 x 2 ranks' run: %s", out);
    rc = run("deep.cfg --data . --tensor-parallel 2");
    CHECK(rc == 2 && strstr(out, "runs on -n 2 ranks"), "exit %d: %s", rc, out);
    rc = run("deep.cfg --data . -n 2 --tensor-parallel 2 --pipeline 2"); /* composed: S x T ranks */
    CHECK(rc == 2 && strstr(out, "runs on -n 4 ranks or a multiple"), "exit %d: %s", rc, out);
    rc = run("deep.cfg --data . -n 5 --tensor-parallel 5 --max-steps 2"); /* 32, 24: no pair */
    CHECK(rc == 1 && strstr(out, "divisible by 5"), "exit %d: %s", rc, out);
}

/* --save-darknet from 2 tensor-parallel ranks writes the whole model, and --weights takes it
 * back into them. */
static void darknet_weights_are_the_whole_model(void)
{
    check_darknet_round_trip(dir, "deep.cfg", "-n 2 --tensor-parallel 2", "-n 2 --tensor-parallel 2", out,
                             sizeof out);
}

int main(void)
{
    check_begin("test_train_tensor", 240);
    if (tiny_make_dir(dir, sizeof dir) != 0 || tiny_write_file(dir, "deep.cfg", deep_cfg) || tiny_write_file(dir, "wide.cfg", wide_cfg) ||
        tiny_write_file(dir, "cnn.cfg", cnn_cfg)) {
        CHECK(0, "cannot make the tiny dataset");
        return check_end();
    }
    RUN(trains_like_one_process);
    RUN(cnn_splits_by_channels_like_one_process);
    RUN(profile_counts_the_shares_steps_as_the_optimizers);
    RUN(refusals);
    RUN(darknet_weights_are_the_whole_model);
    tiny_remove_dir(dir);
    return check_end();
}
