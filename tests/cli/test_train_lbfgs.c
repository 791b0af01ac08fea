/* test_train_lbfgs.c — proves `shoal train --solver lbfgs` end to end (src/train/solver/
 * sandblaster.c and lbfgs.c through the trainer, the job and the checkpoint's "solver"
 * section): on 1, 2 and 3 ranks the iterates are the same within 1e-6; stopped and resumed,
 * on the same or another rank count, a run ends with the weights of one that went straight
 * through, bit for bit; an SGD checkpoint resumes under L-BFGS with one line; on a subset of
 * Fashion-MNIST, softmax regression on 2 ranks equals PyTorch's torch.optim.LBFGS with the
 * strong-Wolfe line search (tests/train/lbfgs_torch.py, double precision) within 1e-4 relative
 * for 20 iterations, losses and weights (skipped in one line without torch or the data set);
 * --solver with a file still names a Caffe solver; what L-BFGS cannot do is refused in one
 * line; a rank killed in an iteration is named. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "lib/run.h"
#include "train/tiny_data.h"

static char dir[256], out[1 << 20];

/* Tiny data, no dropout (L-BFGS needs a loss that is a function of the weights), decay on. */
static const char mlp_cfg[] = "[net]\nbatch=16\nwidth=8\nheight=8\nchannels=1\nlearning_rate=1\ndecay=0.001\n"
                              "\n[connected]\noutput=12\nactivation=tanh\n"
                              "\n[connected]\noutput=4\nactivation=linear\n\n[softmax]\n";
static const char bn_cfg[] = "[net]\nbatch=16\nwidth=8\nheight=8\nchannels=1\nlearning_rate=1\n"
                             "\n[connected]\noutput=12\nbatch_normalize=1\nactivation=relu\n"
                             "\n[connected]\noutput=4\nactivation=linear\n\n[softmax]\n";
static const char softmax_cfg[] = "[net]\nbatch=500\nwidth=28\nheight=28\nchannels=1\nlearning_rate=1\n"
                                  "decay=0.001\n\n[connected]\noutput=10\nactivation=linear\n\n[softmax]\n";

static int run(const char *args)
{
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "cd %s && %s train %s 2>&1", dir, sh_test_shoal_bin(), args);
    return sh_test_run(cmd, out, sizeof out);
}

static int same_files(const char *a, const char *b)
{
    char cmd[1024], o[256];
    snprintf(cmd, sizeof cmd, "cd %s && cmp -s %s %s && echo same", dir, a, b);
    return sh_test_run(cmd, o, sizeof o) == 0 && strstr(o, "same") != NULL;
}

/* The floats of a Darknet .weights file (after its 20-byte header); count in *n. */
static float *read_weights(const char *name, size_t *n)
{
    char path[600];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "rb");
    *n = 0;
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    float *v = len > 20 ? malloc((size_t)len) : NULL;
    if (v && fseek(f, 20, SEEK_SET) == 0) *n = fread(v, sizeof *v, (size_t)(len - 20) / sizeof *v, f);
    fclose(f);
    return v;
}

/* |a - b| / |b| over two .weights files; 1 when they cannot be compared. */
static double weights_rel(const char *a, const char *b)
{
    size_t na, nb;
    float *va = read_weights(a, &na), *vb = read_weights(b, &nb);
    double num = 0, den = 0;
    for (size_t i = 0; na == nb && i < na; i++) {
        num += ((double)va[i] - vb[i]) * ((double)va[i] - vb[i]);
        den += (double)vb[i] * vb[i];
    }
    free(va);
    free(vb);
    return na == nb && na && den > 0 ? sqrt(num / den) : 1;
}

static void rank_counts_give_the_same_iterates(void)
{
    const char *ns[] = {"1", "2", "3"};
    char a[512], name[32];
    for (int i = 0; i < 3; i++) {
        snprintf(a, sizeof a, "lbfgs.cfg --data . --solver lbfgs --history 5 --max-steps 8 --threads 1 --quiet "
                 "-n %s --save-darknet n%s.weights", ns[i], ns[i]);
        CHECK(run(a) == 0, "-n %s: %s", ns[i], out);
        snprintf(name, sizeof name, "n%s.weights", ns[i]);
        double rel = weights_rel(name, "n1.weights");
        CHECK(rel < 1e-6, "-n %s: weights differ from one rank's by %g", ns[i], rel);
    }
    CHECK(run("lbfgs.cfg --data . --solver lbfgs --history 5 --max-steps 3 --threads 1 --quiet "
              "--save-darknet n1s3.weights") == 0, "%s", out);
    CHECK(weights_rel("n1s3.weights", "n1.weights") > 1e-3, "8 iterations moved past 3");
}

