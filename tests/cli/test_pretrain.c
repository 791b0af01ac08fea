/* test_pretrain.c — proves `shoal pretrain` (src/cli/cmd_pretrain.c, src/train/pretrain.c) and
 * `shoal sample`'s deep-belief-net half (src/cli/cmd_sample.c) on the real binary ($SHOAL_BIN):
 * a DBN's [rbm] layers pretrained one after the other lower their loss (minus the
 * pseudo-likelihood) and hand `shoal train --weights` weights that train; a run stopped inside
 * the second [rbm] and resumed ends with the straight run's weights byte for byte, alone and
 * on 2 ranks; 2 data-parallel ranks pretrain as well as one; the samples are a PNG (or SVG) of
 * the net's images; what is not mapped is refused in one line: a net without [rbm], the final
 * weights or another cfg's checkpoint given to --resume, the weights file given to train
 * --resume, bad flags and file names. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "lib/run.h"
#include "train/tiny_data.h"

static char dir[256];
static char bin[1024];

static const char dbn_cfg[] =
    "[net]\nbatch=16\nwidth=8\nheight=8\nchannels=1\nlearning_rate=0.5\nmomentum=0.9\ndecay=0.0005\n"
    "[rbm]\noutput=24\nlearning_rate=0.1\nmomentum=0.5\n"
    "[rbm]\noutput=12\npersistent=1\nsample_visible=1\n"
    "[connected]\noutput=4\nactivation=linear\n[softmax]\n";

static int run_shoal(const char *args, char *out, size_t out_nbytes)
{
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "cd %s && %s %s 2>&1", dir, bin, args);
    return sh_test_run(cmd, out, out_nbytes);
}

/* The value after the n-th (0-based) "key": in text; NAN when absent. */
static double nth_num(const char *text, const char *key, int nth)
{
    char pat[64];
    snprintf(pat, sizeof pat, "\"%s\":", key);
    const char *p = text;
    for (int i = 0; p && i <= nth; i++) {
        p = strstr(p, pat);
        if (p && i < nth) p += strlen(pat);
    }
    return p ? strtod(p + strlen(pat), NULL) : NAN;
}

static int same_files(const char *a, const char *b)
{
    char cmd[1024], out[64];
    snprintf(cmd, sizeof cmd, "cd %s && cmp -s %s %s && echo same", dir, a, b);
    return sh_test_run(cmd, out, sizeof out) == 0 && !strncmp(out, "same", 4);
}

static void pretrained_weights_lower_the_loss_and_fine_tune(void)
{
    static char out[16384];
    int rc = run_shoal("pretrain dbn.cfg --data . --max-steps 1 --threads 1 --json --quiet", out, sizeof out);
    CHECK(rc == 0, "one step: exit %d: %s", rc, out);
    double first0 = nth_num(out, "test_loss", 0), first1 = nth_num(out, "test_loss", 1);
    rc = run_shoal("pretrain dbn.cfg --data . --epochs 3 --threads 1 --save w.ckpt --json", out, sizeof out);
    CHECK(rc == 0, "pretrain: exit %d: %s", rc, out);
    CHECK(strstr(out, "pretrain dbn.cfg: [rbm] layer 0 (1 of 2, line 9): 24 hidden units over 64 binary") &&
          strstr(out, "[rbm] layer 1 (2 of 2, line 13): 12 hidden units over 24 binary visible units, persistent CD-1"),
          "the stages are named: %s", out);
    double last0 = nth_num(out, "test_loss", 0), last1 = nth_num(out, "test_loss", 1);
    CHECK(last0 < 0.95 * first0 && last1 < 0.95 * first1, "minus the pseudo-likelihood %g -> %g, %g -> %g", first0, last0,
          first1, last1);
    CHECK(sh_test_file_nbytes(dir, "w.ckpt") > 0, "the weights were written");
    rc = run_shoal("train dbn.cfg --data . --weights w.ckpt --epochs 4 --threads 1 --json", out, sizeof out);
    double acc = nth_num(out, "accuracy", 0);
    CHECK(rc == 0 && acc >= 0.9, "fine-tuned: exit %d, accuracy %g: %s", rc, acc, out);
    rc = run_shoal("train dbn.cfg --data . --epochs 4 --threads 1 --json", out, sizeof out);
    double random_acc = nth_num(out, "accuracy", 0);
    CHECK(rc == 0 && acc >= random_acc, "pretrained %g, from random weights %g", acc, random_acc);
    rc = run_shoal("test dbn.cfg --data . --weights w.ckpt --json", out, sizeof out);
    CHECK(rc == 0, "shoal test reads the pretrained weights: %s", out);
}

