/* test_train_images.c — proves `shoal train --data` on pictures end to end (src/data/open.c,
 * the trainer's streamed loader, the flags): a folder of class folders trains to high
 * accuracy, a list file trains bit for bit as the folder does, 2 ranks under strong scaling
 * match one, a mid-epoch resume continues bit for bit (and refuses other pictures), bad
 * files are skipped and counted or stop --strict-data runs, DIR/train beside DIR/val is
 * read as ImageNet unpacks, folder mistakes are one clear
 * error, shoal test agrees with train, --data synthetic trains, and Fashion-MNIST as PNG class folders trains LeNet to the
 * IDX files' accuracy. Data: tests/cli/picture_sets.py. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "io/checkpoint.h"
#include "lib/run.h"
#include "nn/net.h"

static char dir[] = "/tmp/shoal_test_images_XXXXXX";
static char out[1 << 18];

/* Stripes in three directions: a small conv net tells them apart. */
static const char stripes_cfg[] =
    "[net]\nbatch=16\nwidth=24\nheight=24\nchannels=3\nlearning_rate=0.02\nmomentum=0.9\n"
    "min_crop=24\nmax_crop=30\nmean=0.5\nstd=0.25\n"
    "[convolutional]\nfilters=8\nsize=3\nstride=1\npad=1\nactivation=relu\n"
    "[maxpool]\nsize=2\nstride=2\n"
    "[convolutional]\nfilters=8\nsize=3\nstride=1\npad=1\nactivation=relu\n"
    "[maxpool]\nsize=2\nstride=2\n"
    "[connected]\noutput=3\nactivation=linear\n[softmax]\n";

static int shoal(const char *args)
{
    return sh_test_shoal_in(dir, "", "train", args, out, sizeof out);
}

static void write_text(const char *name, const char *text)
{
    char path[600];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    CHECK(f != NULL, "cannot write %s", path);
    if (!f) return;
    fputs(text, f);
    fclose(f);
}

static char repo[1024]; /* where the test started: the repository */

static void sh_in(const char *c)
{
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "cd %s && %s", dir, c);
    CHECK(system(cmd) == 0, "%s", cmd);
}

static float *load_params(const char *cfg, const char *ckpt, size_t *n)
{
    char c[600], k[600];
    snprintf(c, sizeof c, "%s/%s", dir, cfg);
    snprintf(k, sizeof k, "%s/%s", dir, ckpt);
    sh_net *net = NULL;
    if (sh_net_load(c, 0, 1, &net) != SHOAL_OK) return NULL;
    *n = sh_net_nparams(net);
    sh_net_destroy(net);
    float *p = malloc(*n * sizeof(float));
    sh_ckpt_section s = {"params", p, *n * sizeof(float)};
    if (sh_ckpt_load(k, &s, 1) != SHOAL_OK) {
        free(p);
        return NULL;
    }
    return p;
}

/* The largest |a - b| of two checkpoints' weights; -1 when one cannot be read. */
static double params_diff(const char *cfg, const char *a, const char *b)
{
    size_t na = 0, nb = 0;
    float *pa = load_params(cfg, a, &na), *pb = load_params(cfg, b, &nb);
    double worst = -1;
    if (pa && pb && na == nb) {
        worst = 0;
        for (size_t i = 0; i < na; i++) worst = fmax(worst, fabs((double)pa[i] - pb[i]));
    }
    free(pa);
    free(pb);
    return worst;
}

static void a_folder_of_class_folders_trains(void)
{
    int rc = shoal("stripes.cfg --data pics --epochs 6 --threads 1 --data-threads 2 --json --profile");
    CHECK(rc == 0, "exit %d: %s", rc, out);
    double acc = sh_test_json_number(out, "accuracy");
    CHECK(acc >= 0.9, "test accuracy %g on stripes: %s", acc, out);
    CHECK(sh_test_json_number(out, "data_wait_s") >= 0 && sh_test_json_number(out, "bad_files") == 0,
          "no data fields: %s", out);
    CHECK(strstr(out, "waited") && strstr(out, "decoded pictures"), "--profile says nothing of the data: %s", out);
    CHECK(strstr(out, "90 training and 30 test images"), "counts: %s", out);
}

static void a_list_file_trains_as_the_folder_does(void)
{
    int rc = shoal("stripes.cfg --data pics --max-steps 12 --threads 1 --seed 4 --save folder.ckpt --quiet");
    CHECK(rc == 0, "folder run exit %d: %s", rc, out);
    rc = shoal("stripes.cfg --data train.txt --test-data val.txt --max-steps 12 --threads 1 --seed 4 "
               "--save list.ckpt --quiet");
    CHECK(rc == 0, "list run exit %d: %s", rc, out);
    double d = params_diff("stripes.cfg", "folder.ckpt", "list.ckpt");
    CHECK(d == 0, "list file and folder train differently (weights %g apart)", d);
    rc = shoal("stripes.cfg --data train.txt --max-steps 2");
    CHECK(rc == 1 && strstr(out, "--test-data"), "a list without --test-data: exit %d: %s", rc, out);
}

