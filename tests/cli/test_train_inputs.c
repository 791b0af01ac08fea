/* test_train_inputs.c — proves what `shoal train` and `shoal test` say about inputs that are
 * not what they claim (src/train/train_api.c, snapshot.c, eval.c, src/data, src/nn): a FIFO,
 * a directory or a device where a file goes is one line at once (never a wait in open()),
 * weights holding NaN are refused naming the layer, IDX images of another shape and a label
 * out of range name what is wrong and where, a batch too large for the machine names the
 * batch that fits before allocating, and a cfg error names its section once. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/util.h"
#include "check.h"
#include "lib/run.h"
#include "nn/darknet_weights.h"
#include "nn/net.h"
#include "train/tiny_data.h"

static char dir[256], out[1 << 16];

/* `shoal CMD ARGS` in dir under `timeout` (a FIFO must not hold it); its exit code, and the
 * seconds it took in *s. */
static int run(const char *cmd, const char *args, double *s)
{
    char full[2048];
    snprintf(full, sizeof full, "%s %s", cmd, args);
    uint64_t t0 = sh_now_ns();
    int rc = sh_test_shoal_in(dir, "timeout -s KILL 20", full, "", out, sizeof out);
    if (s) *s = (double)(sh_now_ns() - t0) / 1e9;
    return rc;
}

static int lines(const char *text)
{
    int n = 0;
    for (const char *p = text; *p; p++) n += *p == '\n';
    return n;
}

/* A FIFO, a directory or a device where a file goes: one line naming the flag and the kind
 * of thing, at once. */
