/* test_caffe_cli.c — proves src/cli/cmd_train_caffe.c and the Caffe paths of `shoal train` and
 * `shoal test` on the real binary: --help names .prototxt, --solver and --save-caffe; those
 * flags without a .prototxt are wrong usage (exit 2, one line); Caffe's LeNet solver
 * (examples/caffe/lenet_solver.prototxt: inv policy, momentum, decay; Data layers whose shape
 * is Fashion-MNIST's) trains as far as the .cfg LeNet in the same steps (a short version of
 * bench/caffe/lenet_solver.sh); its --save-caffe file read by `shoal test` on the deploy
 * net (examples/caffe/lenet.prototxt) gives the accuracy training ended with. Needs
 * dataset-fashion-mnist (scripts/deps.sh); without it the training part says so and passes. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "lib/run.h"

static char dir[64];

static int run_shoal(const char *args, char *out, size_t out_nbytes)
{
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "%s %s 2>&1", sh_test_shoal_bin(), args);
    return sh_test_run(cmd, out, out_nbytes);
}

static double json_num(const char *text, const char *key)
{
    char pat[64];
    snprintf(pat, sizeof pat, "\"%s\":", key);
    const char *p = strstr(text, pat);
    return p ? strtod(p + strlen(pat), NULL) : NAN;
}

static void help_and_usage(void)
{
    char out[16384];
    int rc = run_shoal("train --help", out, sizeof out);
    CHECK(rc == 0 && strstr(out, ".prototxt") && strstr(out, "--solver") && strstr(out, "--save-caffe"),
          "help: exit %d", rc);
    rc = run_shoal("train examples/lenet.cfg --solver examples/caffe/lenet_solver.prototxt", out, sizeof out);
    CHECK(rc == 2 && strstr(out, "--solver goes with a Caffe model"), "--solver with a .cfg: exit %d: %s", rc, out);
    rc = run_shoal("train examples/lenet.cfg --save-caffe x.caffemodel", out, sizeof out);
    CHECK(rc == 2 && strstr(out, "--save-caffe goes with a Caffe model"), "--save-caffe with a .cfg: exit %d: %s",
          rc, out);
    rc = run_shoal("train examples/caffe/lenet.prototxt --save-caffe x.weights", out, sizeof out);
    CHECK(rc == 2 && strstr(out, "FILE.caffemodel"), "--save-caffe x.weights: exit %d: %s", rc, out);
}

static void lenet_solver_trains_like_the_cfg_lenet(void)
{
    if (access("/usr/share/datasets/fashion-mnist/t10k-labels-idx1-ubyte.gz", R_OK) != 0) {
        printf("test_caffe_cli: no dataset-fashion-mnist; the LeNet runs skipped\n");
        return;
    }
    enum { STEPS = 250 };
    char out[16384], args[1024];
    snprintf(args, sizeof args, "train examples/lenet.cfg --max-steps %d --threads 2 --seed 1 --json", STEPS);
    int rc = run_shoal(args, out, sizeof out);
    CHECK(rc == 0, "cfg LeNet: exit %d: %s", rc, out);
    double cfg_acc = json_num(out, "accuracy");
    snprintf(args, sizeof args, "train examples/caffe/lenet_solver.prototxt --max-steps %d --threads 2 --seed 1 "
             "--save %s/lenet.ckpt --save-caffe %s/lenet.caffemodel --json", STEPS, dir, dir);
    rc = run_shoal(args, out, sizeof out);
    CHECK(rc == 0, "Caffe LeNet: exit %d: %s", rc, out);
    double caffe_acc = json_num(out, "accuracy");
    CHECK(json_num(out, "steps") == STEPS, "steps: %s", out);
    CHECK(caffe_acc > 0.75 && caffe_acc >= cfg_acc - 0.02, "Caffe's solver reached %.4f, the .cfg LeNet %.4f",
          caffe_acc, cfg_acc);
    printf("test_caffe_cli: %d steps: Caffe LeNet solver %.2f%%, .cfg LeNet %.2f%%\n", STEPS, 100 * caffe_acc,
           100 * cfg_acc);
    snprintf(args, sizeof args, "test examples/caffe/lenet.prototxt --weights %s/lenet.caffemodel --threads 2 --json",
             dir);
    rc = run_shoal(args, out, sizeof out);
    CHECK(rc == 0, "test with the .caffemodel: exit %d: %s", rc, out);
    CHECK(fabs(json_num(out, "accuracy") - caffe_acc) < 1e-6, "shoal test says %g, training ended at %g",
          json_num(out, "accuracy"), caffe_acc);
}

int main(void)
{
    check_begin("test_caffe_cli", 300);
    snprintf(dir, sizeof dir, "/tmp/shoal_caffe_cli_XXXXXX");
    CHECK(mkdtemp(dir) != NULL, "temporary directory");
    RUN(help_and_usage);
    RUN(lenet_solver_trains_like_the_cfg_lenet);
    char cmd[128], out[64];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    (void)sh_test_run(cmd, out, sizeof out);
    return check_end();
}