/* Stopped before step 5 of the second [rbm] (its checkpoint saved), resumed: the final weights
 * equal the straight run's byte for byte. */
static void resume_inside_the_second_rbm_ends_bit_for_bit(int ranks)
{
    static char out[16384];
    char args[512], n[16] = "";
    if (ranks > 1) snprintf(n, sizeof n, "-n %d ", ranks);
    snprintf(args, sizeof args, "pretrain dbn.cfg --data . --epochs 2 --threads 1 %s--save straight.w --quiet", n);
    int rc = run_shoal(args, out, sizeof out);
    CHECK(rc == 0, "straight run (%d rank(s)): exit %d: %s", ranks, rc, out);
    snprintf(args, sizeof args, "pretrain dbn.cfg --data . --epochs 2 --threads 1 %s--save part.w --save-every 1000 "
             "--debug-stop-at 1:5 --quiet", n);
    rc = run_shoal(args, out, sizeof out);
    CHECK(rc == 1 && strstr(out, "stopped by signal 2 in [rbm] layer 1; continue with --resume"), "stopped: exit %d: %s",
          rc, out);
    snprintf(args, sizeof args, "pretrain dbn.cfg --data . --epochs 2 --threads 1 %s--resume part.w --save part.w --json",
             n);
    rc = run_shoal(args, out, sizeof out);
    CHECK(rc == 0 && strstr(out, "\"layer\":1,\"resumed\":true"), "resumed: exit %d: %s", rc, out);
    CHECK(!strstr(out, "\"layer\":0"), "the first [rbm] is not trained again: %s", out);
    CHECK(same_files("straight.w", "part.w"), "%d rank(s): the resumed run's weights differ from the straight run's",
          ranks);
}

static void resume_alone(void) { resume_inside_the_second_rbm_ends_bit_for_bit(1); }
static void resume_on_two_ranks(void) { resume_inside_the_second_rbm_ends_bit_for_bit(2); }

static void two_ranks_pretrain_as_well_as_one(void)
{
    static char out[16384];
    int rc = run_shoal("pretrain dbn.cfg --data . --epochs 2 --threads 1 --json --quiet", out, sizeof out);
    double one = nth_num(out, "test_loss", 0);
    CHECK(rc == 0, "one rank: %s", out);
    rc = run_shoal("pretrain dbn.cfg --data . --epochs 2 --threads 1 -n 2 --batch 8 --json --quiet --save two.w", out,
                   sizeof out);
    double two = nth_num(out, "test_loss", 0);
    CHECK(rc == 0 && nth_num(out, "ranks", 0) == 2, "two ranks: exit %d: %s", rc, out);
    /* the same global batch (2 x 8) and steps: the same loss but for the chains' draws */
    CHECK(fabs(two - one) < 0.05 * one, "minus the pseudo-likelihood: one rank %g, two ranks %g", one, two);
}

static int png_size(const char *name, int *w, int *h)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "rb");
    unsigned char b[24] = {0};
    int ok = f && fread(b, 1, 24, f) == 24 && !memcmp(b, "\x89PNG\r\n\x1a\n", 8) && !memcmp(b + 12, "IHDR", 4);
    if (f) fclose(f);
    *w = b[16] << 24 | b[17] << 16 | b[18] << 8 | b[19];
    *h = b[20] << 24 | b[21] << 16 | b[22] << 8 | b[23];
    return ok;
}

