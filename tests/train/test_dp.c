/* test_dp.c — proves synchronous data parallelism (src/train/dp/allreduce.c) with the
 * real trainer and real processes: strong scaling over 2, 3 and 4 ranks matches one process
 * with the same global batch and data order; every replica holds the same weights at every
 * check; two runs with the same seed are bitwise equal; a checkpoint of 3 ranks resumed on
 * 2 or 4 ends where one process does; ranks started with different batches or models are
 * stopped at start-up, naming who differs in what. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "base/util.h"
#include "check.h"
#include "lib/ranks.h"
#include "nn/net.h"
#include "shoal/comm.h"
#include "train/dp/allreduce.h"
#include "train/tiny_data.h"
#include "train/trainer.h"

static char dir[256], cfg[512], other_cfg[512];
enum { STEPS = 50, GLOBAL_BATCH = 48 };

static void opts_for(sh_train_opts *o, const char *c, int batch, int64_t steps)
{
    sh_train_opts_default(o);
    o->cfg_path = c;
    o->data_dir = dir;
    o->threads = 1;
    o->quiet = 1;
    o->seed = 7;
    o->batch = batch;
    o->max_steps = steps;
    o->eval_each_epoch = 0;
}

typedef struct {
    int mode; /* 0 exactness, 1 mismatched batch, 2 mismatched model */
    float *out; /* shared result for the bitwise test (NULL otherwise) */
} dp_arg;