static void two_ranks_under_strong_scaling_match_one(void)
{
    int rc = shoal("stripes.cfg --data pics --max-steps 8 --threads 1 --batch 16 --save one.ckpt --quiet");
    CHECK(rc == 0, "one rank: exit %d: %s", rc, out);
    rc = shoal("stripes.cfg --data pics -n 2 --scaling strong --max-steps 8 --threads 1 --batch 16 "
               "--save two.ckpt --quiet");
    CHECK(rc == 0, "two ranks: exit %d: %s", rc, out);
    double d = params_diff("stripes.cfg", "one.ckpt", "two.ckpt");
    CHECK(d >= 0 && d < 1e-4, "2 ranks' weights are %g from one rank's", d);
}

static void a_mid_epoch_resume_continues_bit_for_bit(void)
{
    /* 90 pictures at batch 16: 5 steps an epoch; stop at step 3, resume to step 12 */
    int rc = shoal("stripes.cfg --data pics --max-steps 12 --threads 1 --seed 7 --save straight.ckpt --quiet");
    CHECK(rc == 0, "exit %d: %s", rc, out);
    rc = shoal("stripes.cfg --data pics --max-steps 3 --threads 1 --seed 7 --save part.ckpt --quiet");
    CHECK(rc == 0, "exit %d: %s", rc, out);
    rc = shoal("stripes.cfg --data pics --max-steps 12 --threads 1 --resume part.ckpt --save resumed.ckpt --quiet");
    CHECK(rc == 0, "exit %d: %s", rc, out);
    double d = params_diff("stripes.cfg", "straight.ckpt", "resumed.ckpt");
    CHECK(d == 0, "the resumed run's weights are %g from the straight run's", d);
    sh_in("cp -r pics other && cp pics/c1/000.png other/c1/999.png");
    rc = shoal("stripes.cfg --data other --max-steps 12 --threads 1 --resume part.ckpt");
    CHECK(rc == 1 && strstr(out, "other pictures"), "resume on another folder: exit %d: %s", rc, out);
}

static void bad_files_are_skipped_or_stop_strict_runs(void)
{
    sh_in("cp -r pics bad && head -c 100 pics/c0/003.jpg > bad/c0/003.jpg && echo oops > bad/c2/010.png");
    int rc = shoal("stripes.cfg --data bad --epochs 2 --threads 1 --json");
    CHECK(rc == 0, "exit %d: %s", rc, out);
    CHECK(sh_test_json_number(out, "bad_files") == 2, "bad_files: %s", out);
    CHECK(sh_test_count(out, "bad/c0/003.jpg") == 1 && sh_test_count(out, "bad/c2/010.png") == 1,
          "each bad file named once: %s", out);
    rc = shoal("stripes.cfg --data bad --epochs 1 --threads 1 --strict-data");
    CHECK(rc == 1 && strstr(out, "--strict-data") && (strstr(out, "003.jpg") || strstr(out, "010.png")),
          "strict: exit %d: %s", rc, out);
}

/* shoal test reads the held-out pictures as shoal train evaluated them. */
static void shoal_test_agrees_with_train_on_pictures(void)
{
    int rc = shoal("stripes.cfg --data pics --max-steps 10 --threads 1 --save eval.ckpt --json");
    CHECK(rc == 0, "exit %d: %s", rc, out);
    double train_acc = sh_test_json_number(out, "accuracy");
    const char *sets[] = {"--data pics", "--data val.txt", "--data pics --test-data pics/val"};
    for (int i = 0; i < 3; i++) {
        char args[256];
        snprintf(args, sizeof args, "stripes.cfg --weights eval.ckpt %s --threads 1 --json", sets[i]);
        rc = sh_test_shoal_in(dir, "", "test", args, out, sizeof out);
        CHECK(rc == 0 && sh_test_json_number(out, "accuracy") == train_acc && sh_test_json_number(out, "images") == 30,
              "shoal test %s: exit %d, want accuracy %g: %s", sets[i], rc, train_acc, out);
    }
}

/* ImageNet's layout: DIR/train and DIR/val side by side. */
static void train_and_val_side_by_side(void)
{
    sh_in("mkdir inet && cp -r pics inet/train && mv inet/train/val inet/val");
    int rc = shoal("stripes.cfg --data inet --max-steps 2 --threads 1");
    CHECK(rc == 0 && strstr(out, "90 training and 30 test images"), "DIR/train + DIR/val: exit %d: %s", rc, out);
}