static void resume_continues_bit_for_bit(void)
{
    CHECK(run("lbfgs.cfg --data . --solver lbfgs --max-steps 12 --threads 1 --quiet --save-darknet whole.weights") == 0,
          "%s", out);
    CHECK(run("lbfgs.cfg --data . --solver lbfgs --max-steps 5 --threads 1 --quiet --save half.ckpt") == 0, "%s", out);
    CHECK(run("lbfgs.cfg --data . --solver lbfgs --max-steps 12 --threads 1 --quiet --resume half.ckpt "
              "--save-darknet resumed.weights") == 0, "%s", out);
    CHECK(same_files("whole.weights", "resumed.weights"), "stopped at 5 and resumed equals 12 straight: %s", out);
    /* saved on 2 ranks, resumed on 3, then on 1 */
    CHECK(run("lbfgs.cfg --data . --solver lbfgs --max-steps 4 --threads 1 --quiet -n 2 --save two.ckpt") == 0, "%s",
          out);
    CHECK(run("lbfgs.cfg --data . --solver lbfgs --max-steps 8 --threads 1 --quiet -n 3 --resume two.ckpt "
              "--save three.ckpt") == 0, "%s", out);
    CHECK(run("lbfgs.cfg --data . --solver lbfgs --max-steps 12 --threads 1 --quiet --resume three.ckpt "
              "--save-darknet across.weights") == 0, "%s", out);
    CHECK(weights_rel("across.weights", "whole.weights") < 1e-6, "2 -> 3 -> 1 ranks: %g",
          weights_rel("across.weights", "whole.weights"));
    /* the history is in the checkpoint: a resume without it would take another path */
    long long with = sh_test_file_nbytes(dir, "half.ckpt");
    CHECK(run("lbfgs.cfg --data . --max-steps 5 --threads 1 --quiet --save sgd.ckpt") == 0, "%s", out);
    CHECK(with > sh_test_file_nbytes(dir, "sgd.ckpt") + 5 * 2 * 8 * 200, "the L-BFGS checkpoint (%lld bytes) holds "
          "the history", with);
    CHECK(run("lbfgs.cfg --data . --solver lbfgs --max-steps 7 --threads 1 --resume sgd.ckpt") == 0, "%s", out);
    CHECK(sh_test_count(out, "holds no L-BFGS history") == 1, "an SGD checkpoint is said once: %s", out);
    CHECK(run("lbfgs.cfg --data . --max-steps 7 --threads 1 --resume half.ckpt") == 2 - 1 &&
          strstr(out, "was trained by L-BFGS"), "SGD from an L-BFGS checkpoint is refused in one line: %s", out);
    CHECK(run("lbfgs.cfg --data . --solver lbfgs --history 3 --max-steps 7 --threads 1 --resume half.ckpt") != 0 &&
          strstr(out, "--history 10"), "another --history is refused, naming the saved one: %s", out);
}

static int have_torch_and_data(void)
{
    char o[256];
    if (access("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz", R_OK) != 0) return 0;
    return sh_test_run("/usr/bin/python3 -c 'import torch, numpy' 2>/dev/null && echo yes", o, sizeof o) == 0 &&
           strncmp(o, "yes", 3) == 0;
}

/* The reference's 20 rows: loss, then W row-major and b; shoal's file holds b, then W. */
static void matches_pytorch_on_fashion_mnist(void)
{
    if (!have_torch_and_data()) {
        printf("test_train_lbfgs: no torch under /usr/bin/python3 or no Fashion-MNIST: the comparison with "
               "PyTorch is skipped\n");
        return;
    }
    char cmd[2048], o[512], cwd[1024];
    if (!getcwd(cwd, sizeof cwd)) return;
    snprintf(cmd, sizeof cmd, "cd %s && P=%s/tests/train/lbfgs_torch.py && /usr/bin/python3 $P subset "
             "/usr/share/datasets/fashion-mnist fm 6000 1000 && /usr/bin/python3 $P init init.weights 784 10 7 && "
             "/usr/bin/python3 $P run fm init.weights 20 ref.txt 10 1 0.001 2>&1", dir, cwd);
    CHECK(sh_test_run(cmd, o, sizeof o) == 0, "lbfgs_torch.py: %s", o);
    CHECK(run("softmax.cfg --data fm --solver lbfgs -n 2 --max-steps 20 --weights init.weights --json "
              "--save-darknet s20.weights") == 0, "%s", out);
    char path[600];
    snprintf(path, sizeof path, "%s/ref.txt", dir);
    FILE *f = fopen(path, "r");
    size_t nw = 0;
    float *w = read_weights("s20.weights", &nw);
    CHECK(f && w && nw == 7850, "the reference and shoal's weights: %zu values", nw);
    const char *h = strstr(out, "\"history\":");
    double worst_f = 0, ref[7850];
    int rows = 0;
    for (int it = 0; f && w && h && it < 20; it++) {
        double ref_f;
        if (fscanf(f, "%lf", &ref_f) != 1) break;
        int got = 0;
        for (int i = 0; i < 7850; i++) got += fscanf(f, "%lf", &ref[i]) == 1;
        CHECK(got == 7850, "row %d of the reference holds %d of 7850 values", it, got);
        h = strstr(h + 1, "\"train_loss\":");
        if (!h) break;
        double ours = atof(h + strlen("\"train_loss\":"));
        worst_f = fmax(worst_f, fabs(ours - ref_f) / ref_f);
        rows++;
    }
    CHECK(rows == 20, "%d of 20 iterations compared: %s", rows, out);
    CHECK(worst_f < 1e-4, "losses differ from PyTorch's by %g (relative)", worst_f);
    double num = 0, den = 0; /* the last row: W (7840) then b (10); ours b then W */
    for (int i = 0; w && nw == 7850 && i < 7850; i++) {
        double mine = i < 7840 ? w[10 + i] : w[i - 7840];
        num += (mine - ref[i]) * (mine - ref[i]);
        den += ref[i] * ref[i];
    }
    CHECK(den > 0 && sqrt(num / den) < 1e-4, "weights after 20 iterations differ from PyTorch's by %g",
          den > 0 ? sqrt(num / den) : -1.0);
    if (f) fclose(f);
    free(w);
}