static float *mmap_shared(size_t nbytes)
{
    void *p = mmap(NULL, nbytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return NULL;
    memset(p, 0, nbytes);
    return p;
}

static uint32_t hash_params(sh_net *net)
{
    return sh_crc32c(0, sh_net_params(net), sh_net_nparams(net) * sizeof(float));
}

static void job(shoal_comm *c, void *arg)
{
    const dp_arg *a = arg;
    int r = shoal_comm_rank(c), n = shoal_comm_world(c);
    sh_train_opts o;
    int batch = GLOBAL_BATCH / n;
    const char *mycfg = cfg;
    if (a->mode == 1 && r == n - 1) batch += 1;
    if (a->mode == 2 && r == n - 1) mycfg = other_cfg;
    sh_dp_opts d = {0.002 /* tiny buckets: several per step */, batch};
    sh_strategy *st = NULL;
    CHECK(sh_strategy_allreduce_create(c, &d, &st) == SHOAL_OK, "%s", shoal_last_error_message());
    opts_for(&o, mycfg, batch, STEPS);
    o.strategy = st;
    sh_trainer *t = NULL;
    shoal_result rc = sh_trainer_create(&o, &t);
    if (a->mode) {
        CHECK(rc == SHOAL_ERR_MISMATCH || rc == SHOAL_ERR_PEER, "rank %d: rc %d: %s", r, rc, shoal_last_error_message());
        if (r == 0) {
            char want[64];
            snprintf(want, sizeof want, "rank %d", n - 1);
            CHECK(strstr(shoal_last_error_message(), want) != NULL, "%s", shoal_last_error_message());
            CHECK(strstr(shoal_last_error_message(), a->mode == 1 ? "batch" : "model") != NULL, "%s",
                  shoal_last_error_message());
        }
        sh_trainer_destroy(t);
        sh_strategy_destroy(st);
        return;
    }
    CHECK(rc == SHOAL_OK, "rank %d: %s", r, shoal_last_error_message());
    if (!t) return;
    /* Step by step, comparing every replica's weights every 5 steps. */
    int differ = 0;
    for (int64_t s = 0; s < STEPS; s++) {
        float loss;
        CHECK(sh_train_step(t, s, &loss) == SHOAL_OK, "step %lld: %s", (long long)s, shoal_last_error_message());
        if (s % 5 == 4) {
            uint32_t h = hash_params(sh_trainer_net(t)), all[8];
            CHECK(shoal_allgather(c, &h, all, 1, SHOAL_INT32) == SHOAL_OK, "%s", shoal_last_error_message());
            for (int q = 1; q < n; q++) differ += all[q] != all[0];
        }
    }
    CHECK(differ == 0, "replicas held different weights %d times", differ);
    sh_net *net = sh_trainer_net(t);
    if (r == 0) {
        sh_train_opts ro;
        opts_for(&ro, cfg, GLOBAL_BATCH, STEPS);
        sh_trainer *ref = NULL;
        sh_train_report rr;
        CHECK(sh_trainer_create(&ro, &ref) == SHOAL_OK && sh_trainer_run(ref, &rr) == SHOAL_OK, "%s",
              shoal_last_error_message());
        const float *p = sh_net_params(net), *q = sh_net_params(sh_trainer_net(ref));
        /* relative in norm: |p - q| / |q| over the whole weight vector */
        double diff = 0, norm = 0;
        for (size_t i = 0; i < sh_net_nparams(net); i++) {
            diff += ((double)p[i] - q[i]) * ((double)p[i] - q[i]);
            norm += (double)q[i] * q[i];
        }
        double rel = sqrt(diff / (norm > 0 ? norm : 1));
        CHECK(rel < 1e-5, "%d ranks vs one process with the same global batch: %.3g relative", n, rel);
        CHECK(rel > 0 || n == 1, "bitwise equal to one process: suspicious, the ranks may not have split the batch");
        if (a->out) memcpy(a->out, p, sh_net_nparams(net) * sizeof(float));
        sh_trainer_destroy(ref);
    }
    sh_trainer_destroy(t);
    sh_strategy_destroy(st);
}

/* Each rank tests its shard of the test set; the combined figures equal one process's. */
static void split_eval(shoal_comm *c, void *arg)
{
    int r = shoal_comm_rank(c), n = shoal_comm_world(c);
    sh_dp_opts d = {4, GLOBAL_BATCH / n};
    sh_strategy *st = NULL;
    CHECK(sh_strategy_allreduce_create(c, &d, &st) == SHOAL_OK, "%s", shoal_last_error_message());
    sh_train_opts o;
    opts_for(&o, cfg, GLOBAL_BATCH / n, 10);
    o.eval_each_epoch = 1;
    o.strategy = st;
    sh_trainer *t = NULL;
    sh_train_report rep;
    CHECK(sh_trainer_create(&o, &t) == SHOAL_OK && sh_trainer_run(t, &rep) == SHOAL_OK, "%s",
          shoal_last_error_message());
    double mine[2] = {rep.test_accuracy, rep.test_loss}, all[2 * 8];
    CHECK(shoal_allgather(c, mine, all, 2, SHOAL_FLOAT64) == SHOAL_OK, "%s", shoal_last_error_message());
    for (int q = 1; q < n; q++) CHECK(all[2 * q] == all[0] && all[2 * q + 1] == all[1], "ranks report different accuracy");
    if (r == 0) {
        sh_train_opts ro;
        opts_for(&ro, cfg, GLOBAL_BATCH, 10);
        ro.eval_each_epoch = 1;
        sh_trainer *ref = NULL;
        sh_train_report rr;
        CHECK(sh_trainer_create(&ro, &ref) == SHOAL_OK && sh_trainer_run(ref, &rr) == SHOAL_OK, "%s",
              shoal_last_error_message());
        CHECK(rep.test_accuracy == rr.test_accuracy, "split %.4f vs whole %.4f", rep.test_accuracy, rr.test_accuracy);
        CHECK(fabs(rep.test_loss - rr.test_loss) < 1e-4, "split loss %.6f vs whole %.6f", rep.test_loss, rr.test_loss);
        sh_trainer_destroy(ref);
    }
    sh_trainer_destroy(t);
    sh_strategy_destroy(st);
}

static void t_split_evaluation(void)
{
    for (int n = 2; n <= 3; n++) {
        sh_test_ranks_opts o = {.links = SH_TEST_REAL, .deadline_s = 120};
        RUN_RANKS(n, &o, split_eval, NULL);
    }
}

/* Relative distance in norm between two weight vectors: |p - q| / |q|. */
static double rel_diff(const float *p, const float *q, size_t n)
{
    double diff = 0, norm = 0;
    for (size_t i = 0; i < n; i++) {
        diff += ((double)p[i] - q[i]) * ((double)p[i] - q[i]);
        norm += (double)q[i] * q[i];
    }
    return sqrt(diff / (norm > 0 ? norm : 1));
}

/* First half of a run on 3 ranks, checkpoint by rank 0 (arg: its path) ... */
static void resume_first_half(shoal_comm *c, void *arg)
{
    int n = shoal_comm_world(c);
    sh_dp_opts d = {0.002, GLOBAL_BATCH / n};
    sh_strategy *st = NULL;
    CHECK(sh_strategy_allreduce_create(c, &d, &st) == SHOAL_OK, "%s", shoal_last_error_message());
    sh_train_opts o;
    opts_for(&o, cfg, GLOBAL_BATCH / n, STEPS / 2);
    o.strategy = st;
    o.save_path = arg;
    sh_trainer *t = NULL;
    CHECK(sh_trainer_create(&o, &t) == SHOAL_OK && sh_trainer_run(t, NULL) == SHOAL_OK, "%s",
          shoal_last_error_message());
    sh_trainer_destroy(t);
    sh_strategy_destroy(st);
}

/* ... resumed on another rank count with the same global batch: the data order and the
 * optimizer state continue, so the end matches one process that never stopped. */
static void resume_second_half(shoal_comm *c, void *arg)
{
    int r = shoal_comm_rank(c), n = shoal_comm_world(c);
    sh_dp_opts d = {0.002, GLOBAL_BATCH / n};
    sh_strategy *st = NULL;
    CHECK(sh_strategy_allreduce_create(c, &d, &st) == SHOAL_OK, "%s", shoal_last_error_message());
    sh_train_opts o;
    opts_for(&o, cfg, GLOBAL_BATCH / n, STEPS);
    o.strategy = st;
    o.resume_path = arg;
    sh_trainer *t = NULL;
    CHECK(sh_trainer_create(&o, &t) == SHOAL_OK && sh_trainer_run(t, NULL) == SHOAL_OK, "%s",
          shoal_last_error_message());
    if (t && r == 0) {
        CHECK(sh_trainer_steps_done(t) == STEPS, "resumed run ended at step %lld", (long long)sh_trainer_steps_done(t));
        sh_train_opts ro;
        opts_for(&ro, cfg, GLOBAL_BATCH, STEPS);
        sh_trainer *ref = NULL;
        CHECK(sh_trainer_create(&ro, &ref) == SHOAL_OK && sh_trainer_run(ref, NULL) == SHOAL_OK, "%s",
              shoal_last_error_message());
        if (ref) {
            double rel = rel_diff(sh_net_params(sh_trainer_net(t)), sh_net_params(sh_trainer_net(ref)),
                                  sh_net_nparams(sh_trainer_net(t)));
            CHECK(rel < 1e-5, "3 ranks, checkpoint, resumed on %d ranks vs one process: %.3g relative", n, rel);
        }
        sh_trainer_destroy(ref);
    }
    sh_trainer_destroy(t);
    sh_strategy_destroy(st);
}

static void t_resume_on_other_rank_count(void)
{
    char ck[600];
    snprintf(ck, sizeof ck, "%s/dp-resume.ckpt", dir);
    sh_test_ranks_opts o = {.links = SH_TEST_REAL, .deadline_s = 120};
    RUN_RANKS(3, &o, resume_first_half, ck);
    RUN_RANKS(2, &o, resume_second_half, ck);
    RUN_RANKS(3, &o, resume_first_half, ck);
    RUN_RANKS(4, &o, resume_second_half, ck);
    remove(ck);
}

/* ---- the update split across ranks (ZeRO stage 1) ----
 * A model whose bucket is large enough for the allreduce through the peers' memory (or, over
 * TCP as across hosts, for the ring, whose members step the blocks they hold), so each
 * rank steps the optimizer on its block only and sends the weights: the run must still
 * match one process (SGD with momentum and Adam, whose step count must advance once a
 * step), each rank must have stepped only part of the parameters, and a checkpoint taken
 * mid-run (which gathers the optimizer state the ranks split) must resume to the same end
 * on another number of ranks. */
static char wide_cfg[512], wide_adam_cfg[512];

static const char wide_text[] =
    "[net]\nbatch=16\nwidth=8\nheight=8\nchannels=1\n"
    "decay=0.0005\n%s"
    "\n[connected]\noutput=1100\nactivation=relu\n"
    "\n[connected]\noutput=4\nactivation=linear\n"
    "\n[softmax]\n\n[cost]\n";

typedef struct {
    const char *cfg;
    const char *ckpt;  /* resume tests: where the first half saves / the second half starts */
    int64_t steps;
    const char *then;  /* a middle part: resume from ckpt, save here after 3/4 of the steps */
} shard_arg;

static void shard_job(shoal_comm *c, void *arg)
{
    const shard_arg *a = arg;
    int r = shoal_comm_rank(c), n = shoal_comm_world(c);
    sh_dp_opts d = {8 /* one bucket: 76k parameters, 300 KB */, GLOBAL_BATCH / n};
    sh_strategy *st = NULL;
    CHECK(sh_strategy_allreduce_create(c, &d, &st) == SHOAL_OK, "%s", shoal_last_error_message());
    sh_train_opts o;
    opts_for(&o, a->cfg, GLOBAL_BATCH / n, STEPS);
    o.strategy = st;
    if (a->steps == STEPS / 2) o.save_path = a->ckpt; /* the first half */
    else if (a->ckpt) o.resume_path = a->ckpt;        /* the second half */
    o.max_steps = a->ckpt && !o.resume_path ? STEPS / 2 : STEPS;
    if (a->then) { /* the middle: the state was loaded whole, and what this rank saves of it
                      must be only what it steps */
        o.save_path = a->then;
        o.max_steps = STEPS * 3 / 4;
    }
    sh_trainer *t = NULL;
    CHECK(sh_trainer_create(&o, &t) == SHOAL_OK && sh_trainer_run(t, NULL) == SHOAL_OK, "%s",
          shoal_last_error_message());
    if (!t) {
        sh_strategy_destroy(st);
        return;
    }
    sh_net *net = sh_trainer_net(t);
    size_t np = sh_net_nparams(net);
    sh_dp_profile prof;
    sh_strategy_allreduce_profile(st, &prof);
    double per_step = prof.steps ? prof.updated / (double)prof.steps : 0;
    CHECK(per_step > 0 && per_step < 0.75 * (double)np, "rank %d of %d stepped %.0f of %zu parameters a step: "
          "the update was not split", r, n, per_step, np);
    const char *win = getenv("SHOAL_DP_WINDOW");
    int want_shared = !(win && win[0] == '0');
    CHECK(prof.shared_weights == want_shared, "rank %d of %d: weights %s, SHOAL_DP_WINDOW=%s", r, n,
          prof.shared_weights ? "shared" : "private", win ? win : "(unset)");
    uint32_t h = hash_params(net), all[8];
    CHECK(shoal_allgather(c, &h, all, 1, SHOAL_INT32) == SHOAL_OK, "%s", shoal_last_error_message());
    for (int q = 1; q < n; q++) CHECK(all[q] == all[0], "rank %d holds other weights than rank 0", q);
    if (r == 0 && o.max_steps == STEPS) {
        sh_train_opts ro;
        opts_for(&ro, a->cfg, GLOBAL_BATCH, STEPS);
        sh_trainer *ref = NULL;
        CHECK(sh_trainer_create(&ro, &ref) == SHOAL_OK && sh_trainer_run(ref, NULL) == SHOAL_OK, "%s",
              shoal_last_error_message());
        if (ref) {
            double rel = rel_diff(sh_net_params(net), sh_net_params(sh_trainer_net(ref)), np);
            CHECK(rel < 1e-5, "%s, %d ranks, update split%s: %.3g relative to one process", a->cfg, n,
                  a->ckpt ? ", resumed from a checkpoint" : "", rel);
            CHECK(rel > 0, "bitwise equal to one process: suspicious, the ranks may not have split the batch");
        }
        sh_trainer_destroy(ref);
    }
    sh_trainer_destroy(t);
    sh_strategy_destroy(st);
}

static void t_split_update_matches_one_process(void)
{
    const char *cfgs[2] = {wide_cfg, wide_adam_cfg};
    /* one shared copy of the weights (the default), then private copies kept equal by CMA */
    for (int shared = 1; shared >= 0; shared--) {
        if (!shared) setenv("SHOAL_DP_WINDOW", "0", 1);
        for (int k = 0; k < 2; k++)
            for (int n = 2; n <= 3; n++) {
                shard_arg a = {cfgs[k], NULL, STEPS, NULL};
                sh_test_ranks_opts o = {.links = SH_TEST_REAL, .transport = "shm", .deadline_s = 120};
                CHECK(RUN_RANKS(n, &o, shard_job, &a) == 0, "%s on %d ranks, %s weights", cfgs[k], n,
                      shared ? "shared" : "private");
            }
        unsetenv("SHOAL_DP_WINDOW");
    }
    char ck[600];
    snprintf(ck, sizeof ck, "%s/dp-shard.ckpt", dir);
    const char *transports[2] = {"shm", "tcp"};
    for (int tr = 0; tr < 2; tr++) {
        if (tr) setenv("SHOAL_DP_WINDOW", "0", 1); /* no window over TCP */
        for (int k = 0; k < 2; k++) {
            if (tr)
                for (int n = 2; n <= 3; n++) {
                    shard_arg a = {cfgs[k], NULL, STEPS, NULL};
                    sh_test_ranks_opts o = {.links = SH_TEST_REAL, .transport = "tcp", .deadline_s = 120};
                    CHECK(RUN_RANKS(n, &o, shard_job, &a) == 0, "%s on %d ranks over tcp", cfgs[k], n);
                }
            shard_arg first = {cfgs[k], ck, STEPS / 2, NULL}, second = {cfgs[k], ck, STEPS, NULL};
            sh_test_ranks_opts o = {.links = SH_TEST_REAL, .transport = transports[tr], .deadline_s = 120};
            CHECK(RUN_RANKS(3, &o, shard_job, &first) == 0, "%s: first half on 3 ranks over %s", cfgs[k],
                  transports[tr]);
            CHECK(RUN_RANKS(2, &o, shard_job, &second) == 0, "%s: second half on 2 ranks over %s", cfgs[k],
                  transports[tr]);
            remove(ck);
        }
    }
    /* two hosts of two ranks: the hierarchical allreduce steps each block once per host (one
     * rank of each steps it alike), and the checkpoint keeps one copy of that state: the
     * first half, a middle part from its checkpoint, then the rest on 3 ranks over TCP (the
     * ring) */
    char ck2[620];
    snprintf(ck2, sizeof ck2, "%s.2", ck);
    for (int k = 0; k < 4; k++) { /* k / 2: the bucket in 40 KB pieces (pipelined) */
        const char *cf = cfgs[k % 2];
        shard_arg a = {cf, NULL, STEPS, NULL}, first = {cf, ck, STEPS / 2, NULL};
        shard_arg middle = {cf, ck, STEPS, ck2}, second = {cf, ck2, STEPS, NULL};
        sh_test_ranks_opts hosts = {.links = SH_TEST_SOCKETPAIR, .ranks_per_host = 2, .deadline_s = 120,
                                    .chunk_nbytes = k / 2 ? 40000 : 0};
        sh_test_ranks_opts tcp = {.links = SH_TEST_REAL, .transport = "tcp", .deadline_s = 120};
        CHECK(RUN_RANKS(4, &hosts, shard_job, &a) == 0, "%s on 2 hosts x 2 ranks", cf);
        CHECK(RUN_RANKS(4, &hosts, shard_job, &first) == 0, "%s: first half on 2 hosts x 2 ranks", cf);
        CHECK(RUN_RANKS(4, &hosts, shard_job, &middle) == 0, "%s: third quarter on 2 hosts x 2 ranks", cf);
        CHECK(RUN_RANKS(3, &tcp, shard_job, &second) == 0, "%s: last quarter on 3 ranks over tcp", cf);
        remove(ck);
        remove(ck2);
    }
    unsetenv("SHOAL_DP_WINDOW");
}

static void t_strong_scaling_matches_one_process(void)
{
    for (int n = 2; n <= 4; n++) {
        dp_arg a = {0, NULL};
        sh_test_ranks_opts o = {.links = SH_TEST_REAL, .deadline_s = 120};
        RUN_RANKS(n, &o, job, &a);
    }
}

static void t_same_seed_bitwise(void)
{
    /* rank 0 writes its final weights into shared memory, twice */
    size_t cap = 1 << 16;
    float *a = mmap_shared(cap * sizeof(float)), *b = mmap_shared(cap * sizeof(float));
    dp_arg x = {0, a}, y = {0, b};
    sh_test_ranks_opts o = {.links = SH_TEST_REAL, .deadline_s = 120};
    RUN_RANKS(3, &o, job, &x);
    RUN_RANKS(3, &o, job, &y);
    CHECK(memcmp(a, b, cap * sizeof(float)) == 0, "two runs with the same seed differ");
}

static void t_mismatch_at_startup(void)
{
    for (int mode = 1; mode <= 2; mode++) {
        dp_arg a = {mode, NULL};
        sh_test_ranks_opts o = {.links = SH_TEST_REAL, .deadline_s = 60};
        RUN_RANKS(2, &o, job, &a);
        RUN_RANKS(3, &o, job, &a);
    }
}

int main(void)
{
    check_begin("test_dp", 300);
    if (tiny_make_dir(dir, sizeof dir) != 0) {
        CHECK(0, "cannot make the tiny dataset");
        return check_end();
    }
    snprintf(cfg, sizeof cfg, "%s/other.cfg", dir);
    snprintf(other_cfg, sizeof other_cfg, "%s/mlp.cfg", dir);
    RUN(t_strong_scaling_matches_one_process);
    RUN(t_same_seed_bitwise);
    RUN(t_mismatch_at_startup);
    RUN(t_split_evaluation);
    RUN(t_resume_on_other_rank_count);
    snprintf(wide_cfg, sizeof wide_cfg, "%s/wide.cfg", dir);
    snprintf(wide_adam_cfg, sizeof wide_adam_cfg, "%s/wide-adam.cfg", dir);
    char text[1024];
    snprintf(text, sizeof text, wide_text, "learning_rate=0.02\nmomentum=0.9\n");
    CHECK(tiny_write_file(dir, "wide.cfg", text) == 0, "cannot write wide.cfg");
    snprintf(text, sizeof text, wide_text, "adam=1\nlearning_rate=0.002\n");
    CHECK(tiny_write_file(dir, "wide-adam.cfg", text) == 0, "cannot write wide-adam.cfg");
    RUN(t_split_update_matches_one_process);
    remove(wide_cfg);
    remove(wide_adam_cfg);
    tiny_remove_dir(dir);
    return check_end();
}
