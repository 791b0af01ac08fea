/* test_train_unlabelled.c — proves training without labels on the real binary ($SHOAL_BIN):
 * src/train/targets.c, the loader's targets (src/data/loader.c) and `shoal test --target`:
 * a convolutional autoencoder ([deconvolutional], [upsample], a regression [cost]) learns its
 * input (--target input) and another data set's images (--target DIR), alone and on 2
 * data-parallel ranks, its --json giving no accuracy; a run resumed halfway ends with the
 * straight run's checkpoint byte for byte; `shoal sample` draws its reconstructions as a
 * PNG; what does not fit is refused in one line: no --target for a regression, --target for a
 * net with labels, targets of another shape or count, the input as the target of a net whose
 * output is not the input's shape, targets under --pipeline. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "lib/run.h"
#include "train/tiny_data.h"

static char dir[256];
static char bin[1024];

static const char ae_cfg[] =
    "[net]\nbatch=16\nwidth=8\nheight=8\nchannels=1\nlearning_rate=0.02\nmomentum=0.9\ndecay=0\n"
    "[convolutional]\nfilters=8\nsize=3\nstride=2\npad=1\nactivation=relu\n"
    "[local]\nfilters=4\nsize=3\npad=1\nactivation=leaky\n"
    "[upsample]\nstride=2\n"
    "[deconvolutional]\nfilters=1\nsize=3\nstride=1\npad=1\nactivation=logistic\n"
    "[cost]\ntype=sse\n";

static int run_shoal(const char *args, char *out, size_t out_nbytes)
{
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "cd %s && %s %s 2>&1", dir, bin, args);
    return sh_test_run(cmd, out, out_nbytes);
}

static double num(const char *text, const char *key)
{
    char pat[64];
    snprintf(pat, sizeof pat, "\"%s\":", key);
    const char *p = strstr(text, pat);
    return p ? strtod(p + strlen(pat), NULL) : NAN;
}

/* The tiny set's images turned upside down and inverted, as IDX files in dir/sub: a target
 * data set (labels all 0), side x side pixels (the 8x8 image tiled), `scale` times as many. */
static const char targets_py[] =
    "import sys\n"
    "sub, side, scale = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])\n"
    "for split in ('train', 't10k'):\n"
    "    raw = open(split + '-images-idx3-ubyte', 'rb').read()\n"
    "    n, px = int.from_bytes(raw[4:8], 'big'), raw[16:]\n"
    "    out = bytearray()\n"
    "    for i in range(n * scale):\n"
    "        img = px[(i % n) * 64:(i % n) * 64 + 64]\n"
    "        out += bytes(255 - img[(7 - y % 8) * 8 + x % 8] for y in range(side) for x in range(side))\n"
    "    be = lambda v: v.to_bytes(4, 'big')\n"
    "    open(sub + '/' + split + '-images-idx3-ubyte', 'wb').write(be(0x803) + be(n * scale) + be(side) * 2 + out)\n"
    "    open(sub + '/' + split + '-labels-idx1-ubyte', 'wb').write(be(0x801) + be(n * scale) + bytes(n * scale))\n";

static int write_targets(const char *sub, int side, int scale)
{
    char cmd[2048], out[256];
    CHECK(tiny_write_file(dir, "targets.py", targets_py) == 0, "writing targets.py");
    snprintf(cmd, sizeof cmd, "cd %s && mkdir -p %s && /usr/bin/python3 targets.py %s %d %d && echo ok", dir, sub, sub,
             side, scale);
    return sh_test_run(cmd, out, sizeof out) == 0 && !strncmp(out, "ok", 2);
}

static void autoencoder_learns_its_input(void)
{
    static char out[16384];
    int rc = run_shoal("train ae.cfg --data . --target input --max-steps 1 --threads 1 --json --quiet", out, sizeof out);
    double first = num(out, "test_loss");
    CHECK(rc == 0, "one step: exit %d: %s", rc, out);
    rc = run_shoal("train ae.cfg --data . --target input --epochs 10 --threads 1 --json --quiet --save ae.ckpt", out,
                   sizeof out);
    double last = num(out, "test_loss");
    CHECK(rc == 0 && last < 0.5 * first, "reconstruction error %g -> %g: %s", first, last, out);
    CHECK(num(out, "accuracy") == -1, "no accuracy without labels: %s", out);
    rc = run_shoal("train ae.cfg --data . --target input --epochs 1 --threads 1", out, sizeof out);
    CHECK(rc == 0 && strstr(out, "epoch 1: train loss") && strstr(out, ", test loss ") && !strstr(out, "accuracy") &&
          strstr(out, "\ntest loss "), "lines without accuracy: %s", out);
    rc = run_shoal("test ae.cfg --data . --target input --weights ae.ckpt --json", out, sizeof out);
    CHECK(rc == 0 && fabs(num(out, "loss") - last) < 1e-4 * (1 + last), "shoal test: %s (train said %g)", out, last);
    rc = run_shoal("sample ae.cfg --weights ae.ckpt --data . -o recon.png --samples 4", out, sizeof out);
    struct stat st;
    char png[512];
    snprintf(png, sizeof png, "%s/recon.png", dir);
    CHECK(rc == 0 && strstr(out, "4 test images and their reconstructions") && stat(png, &st) == 0 && st.st_size > 50,
          "reconstructions: %s", out);
}

