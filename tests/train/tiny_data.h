/* tiny_data.h — test helper: a tiny learnable IDX dataset (8x8 images, 4 classes, each class
 * a bright band of rows) and small .cfg files, written into a fresh temporary directory.
 * Not here: the tests (test_trainer.c, test_snapshot.c, tests/cli/test_train_cli.c).
 * Proved by the tests that use it: they train on it and check the accuracy it allows. */
#ifndef SH_TINY_DATA_H
#define SH_TINY_DATA_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define TINY_SIDE 8
#define TINY_CLASSES 4
#define TINY_TRAIN 256
#define TINY_TEST 64

static void tiny_put_be32(FILE *f, uint32_t v)
{
    unsigned char b[4] = {(unsigned char)(v >> 24), (unsigned char)(v >> 16),
                          (unsigned char)(v >> 8), (unsigned char)v};
    fwrite(b, 1, 4, f);
}

/* IDX files prefix/"-images-idx3-ubyte" and prefix/"-labels-idx1-ubyte", raw. */
static int tiny_write_split(const char *dir, const char *prefix, int count, uint32_t seed)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/%s-images-idx3-ubyte", dir, prefix);
    FILE *fi = fopen(path, "wb");
    snprintf(path, sizeof path, "%s/%s-labels-idx1-ubyte", dir, prefix);
    FILE *fl = fopen(path, "wb");
    if (!fi || !fl) {
        if (fi) fclose(fi);
        if (fl) fclose(fl);
        return -1;
    }
    tiny_put_be32(fi, 0x00000803);
    tiny_put_be32(fi, (uint32_t)count);
    tiny_put_be32(fi, TINY_SIDE);
    tiny_put_be32(fi, TINY_SIDE);
    tiny_put_be32(fl, 0x00000801);
    tiny_put_be32(fl, (uint32_t)count);
    uint32_t s = seed;
    for (int i = 0; i < count; i++) {
        int label = i % TINY_CLASSES;
        unsigned char img[TINY_SIDE * TINY_SIDE];
        for (int p = 0; p < TINY_SIDE * TINY_SIDE; p++) {
            s = s * 1664525u + 1013904223u; /* LCG: fixed data, no library involved */
            int row = p / TINY_SIDE;
            int bright = row / 2 == label;
            img[p] = (unsigned char)((bright ? 150 : 0) + (s >> 24) % 100);
        }
        fwrite(img, 1, sizeof img, fi);
        unsigned char lb = (unsigned char)label;
        fwrite(&lb, 1, 1, fl);
    }
    int bad = ferror(fi) || ferror(fl);
    bad |= fclose(fi) != 0;
    bad |= fclose(fl) != 0;
    return bad ? -1 : 0;
}

static int tiny_write_file(const char *dir, const char *name, const char *text)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    if (!f) return -1;
    fputs(text, f);
    return fclose(f);
}

/* A two-layer perceptron with dropout (so resume must restore the dropout RNG) and SGD with
 * momentum and decay (so it must restore the optimizer state). */
static const char tiny_mlp_cfg[] =
    "[net]\nbatch=16\nwidth=8\nheight=8\nchannels=1\n"
    "learning_rate=0.05\nmomentum=0.9\ndecay=0.0005\npolicy=steps\nsteps=40\nscales=.5\n"
    "max_batches=1000\n"
    "\n[connected]\noutput=24\nactivation=relu\n"
    "\n[dropout]\nprobability=.2\n"
    "\n[connected]\noutput=4\nactivation=linear\n"
    "\n[softmax]\n\n[cost]\n";

/* The same input and output, another hidden size: a different model. */
static const char tiny_other_cfg[] =
    "[net]\nbatch=16\nwidth=8\nheight=8\nchannels=1\n"
    "learning_rate=0.05\nmomentum=0.9\ndecay=0.0005\n"
    "\n[connected]\noutput=12\nactivation=relu\n"
    "\n[connected]\noutput=4\nactivation=linear\n"
    "\n[softmax]\n\n[cost]\n";

/* A small convolutional net for `shoal time --per-layer`. */
static const char tiny_conv_cfg[] =
    "[net]\nbatch=8\nwidth=8\nheight=8\nchannels=1\nlearning_rate=0.01\nmomentum=0.9\n"
    "\n[convolutional]\nfilters=4\nsize=3\nstride=1\npad=1\nactivation=relu\n"
    "\n[maxpool]\nsize=2\nstride=2\n"
    "\n[connected]\noutput=4\nactivation=linear\n"
    "\n[softmax]\n\n[cost]\n";

/* mkdtemp a directory holding the dataset and mlp.cfg, other.cfg, conv.cfg. Returns 0. */
static int tiny_make_dir(char *dir, size_t dir_nbytes)
{
    snprintf(dir, dir_nbytes, "/tmp/shoal-train-test-XXXXXX");
    if (!mkdtemp(dir)) return -1;
    if (tiny_write_split(dir, "train", TINY_TRAIN, 12345)) return -1;
    if (tiny_write_split(dir, "t10k", TINY_TEST, 777)) return -1;
    if (tiny_write_file(dir, "mlp.cfg", tiny_mlp_cfg)) return -1;
    if (tiny_write_file(dir, "other.cfg", tiny_other_cfg)) return -1;
    if (tiny_write_file(dir, "conv.cfg", tiny_conv_cfg)) return -1;
    return 0;
}

/* rm -r of the directory tiny_make_dir made (flat: files only). */
static void tiny_remove_dir(const char *dir)
{
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
}

#endif
