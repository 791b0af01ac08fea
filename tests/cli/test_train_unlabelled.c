/* test_train_unlabelled.c — proves training without labels on the real binary ($SHOAL_BIN):
 * src/train/targets.c, the loader's targets (src/data/loader.c) and `shoal test --target`:
 * a convolutional autoencoder ([deconvolutional], [upsample], a regression [cost]) learns its
 * input (--target input) and another data set's images (--target DIR), alone and on 2
 * data-parallel ranks, its --json giving no accuracy; a run resumed halfway ends with the
 * straight run's checkpoint byte for byte; from PyTorch's initial weights (as Darknet .weights)
 * it takes PyTorch's steps (full batches: the order of the images cannot matter), the test
 * error equal within 1e-4; `shoal sample` draws its reconstructions as a
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

/* The same autoencoder in PyTorch (conv 8 s2 relu, deconv 4 s2 p1 logistic), its initial
 * weights written as Darknet .weights, 6 full-batch SGD steps; prints the test error. */
static const char torch_py[] =
    "import struct, sys, numpy as np, torch\n"
    "torch.set_default_dtype(torch.float64)\n"
    "def load(split):\n"
    "    raw = open(split + '-images-idx3-ubyte', 'rb').read()\n"
    "    return torch.tensor(np.frombuffer(raw, np.uint8, offset=16).astype(np.float64) / 255).reshape(-1, 1, 8, 8)\n"
    "torch.manual_seed(3)\n"
    "net = torch.nn.Sequential(torch.nn.Conv2d(1, 8, 3, 2, 1), torch.nn.ReLU(),\n"
    "                          torch.nn.ConvTranspose2d(8, 1, 4, 2, 1), torch.nn.Sigmoid())\n"
    "with open('init.weights', 'wb') as f:\n"
    "    f.write(struct.pack('<iiiQ', 0, 2, 0, 0))\n"
    "    for m in (net[0], net[2]):\n"
    "        f.write(m.bias.detach().numpy().astype(np.float32).tobytes())\n"
    "        f.write(m.weight.detach().numpy().astype(np.float32).tobytes())\n"
    "with torch.no_grad():\n"
    "    for m in (net[0], net[2]):\n"
    "        for p in (m.bias, m.weight): p.copy_(p.float().double())\n"
    "x, t = load('train'), load('t10k')\n"
    "opt = torch.optim.SGD(net.parameters(), lr=0.002, momentum=0.9)\n"
    "for step in range(6):\n"
    "    loss = 0.5 * ((net(x) - x) ** 2).sum() / len(x)\n"
    "    opt.zero_grad(); loss.backward(); opt.step()\n"
    "with torch.no_grad():\n"
    "    print('%.9g' % float(0.5 * ((net(t) - t) ** 2).sum() / len(t)))\n";

static void autoencoder_takes_pytorchs_steps(void)
{
    static char out[8192];
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "/usr/bin/python3 -c 'import torch' 2>/dev/null && echo yes");
    if (sh_test_run(cmd, out, sizeof out) != 0 || strncmp(out, "yes", 3)) {
        printf("test_train_unlabelled: /usr/bin/python3 has no torch; comparison with PyTorch skipped\n");
        return;
    }
    CHECK(tiny_write_file(dir, "ae_torch.py", torch_py) == 0 &&
          tiny_write_file(dir, "small.cfg", "[net]\nbatch=256\nwidth=8\nheight=8\nchannels=1\nlearning_rate=0.002\n"
                                            "momentum=0.9\ndecay=0\n[convolutional]\nfilters=8\nsize=3\nstride=2\npad=1\n"
                                            "activation=relu\n[deconvolutional]\nfilters=1\nsize=4\nstride=2\npadding=1\n"
                                            "activation=logistic\n[cost]\n") == 0, "writing the files");
    snprintf(cmd, sizeof cmd, "cd %s && /usr/bin/python3 ae_torch.py 2>&1", dir);
    int rc = sh_test_run(cmd, out, sizeof out);
    double torch_loss = strtod(out, NULL);
    CHECK(rc == 0 && torch_loss > 0, "ae_torch.py: %s", out);
    rc = run_shoal("train small.cfg --data . --target input --weights init.weights --max-steps 6 --threads 1 --json "
                   "--quiet", out, sizeof out);
    double mine = num(out, "test_loss");
    CHECK(rc == 0 && fabs(mine - torch_loss) <= 1e-4 * torch_loss, "test error after 6 steps: shoal %.9g, PyTorch %.9g: %s",
          mine, torch_loss, out);
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
    RUN(autoencoder_takes_pytorchs_steps);
    RUN(what_does_not_fit_is_refused);
    tiny_remove_dir(dir);
    return check_end();
}