static void not_files_are_refused_before_opening(void)
{
    char path[512];
    snprintf(path, sizeof path, "%s/pipe", dir);
    CHECK(mkfifo(path, 0600) == 0, "mkfifo %s", path);
    snprintf(path, sizeof path, "%s/w.weights", dir);
    CHECK(mkdir(path, 0755) == 0, "mkdir %s", path);
    static const struct {
        const char *cmd, *args, *want;
    } cases[] = {
        {"train", "mlp.cfg --data . --resume pipe", "--resume pipe is a FIFO (named pipe), not a file"},
        {"train", "mlp.cfg --data . --weights pipe", "--weights pipe is a FIFO (named pipe), not a file"},
        {"train", "mlp.cfg --data . --weights w.weights", "--weights w.weights is a directory, not a file"},
        {"train", "mlp.cfg --data pipe", "--data pipe is a FIFO (named pipe), not a dataset directory or a file"},
        {"train", "mlp.cfg --data /dev/null", "--data /dev/null is a character device"},
        {"train", "mlp.cfg --data . --test-data pipe", "--test-data pipe is a FIFO (named pipe)"},
        {"train", "pipe --data .", "the model pipe is a FIFO (named pipe)"},
        {"train", "mlp.cfg --data . --ps -n 2 --resume pipe", "--resume pipe is a FIFO"},
        {"test", "mlp.cfg --data . --weights pipe", "weights pipe is a FIFO (named pipe), not a file"},
        {"test", "mlp.cfg --data . --weights w.weights", "weights w.weights is a directory, not a file"},
        {"test", "mlp.cfg --data pipe --weights w.weights", "is a directory"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        double s = 0;
        int rc = run(cases[i].cmd, cases[i].args, &s);
        CHECK(rc != 0 && rc != -1 && strstr(out, cases[i].want) && lines(out) == 1, "%s %s: exit %d: %s",
              cases[i].cmd, cases[i].args, rc, out);
        CHECK(s < 10, "%s %s: took %.1f s", cases[i].cmd, cases[i].args, s);
    }
}

/* Darknet .weights of mlp.cfg with every weight of its last [connected] NaN. */
static int write_nan_weights(const char *path, int *layer)
{
    char cfg[512];
    snprintf(cfg, sizeof cfg, "%s/mlp.cfg", dir);
    sh_net *net = NULL;
    if (sh_net_load(cfg, 0, 1, &net) != SHOAL_OK) return -1;
    *layer = sh_net_nlayers(net) - 3; /* then [softmax], [cost] */
    size_t off = 0, n = 0;
    sh_net_layer_params(net, *layer, &off, &n);
    for (size_t k = 0; k < n; k++) sh_net_params(net)[off + k] = NAN;
    shoal_result rc = sh_darknet_weights_save(net, path, 0);
    sh_net_destroy(net);
    return rc == SHOAL_OK ? 0 : -1;
}

/* `shoal test` and `shoal train --weights` refuse weights of a diverged run, naming the
 * layer, instead of measuring 25% (chance on 4 classes) without a word. */
static void nan_weights_are_refused_by_test_and_train(void)
{
    char path[512], want[64];
    int layer = -1;
    snprintf(path, sizeof path, "%s/nan.weights", dir);
    CHECK(write_nan_weights(path, &layer) == 0, "cannot write %s", path);
    snprintf(want, sizeof want, "layer %d (", layer);
    int rc = run("test", "mlp.cfg --data . --weights nan.weights", NULL);
    CHECK(rc == 1 && strstr(out, want) && strstr(out, "NaN") && strstr(out, "diverged") && lines(out) == 1,
          "exit %d: %s", rc, out);
    rc = run("train", "mlp.cfg --data . --weights nan.weights --max-steps 2 --threads 1", NULL);
    CHECK(rc == 1 && strstr(out, want) && !strstr(out, "accuracy"), "exit %d: %s", rc, out);
}

static void put_be32(FILE *f, uint32_t v)
{
    unsigned char b[4] = {(unsigned char)(v >> 24), (unsigned char)(v >> 16), (unsigned char)(v >> 8),
                          (unsigned char)v};
    fwrite(b, 1, 4, f);
}

/* In sub/: train- and t10k- IDX files of count images of rows x cols, labels i % 4 but for
 * image 5 of the training set, which gets bad_label (< 0: none). */
static void write_idx(const char *sub, int rows, int cols, int bad_label)
{
    char d[512], path[600];
    snprintf(d, sizeof d, "%s/%s", dir, sub);
    mkdir(d, 0755);
    const char *splits[2] = {"train", "t10k"};
    for (int s = 0; s < 2; s++) {
        int count = s ? 32 : 64;
        snprintf(path, sizeof path, "%s/%s-images-idx3-ubyte", d, splits[s]);
        FILE *fi = fopen(path, "wb");
        snprintf(path, sizeof path, "%s/%s-labels-idx1-ubyte", d, splits[s]);
        FILE *fl = fopen(path, "wb");
        if (!fi || !fl) {
            CHECK(0, "cannot write IDX files in %s", d);
            if (fi) fclose(fi);
            if (fl) fclose(fl);
            return;
        }
        put_be32(fi, 0x803);
        put_be32(fi, (uint32_t)count);
        put_be32(fi, (uint32_t)rows);
        put_be32(fi, (uint32_t)cols);
        put_be32(fl, 0x801);
        put_be32(fl, (uint32_t)count);
        for (int i = 0; i < count; i++) {
            for (int p = 0; p < rows * cols; p++) fputc((i * 7 + p) & 0xff, fi);
            fputc(!s && i == 5 && bad_label >= 0 ? bad_label : i % 4, fl);
        }
        fclose(fi);
        fclose(fl);
    }
}

/* Images of another shape with as many values (1x64, 4x16 for an 8x8 model) are refused
 * naming both shapes; a label out of range is blamed on the labels file, with the image. */
static void idx_shape_and_labels_are_checked(void)
{
    write_idx("flat", 1, 64, -1);
    write_idx("wide", 4, 16, -1);
    write_idx("badlabel", 8, 8, 200);
    static const struct {
        const char *cmd, *args, *want;
    } cases[] = {
        {"train", "mlp.cfg --data flat --max-steps 2 --threads 1", "holds 1x64 images (height x width, 1 channel) but "
         "mlp.cfg expects 8x8 (1 channel)"},
        {"train", "mlp.cfg --data wide --max-steps 2 --threads 1", "holds 4x16 images"},
        {"train", "mlp.cfg --data badlabel --max-steps 2 --threads 1", "labels file badlabel/train-labels-idx1-ubyte "
         "holds label 200 (image 5) but mlp.cfg outputs 4 classes (0..3)"},
        {"test", "mlp.cfg --data flat --weights nan.weights", "holds 1x64 images"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        if (!strcmp(cases[i].cmd, "test")) { /* weights that load: the data is what is wrong */
            char path[512];
            snprintf(path, sizeof path, "%s/mlp.cfg", dir);
            sh_net *net = NULL;
            if (sh_net_load(path, 0, 1, &net) == SHOAL_OK) {
                snprintf(path, sizeof path, "%s/nan.weights", dir);
                sh_darknet_weights_save(net, path, 0);
            }
            sh_net_destroy(net);
        }
        int rc = run(cases[i].cmd, cases[i].args, NULL);
        CHECK(rc == 1 && strstr(out, cases[i].want) && lines(out) <= 2, "%s %s: exit %d: %s", cases[i].cmd,
              cases[i].args, rc, out);
    }
}

/* A batch the machine cannot hold names the buffer and the batch that fits, before asking
 * for the memory (no "out of memory allocating N bytes"). */
static void a_batch_too_large_names_the_batch_that_fits(void)
{
    tiny_write_file(dir, "fat.cfg",
                    "[net]\nbatch=16\nwidth=8\nheight=8\nchannels=1\nlearning_rate=0.01\n"
                    "\n[convolutional]\nfilters=4096\nsize=3\npad=1\nactivation=relu\n"
                    "\n[connected]\noutput=4\nactivation=linear\n\n[softmax]\n\n[cost]\n");
    double s = 0;
    int rc = run("train", "fat.cfg --data . --batch 1000000 --max-steps 1 --threads 1", &s);
    CHECK(rc == 1 && strstr(out, "the activations") && strstr(out, "at batch 1000000 need") &&
              strstr(out, "use --batch ") && !strstr(out, "out of memory allocating") && lines(out) == 1,
          "exit %d: %s", rc, out);
    const char *b = strstr(out, "use --batch ");
    long fits = b ? strtol(b + 12, NULL, 10) : 0;
    CHECK(fits >= 1 && fits < 1000000, "the batch that fits: %ld", fits);
    CHECK(s < 10, "took %.1f s", s);
}

/* A cfg error names its section once: "[shortcut] cannot be the first layer". */
static void cfg_errors_name_the_section_once(void)
{
    tiny_write_file(dir, "sc.cfg", "[net]\nbatch=16\nwidth=8\nheight=8\nchannels=1\n\n[shortcut]\nfrom=-1\n"
                                   "\n[connected]\noutput=4\n\n[softmax]\n\n[cost]\n");
    int rc = run("train", "sc.cfg --data . --max-steps 1", NULL);
    CHECK(rc != 0 && strstr(out, "sc.cfg:7: [shortcut] cannot be the first layer") &&
              sh_test_count(out, "[shortcut]") == 1,
          "exit %d: %s", rc, out);
}

int main(void)
{
    check_begin("test_train_inputs", 120);
    if (tiny_make_dir(dir, sizeof dir) != 0) {
        CHECK(0, "cannot make the tiny dataset");
        return check_end();
    }
    RUN(not_files_are_refused_before_opening);
    RUN(nan_weights_are_refused_by_test_and_train);
    RUN(idx_shape_and_labels_are_checked);
    RUN(a_batch_too_large_names_the_batch_that_fits);
    RUN(cfg_errors_name_the_section_once);
    tiny_remove_dir(dir);
    return check_end();
}
