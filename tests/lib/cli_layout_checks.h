/* cli_layout_checks.h — what `shoal train` must do alike under every split layout
 * (--pipeline, --tensor-parallel, --hybrid), as static functions over check.h's counters,
 * as check.h's own are: each test binary counts them as its own CHECKs.
 * Not here: running the binary (run.h), what each layout prints (each test).
 * Used by tests/cli/test_train_pipeline.c, test_train_pipeline_tp.c, test_train_tensor.c and
 * test_train_hybrid.c. */
#ifndef SH_TEST_CLI_LAYOUT_CHECKS_H
#define SH_TEST_CLI_LAYOUT_CHECKS_H

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "base/util.h"
#include "check.h"
#include "lib/run.h"
#include "lib/tfrecord.h"

/* The yardstick of a layout's run: one process's `shoal train ARGS` in dir (ARGS ask for
 * --json); *acc and *loss its test accuracy and test loss; out (out_nbytes) holds its
 * output. One CHECK. */
static inline void check_one_process_json(const char *dir, const char *args, char *out, size_t out_nbytes,
                                          double *acc, double *loss)
{
    int rc = sh_test_shoal_in(dir, "", "train", args, out, out_nbytes);
    CHECK(rc == 0, "one process: exit %d: %s", rc, out);
    *acc = sh_test_json_number(out, "accuracy");
    *loss = sh_test_json_number(out, "test_loss");
}

/* A layout's --json output `out` (what: the layout) ends with one process's test accuracy,
 * exactly, and its test loss within 1e-5. Two CHECKs. */
static inline void check_matches_one_process(const char *what, const char *out, double acc, double loss)
{
    double a = sh_test_json_number(out, "accuracy"), l = sh_test_json_number(out, "test_loss");
    CHECK(a == acc, "%s: accuracy %.6f, one process %.6f", what, a, acc);
    CHECK(l > 0 && fabs(l - loss) < 1e-5, "%s: test loss %.6f, one process %.6f", what, l, loss);
}

/* One process's 5 steps of cfg in dir, logged into dir/g1: the yardstick of
 * check_gradient_norm_is_whole. One CHECK. */
static inline void check_one_process_logs(const char *dir, const char *cfg, char *out, size_t out_nbytes)
{
    char args[512];
    snprintf(args, sizeof args, "%s --data . --max-steps 5 --threads 1 --quiet --logdir g1", cfg);
    int rc = sh_test_shoal_in(dir, "", "train", args, out, out_nbytes);
    CHECK(rc == 0, "one process: exit %d: %s", rc, out);
}

/* The gradient norm the layout (its flags) logs over 5 steps of cfg in dir, into dir/name, is
 * the whole model's: train/gradient_norm at steps 1..5 within 1e-4 of what one process logged
 * into dir/g1 (check_one_process_logs). Two CHECKs. */
static inline void check_gradient_norm_is_whole(const char *dir, const char *cfg, const char *layout, const char *name,
                                                char *out, size_t out_nbytes)
{
    char args[1024], a[600], b[600], why[512] = "";
    snprintf(args, sizeof args, "%s --data . %s --max-steps 5 --threads 1 --quiet --logdir %s", cfg, layout, name);
    int rc = sh_test_shoal_in(dir, "", "train", args, out, out_nbytes);
    CHECK(rc == 0, "%s: exit %d: %s", layout, rc, out);
    snprintf(a, sizeof a, "%s/g1", dir);
    snprintf(b, sizeof b, "%s/%s", dir, name);
    CHECK(tbr_same_scalars(a, b, "train/gradient_norm", 1, 5, 1e-4, why, sizeof why), "%s: %s", layout, why);
}

/* `shoal train ARGS` in dir with SHOAL_TIMEOUT=3000, rank `dying` of which dies (ARGS'
 * --debug-die-rank): the job fails instead of going on, the launcher names the rank SIGKILL
 * killed, within 30 s. out (out_nbytes) holds the output, for what the survivors say. Three
 * CHECKs. */
