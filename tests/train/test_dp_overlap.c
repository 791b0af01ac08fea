/* test_dp_overlap.c — proves that data parallelism (src/train/dp/allreduce.c) lets the
 * next step's forward overlap the tail of a step's gradient exchange, and changes no bit:
 * 2 ranks over TCP with private weights, one rank late now and then, so the other starts
 * its next forward while its last exchange is still on the wire (counted by the strategy:
 * 0 without the overlap); the weights after training, through a mid-run checkpoint and the
 * stop/save agreement, equal the run without overlap (SHOAL_DP_OVERLAP=0) bit for bit, with
 * the buckets cut into chunks and the first layer's sent first, and are equal on the ranks.
 * Adam too (its step count must still advance once a step). With the overlap a connected
 * layer's weight gradient is offered in blocks of rows (SHOAL_DP_GRAD_ROWS, on the packed
 * products): chunks start before their layer's backward ends (counted; none with
 * SHOAL_DP_GRAD_ROWS=0, whose weights are the same bits too). */
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "base/util.h"
#include "check.h"
#include "lib/ranks.h"
#include "nn/layer.h"
#include "nn/net.h"
#include "shoal/comm.h"
#include "train/dp/allreduce.h"
#include "train/tiny_data.h"
#include "train/trainer.h"

static char dir[256], cfg[512], adam_cfg[512], ckpt[600];
enum { STEPS = 40, GLOBAL_BATCH = 32, CAP = 1 << 17 };

/* three layers, each its own group of buckets: 19.5k, 90.3k (cut into many chunks), 1.2k */
static const char text[] =
    "[net]\nbatch=16\nwidth=8\nheight=8\nchannels=1\n%s"
    "\n[connected]\noutput=300\nactivation=relu\n"
    "\n[connected]\noutput=300\nactivation=relu\n"
    "\n[connected]\noutput=4\nactivation=linear\n"
    "\n[softmax]\n\n[cost]\n";

typedef struct {
    const char *cfg;
    float *out;        /* rank 0's final weights (shared memory) */
    int64_t *overlaps; /* rank 0's count of steps overlapped with the next forward */
    int64_t *early;    /* rank 0's count of chunks started before their layer's backward ended */
} ov_arg;

/* Rank 1 is late for every 7th step: rank 0 has started its exchange and goes on. */
static void late_rank(void *ctx, int rank, int64_t step)
{
    (void)ctx;
    if (rank != 1 || step % 7 != 3) return;
    struct timespec ts = {0, 30 * 1000 * 1000};
    nanosleep(&ts, NULL);
}

static uint32_t hash_params(sh_net *net)
{
    return sh_crc32c(0, sh_net_params(net), sh_net_nparams(net) * sizeof(float));
}

static void job(shoal_comm *c, void *arg)
{
    const ov_arg *a = arg;
    int r = shoal_comm_rank(c), n = shoal_comm_world(c);
    sh_dp_opts d = {0.1, GLOBAL_BATCH / n};
    sh_strategy *st = NULL;
    CHECK(sh_strategy_allreduce_create(c, &d, &st) == SHOAL_OK, "%s", shoal_last_error_message());
    sh_train_opts o;
    sh_train_opts_default(&o);
    o.cfg_path = a->cfg;
    o.data_dir = dir;
    o.threads = 1;
    o.quiet = 1;
    o.seed = 11;
    o.batch = GLOBAL_BATCH / n;
    o.max_steps = STEPS;
    o.eval_each_epoch = 1; /* an epoch is 8 steps here: evaluation reads settled weights */
    o.save_path = ckpt;
    o.save_every_steps = 13; /* a checkpoint between steps, none at an epoch's end */
    o.before_step = late_rank;
    o.strategy = st;
    sh_trainer *t = NULL;
    CHECK(sh_trainer_create(&o, &t) == SHOAL_OK && sh_trainer_run(t, NULL) == SHOAL_OK, "rank %d: %s", r,
          shoal_last_error_message());
    if (t) {
        sh_net *net = sh_trainer_net(t);
        uint32_t h = hash_params(net), all[2];
        CHECK(shoal_allgather(c, &h, all, 1, SHOAL_INT32) == SHOAL_OK, "%s", shoal_last_error_message());
        CHECK(all[1] == all[0], "rank 1 holds other weights than rank 0");
        sh_dp_profile prof;
        sh_strategy_allreduce_profile(st, &prof);
        if (r == 0) {
            CHECK(sh_net_nparams(net) <= CAP, "model too large for the test's buffer");
            memcpy(a->out, sh_net_params(net), sh_net_nparams(net) * sizeof(float));
            *a->overlaps = prof.overlapped_steps;
            *a->early = prof.early_chunks;
        }
    }
    sh_trainer_destroy(t);
    sh_strategy_destroy(st);
}