static void solver_with_a_file_stays_caffes(void)
{
    CHECK(run("lbfgs.cfg --data . --solver lbfgs.prototxt --max-steps 1") == 2 &&
          strstr(out, "--solver goes with a Caffe model"), "%s", out);
}

static void what_lbfgs_cannot_do_is_refused_in_one_line(void)
{
    const struct {
        const char *args, *want;
        int rc;
    } bad[] = {
        {"mlp.cfg --data . --solver lbfgs --max-steps 1", "[dropout] (layer 1) makes the loss random", 1},
        {"bn.cfg --data . --solver lbfgs --max-steps 1", "batch_normalize", 1},
        {"lbfgs.cfg --data lbfgs.cfg --solver lbfgs --max-steps 1", "held in memory (IDX or CIFAR-10 images), not text",
         1},
        {"lbfgs.cfg --data synthetic --solver lbfgs --max-steps 1", "not pictures decoded as they are read", 1},
        {"lbfgs.cfg --data . --solver lbfgs -n 2 --ps --max-steps 1", "--solver lbfgs with --ps", 2},
        {"lbfgs.cfg --data . --solver lbfgs -n 2 --ps --consistency async --max-steps 1", "asynchronous", 2},
        {"lbfgs.cfg --data . --solver lbfgs -n 2 --compress fp16 --max-steps 1", "--solver lbfgs with --compress", 2},
        {"lbfgs.cfg --data . --solver lbfgs -n 2 --pipeline 2 --max-steps 1", "leave out --pipeline", 2},
        {"lbfgs.cfg --data . --history 4 --max-steps 1", "--history goes with --solver lbfgs", 2},
        {"lbfgs.cfg --data . --solver lbfgs --history 0 --max-steps 1", "--history \"0\"", 2},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int rc = run(bad[i].args);
        CHECK(rc == bad[i].rc && strstr(out, bad[i].want), "%s: exit %d (want %d), \"%s\"", bad[i].args, rc, bad[i].rc,
              out);
        const char *nl = strchr(out, '\n');
        CHECK(nl && (!nl[1] || bad[i].rc == 1), "%s: one line: %s", bad[i].args, out);
    }
}

static void a_killed_rank_is_named(void)
{
    const char *who[] = {"1", "0"};
    char a[512];
    for (int i = 0; i < 2; i++) {
        snprintf(a, sizeof a, "lbfgs.cfg --data . --solver lbfgs -n 2 --max-steps 6 --threads 1 --quiet "
                 "--debug-die-rank %s --debug-die-step 3", who[i]);
        int rc = run(a);
        char want[32];
        snprintf(want, sizeof want, "rank %s", who[i]);
        CHECK(rc != 0 && strstr(out, want), "rank %s killed: exit %d, %s", who[i], rc, out);
    }
}

int main(void)
{
    check_begin("test_train_lbfgs", 240);
    if (tiny_make_dir(dir, sizeof dir) != 0 || tiny_write_file(dir, "lbfgs.cfg", mlp_cfg) ||
        tiny_write_file(dir, "bn.cfg", bn_cfg) || tiny_write_file(dir, "softmax.cfg", softmax_cfg)) {
        CHECK(0, "cannot make the tiny dataset");
        return check_end();
    }
    RUN(rank_counts_give_the_same_iterates);
    RUN(resume_continues_bit_for_bit);
    RUN(matches_pytorch_on_fashion_mnist);
    RUN(solver_with_a_file_stays_caffes);
    RUN(what_lbfgs_cannot_do_is_refused_in_one_line);
    RUN(a_killed_rank_is_named);
    tiny_remove_dir(dir);
    return check_end();
}