static inline void check_killed_rank_stops_the_job(const char *dir, const char *args, int dying, char *out,
                                                   size_t out_nbytes)
{
    char want[64];
    uint64_t t0 = sh_now_ns();
    int rc = sh_test_shoal_in(dir, "SHOAL_TIMEOUT=3000", "train", args, out, out_nbytes);
    double s = (double)(sh_now_ns() - t0) / 1e9;
    snprintf(want, sizeof want, "rank %d was killed by SIGKILL", dying);
    CHECK(rc != 0, "the job went on without rank %d: %s", dying, out);
    CHECK(strstr(out, want) != NULL, "the launcher does not name the lost rank: %s", out);
    CHECK(s < 30, "stopping took %.1f s", s);
}

/* --save-darknet from a split run of cfg in dir (the layout's flags `writer`, e.g.
 * "-n 2 --pipeline 2") writes the whole model, not rank 0's part: the size of one process's
 * file, the weights of the checkpoint the same run wrote (`shoal test` reads both alike);
 * and --weights takes it back into the layout `reader`, which then trains as one process
 * from it does. Runs in dir and leaves one.weights, two.ckpt and two.weights there; out
 * (out_nbytes) holds each command's output. Seven CHECKs. */
static inline void check_darknet_round_trip(const char *dir, const char *cfg, const char *writer, const char *reader,
                                            char *out, size_t out_nbytes)
{
    char args[1024];
    snprintf(args, sizeof args, "%s --data . --max-steps 6 --threads 1 --quiet --save-darknet one.weights", cfg);
    int rc = sh_test_shoal_in(dir, "", "train", args, out, out_nbytes);
    CHECK(rc == 0, "one process: exit %d: %s", rc, out);
    snprintf(args, sizeof args, "%s --data . %s --max-steps 6 --threads 1 --save two.ckpt --save-darknet two.weights",
             cfg, writer);
    rc = sh_test_shoal_in(dir, "", "train", args, out, out_nbytes);
    CHECK(rc == 0 && strstr(out, "saved two.weights (Darknet weights) at step 6"), "%s: exit %d: %s", writer, rc,
          out);
    long long two = sh_test_file_nbytes(dir, "two.weights"), one = sh_test_file_nbytes(dir, "one.weights");
    CHECK(two > 0 && two == one, "%s wrote %lld bytes, one process %lld", writer, two, one);

    snprintf(args, sizeof args, "%s --data . --threads 1 --json --weights two.ckpt", cfg);
    rc = sh_test_shoal_in(dir, "", "test", args, out, out_nbytes);
    CHECK(rc == 0, "test the checkpoint: exit %d: %s", rc, out);
    double acc_ckpt = sh_test_json_number(out, "accuracy"), loss_ckpt = sh_test_json_number(out, "loss");
    snprintf(args, sizeof args, "%s --data . --threads 1 --json --weights two.weights", cfg);
    rc = sh_test_shoal_in(dir, "", "test", args, out, out_nbytes);
    double acc_dn = sh_test_json_number(out, "accuracy"), loss_dn = sh_test_json_number(out, "loss");
    CHECK(rc == 0 && acc_dn == acc_ckpt && loss_dn == loss_ckpt,
          "the Darknet file tests %.6f %.6f, the checkpoint %.6f %.6f: %s", acc_dn, loss_dn, acc_ckpt, loss_ckpt,
          out);

    snprintf(args, sizeof args, "%s --data . --max-steps 3 --threads 1 --json --weights two.weights", cfg);
    rc = sh_test_shoal_in(dir, "", "train", args, out, out_nbytes);
    CHECK(rc == 0, "one process from the file: exit %d: %s", rc, out);
    double acc1 = sh_test_json_number(out, "accuracy"), loss1 = sh_test_json_number(out, "test_loss");
    snprintf(args, sizeof args, "%s --data . %s --max-steps 3 --threads 1 --json --weights two.weights", cfg, reader);
    rc = sh_test_shoal_in(dir, "", "train", args, out, out_nbytes);
    CHECK(rc == 0, "%s from the file: exit %d: %s", reader, rc, out);
    double acc2 = sh_test_json_number(out, "accuracy"), loss2 = sh_test_json_number(out, "test_loss");
    CHECK(acc2 == acc1 && loss2 - loss1 < 1e-5 && loss1 - loss2 < 1e-5,
          "%s from the file: accuracy %.6f, test loss %.6f; one process %.6f, %.6f", reader, acc2, loss2, acc1,
          loss1);
}

#endif