static void folder_mistakes_are_one_clear_error(void)
{
    sh_in("mkdir -p noval/a noval/b && touch noval/a/1.jpg");
    int rc = shoal("stripes.cfg --data noval --max-steps 1");
    CHECK(rc == 1 && strstr(out, "no held-out set") && strstr(out, "noval/val"), "no val: exit %d: %s", rc, out);
    sh_in("mkdir -p empty/a empty/b empty/val/a");
    rc = shoal("stripes.cfg --data empty --max-steps 1");
    CHECK(rc == 1 && strstr(out, "no pictures"), "no pictures: exit %d: %s", rc, out);
    rc = shoal("stripes.cfg --data fmnist_idx --test-data val.txt --max-steps 1");
    CHECK(rc == 1 && strstr(out, "--test-data goes with pictures"), "IDX with --test-data: exit %d: %s", rc, out);
    write_text("wide.cfg", "[net]\nbatch=4\nwidth=8\nheight=8\nchannels=3\n[connected]\noutput=2\n"
                           "activation=linear\n[softmax]\n");
    rc = shoal("wide.cfg --data pics --max-steps 1");
    CHECK(rc == 1 && strstr(out, "3 classes") && strstr(out, "outputs 2"), "too few outputs: exit %d: %s", rc, out);
}

static void synthetic_data_and_grey_inputs_train(void)
{
    int rc = shoal("stripes.cfg --data synthetic --max-steps 6 --threads 1 --json");
    CHECK(rc == 0 && sh_test_json_number(out, "steps") == 6, "synthetic: exit %d: %s", rc, out);
    CHECK(sh_test_json_number(out, "data_wait_s") >= 0, "synthetic without data fields: %s", out);
    write_text("grey.cfg", "[net]\nbatch=16\nwidth=16\nheight=16\nchannels=1\nlearning_rate=0.02\n"
                           "[convolutional]\nfilters=4\nsize=3\nstride=2\npad=1\nactivation=relu\n"
                           "[connected]\noutput=3\nactivation=linear\n[softmax]\n");
    rc = shoal("grey.cfg --data pics --epochs 1 --threads 1 --json");
    CHECK(rc == 0 && sh_test_json_number(out, "accuracy") >= 0, "grey inputs from colour pictures: exit %d: %s", rc,
          out);
}

/* The same pictures, in the same order, as PNG class folders and as IDX files: with no
 * augmentation (flip=0, the crop the picture) they train the same LeNet to the same
 * accuracy (the bound is 0.3 points; the pixels are the IDX files' bits). */
static void fashion_mnist_as_png_folders_matches_the_idx_files(void)
{
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "sed 's/^channels=1/channels=1\\nflip=0/' %s/examples/lenet.cfg > lenet.cfg", repo);
    sh_in(cmd);
    int rc = shoal("lenet.cfg --data fmnist --epochs 1 --threads 2 --json --quiet");
    CHECK(rc == 0, "PNG folders: exit %d: %s", rc, out);
    double png = sh_test_json_number(out, "accuracy");
    rc = shoal("lenet.cfg --data fmnist_idx --epochs 1 --threads 2 --json --quiet");
    CHECK(rc == 0, "IDX: exit %d: %s", rc, out);
    double idx = sh_test_json_number(out, "accuracy");
    CHECK(png > 0.5 && fabs(png - idx) <= 0.003, "accuracy %g from PNGs, %g from IDX", png, idx);
}

int main(void)
{
    check_begin("test_train_images", 300);
    if (!getcwd(repo, sizeof repo)) repo[0] = 0;
    if (!mkdtemp(dir)) {
        CHECK(0, "mkdtemp failed");
        return check_end();
    }
    char cmd[1024], msg[4096];
    snprintf(cmd, sizeof cmd, "/usr/bin/python3 tests/cli/picture_sets.py %s 2>&1", dir);
    int st = sh_test_run(cmd, msg, sizeof msg);
    CHECK(st == 0, "the data need /usr/bin/python3 with numpy and PIL and dataset-fashion-mnist "
          "(scripts/deps.sh): %s", msg);
    write_text("stripes.cfg", stripes_cfg);
    if (st == 0) {
        RUN(a_folder_of_class_folders_trains);
        RUN(a_list_file_trains_as_the_folder_does);
        RUN(two_ranks_under_strong_scaling_match_one);
        RUN(a_mid_epoch_resume_continues_bit_for_bit);
        RUN(bad_files_are_skipped_or_stop_strict_runs);
        RUN(shoal_test_agrees_with_train_on_pictures);
        RUN(train_and_val_side_by_side);
        RUN(folder_mistakes_are_one_clear_error);
        RUN(synthetic_data_and_grey_inputs_train);
        if (!check_under_san()) RUN(fashion_mnist_as_png_folders_matches_the_idx_files); /* minutes there */
    }
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
    return check_end();
}