static void run(const char *model, const char *overlap, float *out, int64_t *counts)
{
    setenv("SHOAL_DP_OVERLAP", overlap, 1); /* 2: also on one host */
    ov_arg a = {model, out, &counts[0], &counts[1]};
    sh_test_ranks_opts o = {.links = SH_TEST_REAL, .transport = "tcp", .deadline_s = 120};
    CHECK(RUN_RANKS(2, &o, job, &a) == 0, "%s, SHOAL_DP_OVERLAP=%s", model, overlap);
    remove(ckpt);
}

static void t_overlap_is_exact(void)
{
    float *with = mmap(NULL, 2 * CAP * sizeof(float), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    int64_t *count = mmap(NULL, 6 * sizeof(int64_t), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (with == MAP_FAILED || count == MAP_FAILED) {
        CHECK(0, "mmap failed");
        return;
    }
    float *without = with + CAP;
    const char *models[2] = {cfg, adam_cfg};
    for (int k = 0; k < 2; k++) {
        memset(with, 0, 2 * CAP * sizeof(float));
        run(models[k], "2", with, &count[0]);
        run(models[k], "0", without, &count[2]);
        CHECK(count[0] >= 3, "%s: the next forward began while the last exchange was in flight %lld times "
              "(rank 1 was late 6 times)", models[k], (long long)count[0]);
        CHECK(count[2] == 0, "%s: overlap counted without it: %lld", models[k], (long long)count[2]);
        /* the 300 x 300 layer's rows in blocks of 32 (9600 floats): its chunks of 11288 go as
         * their rows are done, the first ones before the layer's backward has ended */
        CHECK(count[1] >= STEPS, "%s: %lld chunks started before their layer's backward ended in %d steps",
              models[k], (long long)count[1], STEPS);
        CHECK(count[3] == 0, "%s: early chunks without the overlap: %lld", models[k], (long long)count[3]);
        CHECK(memcmp(with, without, CAP * sizeof(float)) == 0, "%s: weights with the overlap differ from "
              "those without", models[k]);
        if (k == 0) { /* the overlap with whole layers: the same bits, no early chunk */
            setenv("SHOAL_DP_GRAD_ROWS", "0", 1);
            run(models[k], "2", without, &count[4]);
            unsetenv("SHOAL_DP_GRAD_ROWS");
            CHECK(count[5] == 0, "%s: %lld early chunks with SHOAL_DP_GRAD_ROWS=0", models[k], (long long)count[5]);
            CHECK(memcmp(with, without, CAP * sizeof(float)) == 0, "%s: weights with the rows in blocks differ "
                  "from those with whole layers", models[k]);
        }
        int nonzero = 0;
        for (int i = 0; i < 1000; i++) nonzero += with[i] != 0;
        CHECK(nonzero > 0, "no weights came back");
    }
    unsetenv("SHOAL_DP_OVERLAP");
    munmap(with, 2 * CAP * sizeof(float));
    munmap(count, 6 * sizeof(int64_t));
}

int main(void)
{
    check_begin("test_dp_overlap", 240);
    if (tiny_make_dir(dir, sizeof dir) != 0) {
        CHECK(0, "cannot make the tiny dataset");
        return check_end();
    }
    setenv("SHOAL_DP_WINDOW", "0", 1);  /* private weights, as across hosts */
    setenv("SHOAL_DP_CHUNK_KB", "16", 1); /* 90.3k floats in 8 chunks */
    setenv("SHOAL_DP_AHEAD_KB", "32", 1); /* backward starts half; the rest after layer 0's */
    sh_dense_self_pack_min_rows = 16;     /* 16 images a rank: the packed products, in row blocks */
    snprintf(cfg, sizeof cfg, "%s/ov.cfg", dir);
    snprintf(adam_cfg, sizeof adam_cfg, "%s/ov-adam.cfg", dir);
    snprintf(ckpt, sizeof ckpt, "%s/ov.ckpt", dir);
    char buf[1024];
    snprintf(buf, sizeof buf, text, "learning_rate=0.02\nmomentum=0.9\n");
    CHECK(tiny_write_file(dir, "ov.cfg", buf) == 0, "cannot write ov.cfg");
    snprintf(buf, sizeof buf, text, "adam=1\nlearning_rate=0.002\n");
    CHECK(tiny_write_file(dir, "ov-adam.cfg", buf) == 0, "cannot write ov-adam.cfg");
    RUN(t_overlap_is_exact);
    remove(cfg);
    remove(adam_cfg);
    tiny_remove_dir(dir);
    return check_end();
}