static void autoencoder_learns_another_data_sets_images(void)
{
    static char out[16384];
    CHECK(write_targets("flipped", 8, 1), "writing the target set");
    int rc = run_shoal("train ae.cfg --data . --target flipped --max-steps 1 --threads 1 --json --quiet", out,
                       sizeof out);
    double first = num(out, "test_loss");
    rc = run_shoal("train ae.cfg --data . --target flipped --epochs 10 --threads 1 --json --quiet", out, sizeof out);
    double last = num(out, "test_loss");
    CHECK(rc == 0 && last < 0.6 * first, "error against the flipped images %g -> %g: %s", first, last, out);
    /* ... and it is another task: the input as the target scores worse on the same weights */
    rc = run_shoal("train ae.cfg --data . --target flipped --epochs 10 --threads 1 --quiet --save fl.ckpt", out,
                   sizeof out);
    rc = run_shoal("test ae.cfg --data . --target input --weights fl.ckpt --json", out, sizeof out);
    CHECK(rc == 0 && num(out, "loss") > 2 * last, "the flipped net against its input: %s (flipped %g)", out, last);
    rc = run_shoal("test ae.cfg --data . --target flipped --weights fl.ckpt --json", out, sizeof out);
    CHECK(rc == 0 && fabs(num(out, "loss") - last) < 1e-4 * (1 + last), "shoal test --target DIR: %s", out);
}

static void two_ranks_and_resume(void)
{
    static char out[16384];
    int rc = run_shoal("train ae.cfg --data . --target input --epochs 4 --threads 1 -n 2 --batch 8 --json --quiet", out,
                       sizeof out);
    double two = num(out, "test_loss");
    rc |= run_shoal("train ae.cfg --data . --target input --epochs 4 --threads 1 --json --quiet", out, sizeof out);
    double one = num(out, "test_loss");
    CHECK(rc == 0 && fabs(two - one) < 0.05 * one, "2 ranks x 8 images: %g, one rank of 16: %g", two, one);
    rc = run_shoal("train ae.cfg --data . --target input --max-steps 30 --threads 1 --quiet --save straight.ckpt", out,
                   sizeof out);
    rc |= run_shoal("train ae.cfg --data . --target input --max-steps 13 --threads 1 --quiet --save half.ckpt", out,
                    sizeof out);
    rc |= run_shoal("train ae.cfg --data . --target input --max-steps 30 --threads 1 --quiet --resume half.ckpt "
                    "--save half.ckpt", out, sizeof out);
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "cd %s && cmp straight.ckpt half.ckpt && echo same", dir);
    CHECK(rc == 0 && sh_test_run(cmd, out, sizeof out) == 0 && strstr(out, "same"), "resumed: %s", out);
}

static void what_does_not_fit_is_refused(void)
{
    static char out[8192];
    CHECK(write_targets("big", 16, 1) && write_targets("more", 8, 2), "writing the target sets");
    static const struct {
        const char *args, *want;
    } cases[] = {
        {"train ae.cfg --data .", "ae.cfg ends in a regression [cost]: give its targets with --target input"},
        {"train mlp.cfg --data . --target input", "--target input: mlp.cfg learns from the data's labels"},
        {"train ae.cfg --data . --target big", "--target: big/train-images-idx3-ubyte has 1x16x16 images (256 values) but ae.cfg outputs 64"},
        {"train ae.cfg --data . --target more", "give one target image per image"},
        {"train half.cfg --data . --target input", "the net outputs 16 values per image but takes 64"},
        {"train ae.cfg --data . --target input -n 2 --pipeline 2", "--pipeline and --hybrid pass labels"},
        {"train ae.cfg --data . --target nowhere", "nowhere"},
        {"test ae.cfg --data . --weights ae.ckpt", "give its targets as in training, --target input or --target DIR"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int rc = run_shoal(cases[i].args, out, sizeof out);
        CHECK(rc == 1 && strstr(out, cases[i].want) && strstr(out, "shoal"), "%s: exit %d: %s", cases[i].args, rc, out);
    }
}

int main(void)
{
    check_begin("test_train_unlabelled", 300);
    const char *b = sh_test_shoal_bin();
    if (tiny_make_dir(dir, sizeof dir) != 0 || !realpath(b, bin)) {
        CHECK(0, "setup: %s", b);
        return check_end();
    }
    CHECK(tiny_write_file(dir, "ae.cfg", ae_cfg) == 0 &&
          tiny_write_file(dir, "half.cfg", "[net]\nbatch=16\nwidth=8\nheight=8\nchannels=1\n"
                                           "[convolutional]\nfilters=1\nsize=3\nstride=2\npad=1\n[cost]\n") == 0,
          "writing the cfgs");
    RUN(autoencoder_learns_its_input);
    RUN(autoencoder_learns_another_data_sets_images);
    RUN(two_ranks_and_resume);
    RUN(what_does_not_fit_is_refused);
    tiny_remove_dir(dir);
    return check_end();
}