static void samples_are_an_image_grid(void)
{
    static char out[8192];
    int rc = run_shoal("sample dbn.cfg --weights w.ckpt -o s.png --samples 9 --gibbs-steps 50", out, sizeof out);
    int w = 0, h = 0;
    CHECK(rc == 0 && strstr(out, "wrote s.png: 9 samples of dbn.cfg"), "sample: exit %d: %s", rc, out);
    /* 3 x 3 tiles of 8x8 with a 1-pixel border */
    CHECK(png_size("s.png", &w, &h) && w == 28 && h == 28, "s.png is a 28x28 PNG: %dx%d", w, h);
    rc = run_shoal("sample dbn.cfg --weights w.ckpt -o s.svg --samples 4 --gibbs-steps 10 --data . --layer 0", out,
                   sizeof out);
    char svg[65536] = "";
    char cmd[512];
    snprintf(cmd, sizeof cmd, "cat %s/s.svg", dir);
    sh_test_run(cmd, svg, sizeof svg);
    CHECK(rc == 0 && strstr(svg, "<svg") && strstr(svg, "data:image/png;base64,iVBORw0KGgo"), "svg: %s %.200s", out,
          svg);
    rc = run_shoal("sample dbn.cfg --weights w.ckpt -o s.jpg", out, sizeof out);
    CHECK(rc == 1 && strstr(out, "s.jpg: an image grid is written as PNG or SVG"), "jpg: %s", out);
    rc = run_shoal("sample dbn.cfg -o s.png", out, sizeof out);
    CHECK(rc == 2 && strstr(out, "missing --weights"), "no weights: %s", out);
}

static void what_is_not_mapped_is_refused(void)
{
    static char out[8192];
    int rc = run_shoal("pretrain plain.cfg --data .", out, sizeof out);
    CHECK(rc == 1 && strstr(out, "plain.cfg has no [rbm] layer"), "no [rbm]: %s", out);
    rc = run_shoal("pretrain dbn.cfg --data . --resume w.ckpt", out, sizeof out);
    CHECK(rc == 1 && strstr(out, "w.ckpt holds dbn.cfg's pretrained weights already"), "final weights: %s", out);
    rc = run_shoal("train plain.cfg --data . --max-steps 2 --save other.ckpt --quiet", out, sizeof out);
    rc = run_shoal("pretrain dbn.cfg --data . --resume other.ckpt", out, sizeof out);
    CHECK(rc == 1 && strstr(out, "other.ckpt is not a pretraining checkpoint of dbn.cfg"), "other cfg: %s", out);
    rc = run_shoal("train dbn.cfg --data . --resume w.ckpt", out, sizeof out);
    CHECK(rc == 1 && strstr(out, "w.ckpt holds weights only (no training position); start from them with --weights"),
          "train --resume weights: %s", out);
    rc = run_shoal("sample plain.cfg --weights other.ckpt -o p.png", out, sizeof out);
    CHECK(rc == 1 && strstr(out, "plain.cfg has no [rbm] layer"), "sample without [rbm]: %s", out);
    rc = run_shoal("pretrain dbn.cfg --save-every 3", out, sizeof out);
    CHECK(rc == 2 && strstr(out, "--save-every needs --save FILE"), "save-every: %s", out);
    rc = run_shoal("pretrain dbn.cfg --bogus", out, sizeof out);
    CHECK(rc == 2 && strstr(out, "unknown option \"--bogus\""), "unknown flag: %s", out);
    rc = run_shoal("pretrain --help", out, sizeof out);
    CHECK(rc == 0 && strstr(out, "usage: shoal pretrain CFG"), "help: %s", out);
}

int main(void)
{
    check_begin("test_pretrain", 300);
    const char *b = sh_test_shoal_bin();
    if (tiny_make_dir(dir, sizeof dir) != 0 || !realpath(b, bin)) {
        CHECK(0, "setup: %s", b);
        return check_end();
    }
    CHECK(tiny_write_file(dir, "dbn.cfg", dbn_cfg) == 0 &&
          tiny_write_file(dir, "plain.cfg", "[net]\nbatch=16\nwidth=8\nheight=8\nchannels=1\n[connected]\noutput=4\n"
                                            "activation=linear\n[softmax]\n") == 0,
          "writing the data set");
    RUN(pretrained_weights_lower_the_loss_and_fine_tune);
    RUN(resume_alone);
    RUN(resume_on_two_ranks);
    RUN(two_ranks_pretrain_as_well_as_one);
    RUN(samples_are_an_image_grid);
    RUN(what_is_not_mapped_is_refused);
    tiny_remove_dir(dir);
    return check_end();
}
