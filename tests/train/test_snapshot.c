/* test_snapshot.c — proves src/train/snapshot.c: N steps, save, resume for N more equals 2N
 * steps in one go bit for bit (across an epoch boundary, with dropout and momentum); weights
 * load for testing; checkpoints of another model, batch or a damaged file, counts no run
 * makes and weights holding NaN or inf are refused. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "check.h"
#include "io/checkpoint.h"
#include "nn/darknet_weights.h"
#include "nn/net.h"
#include "train/snapshot.h"
#include "train/tiny_data.h"
#include "train/trainer.h"

static char dir[256], mlp_cfg[512], other_cfg[512];

static void opts_for(sh_train_opts *o, const char *cfg)
{
    sh_train_opts_default(o);
    o->cfg_path = cfg;
    o->data_dir = dir;
    o->threads = 1;
    o->quiet = 1;
    o->seed = 11;
    o->eval_each_epoch = 0;
}

static shoal_result train(const sh_train_opts *o, sh_train_report *r, float **params, size_t *n)
{
    sh_trainer *t = NULL;
    shoal_result rc = sh_trainer_create(o, &t);
    if (rc == SHOAL_OK) rc = sh_trainer_run(t, r);
    if (rc == SHOAL_OK && params) {
        sh_net *net = sh_trainer_net(t);
        *n = sh_net_nparams(net);
        *params = malloc(*n * sizeof(float));
        memcpy(*params, sh_net_params(net), *n * sizeof(float));
    }
    sh_trainer_destroy(t);
    return rc;
}

/* n steps then a resume to 2n must equal 2n straight; n is chosen mid-epoch (16 steps per
 * epoch) so that the loader position, and the crossing of an epoch, are exercised. */
static void resume_for(int64_t n, int threads)
{
    char path[600];
    snprintf(path, sizeof path, "%s/half.ckpt", dir);
    sh_train_opts o;
    opts_for(&o, mlp_cfg);
    o.threads = threads;
    sh_train_report r;
    float *straight = NULL, *resumed = NULL;
    size_t ns = 0, nr = 0;
    o.max_steps = 2 * n;
    CHECK_OK(train(&o, &r, &straight, &ns));
    o.max_steps = n;
    o.save_path = path;
    CHECK_OK(train(&o, &r, NULL, NULL));
    CHECK(strcmp(r.saved_path, path) == 0, "saved '%s'", r.saved_path);
    o.max_steps = 2 * n;
    o.save_path = NULL;
    o.resume_path = path;
    o.seed = 999; /* ignored: the checkpoint's seed wins */
    CHECK_OK(train(&o, &r, &resumed, &nr));
    CHECK(r.steps == 2 * n && r.steps_this_run == n, "steps %lld this run %lld",
          (long long)r.steps, (long long)r.steps_this_run);
    CHECK(straight && resumed && ns == nr && memcmp(straight, resumed, ns * sizeof(float)) == 0,
          "%lld + %lld resumed steps differ from %lld in one go (%d threads)", (long long)n,
          (long long)n, (long long)(2 * n), threads);
    free(straight);
    free(resumed);
}

static void resume_mid_epoch_continues_bitwise(void) { resume_for(11, 1); }
static void resume_with_two_threads_continues_bitwise(void) { resume_for(13, 2); }

/* A version-1 checkpoint (16 meta slots, before the recurrent-state and residual counts)
 * still resumes bit for bit: made here from a current one by rewriting its meta section. */
static void version_1_checkpoint_still_resumes(void)
{
    enum { N = 11, NPARAMS = 10, NSTATS = 12, NOPTIM = 13 }; /* meta slots, as snapshot.c */
    char path[600], old[600];
    snprintf(path, sizeof path, "%s/v2.ckpt", dir);
    snprintf(old, sizeof old, "%s/v1.ckpt", dir);
    sh_train_opts o;
    opts_for(&o, mlp_cfg);
    sh_train_report r;
    float *straight = NULL, *resumed = NULL;
    size_t ns = 0, nr = 0;
    o.max_steps = 2 * N;
    CHECK_OK(train(&o, &r, &straight, &ns));
    o.max_steps = N;
    o.save_path = path;
    CHECK_OK(train(&o, &r, NULL, NULL));
    uint64_t meta[32] = {0};
    sh_ckpt_section m = {"meta", meta, sizeof meta};
    CHECK_OK(sh_ckpt_load(path, &m, 1));
    CHECK(meta[0] == SH_SNAPSHOT_VERSION && meta[NSTATS] == 0, "version %llu", (unsigned long long)meta[0]);
    float *params = malloc(meta[NPARAMS] * 4 + 4), *optim = malloc(meta[NOPTIM] * 4 + 4);
    sh_ckpt_section secs[3] = {{"meta", meta, 16 * sizeof(uint64_t)},
                               {"params", params, meta[NPARAMS] * 4},
                               {"optim", optim, meta[NOPTIM] * 4}};
    CHECK_OK(sh_ckpt_load(path, secs + 1, meta[NOPTIM] ? 2 : 1));
    meta[0] = 1;
    CHECK_OK(sh_ckpt_save(old, secs, meta[NOPTIM] ? 3 : 2));
    o.max_steps = 2 * N;
    o.save_path = NULL;
    o.resume_path = old;
    CHECK_OK(train(&o, &r, &resumed, &nr));
    CHECK(straight && resumed && ns == nr && memcmp(straight, resumed, ns * sizeof(float)) == 0,
          "a version-1 checkpoint did not resume bit for bit");
    free(params);
    free(optim);
    free(straight);
    free(resumed);
}

static void resumed_run_can_add_epochs(void)
{
    char path[600];
    snprintf(path, sizeof path, "%s/epoch.ckpt", dir);
    sh_train_opts o;
    opts_for(&o, mlp_cfg);
    o.epochs = 1;
    o.save_path = path;
    sh_train_report r;
    CHECK_OK(train(&o, &r, NULL, NULL));
    o.epochs = 2;
    o.save_path = NULL;
    o.resume_path = path;
    CHECK_OK(train(&o, &r, NULL, NULL));
    CHECK(r.steps == 2 * TINY_TRAIN / 16 && r.steps_this_run == TINY_TRAIN / 16,
          "steps %lld this run %lld", (long long)r.steps, (long long)r.steps_this_run);
}

static void weights_load_into_a_net_of_another_batch(void)
{
    char path[600];
    snprintf(path, sizeof path, "%s/w.ckpt", dir);
    sh_train_opts o;
    opts_for(&o, mlp_cfg);
    o.max_steps = 5;
    o.save_path = path;
    sh_train_report r;
    float *p = NULL;
    size_t n = 0;
    CHECK_OK(train(&o, &r, &p, &n));
    sh_net *net = NULL;
    CHECK_OK(sh_net_load(mlp_cfg, 3, 1, &net));
    if (net) {
        CHECK_OK(sh_snapshot_load_weights(net, path));
        CHECK(p && n == sh_net_nparams(net) &&
                  memcmp(p, sh_net_params(net), n * sizeof(float)) == 0,
              "loaded weights differ from the trained ones");
    }
    sh_net_destroy(net);
    free(p);
}

static void checkpoint_of_another_model_is_refused(void)
{
    char path[600];
    snprintf(path, sizeof path, "%s/m.ckpt", dir);
    sh_train_opts o;
    opts_for(&o, mlp_cfg);
    o.max_steps = 2;
    o.save_path = path;
    sh_train_report r;
    CHECK_OK(train(&o, &r, NULL, NULL));
    opts_for(&o, other_cfg);
    o.resume_path = path;
    sh_trainer *t = NULL;
    CHECK_RC(sh_trainer_create(&o, &t), SHOAL_ERR_FORMAT);
    CHECK(strstr(shoal_last_error_message(), "another model") != NULL &&
              strstr(shoal_last_error_message(), path) != NULL,
          "message: %s", shoal_last_error_message());
    sh_net *net = NULL;
    CHECK_OK(sh_net_load(other_cfg, 0, 1, &net));
    if (net) CHECK_RC(sh_snapshot_load_weights(net, path), SHOAL_ERR_FORMAT);
    sh_net_destroy(net);
}

static void checkpoint_of_another_batch_is_refused(void)
{
    char path[600];
    snprintf(path, sizeof path, "%s/b.ckpt", dir);
    sh_train_opts o;
    opts_for(&o, mlp_cfg);
    o.max_steps = 2;
    o.save_path = path;
    sh_train_report r;
    CHECK_OK(train(&o, &r, NULL, NULL));
    o.save_path = NULL;
    o.resume_path = path;
    o.batch = 8;
    sh_trainer *t = NULL;
    CHECK_RC(sh_trainer_create(&o, &t), SHOAL_ERR_INVALID);
    CHECK(strstr(shoal_last_error_message(), "--batch 16") != NULL, "message: %s",
          shoal_last_error_message());
}

static void damaged_checkpoint_is_refused(void)
{
    char path[600];
    snprintf(path, sizeof path, "%s/d.ckpt", dir);
    sh_train_opts o;
    opts_for(&o, mlp_cfg);
    o.max_steps = 2;
    o.save_path = path;
    sh_train_report r;
    CHECK_OK(train(&o, &r, NULL, NULL));
    FILE *f = fopen(path, "r+b");
    CHECK(f != NULL, "open %s", path);
    if (!f) return;
    fseek(f, -5, SEEK_END);
    int c = fgetc(f);
    fseek(f, -5, SEEK_END);
    fputc(c ^ 0x40, f);
    fclose(f);
    o.save_path = NULL;
    o.resume_path = path;
    sh_trainer *t = NULL;
    CHECK_RC(sh_trainer_create(&o, &t), SHOAL_ERR_FORMAT);
    CHECK(t == NULL, "trainer returned on error");
}

/* path rewritten with its meta slot `slot` set to v, and params[k] set to p when k >= 0 (a
 * crafted file: the checksums are right, the counts or values are not). */
static void rewrite(const char *path, const char *out_path, int slot, uint64_t v, long k, float p)
{
    enum { NPARAMS = 10, NSTATS = 12, NOPTIM = 13 }; /* meta slots, as snapshot.c */
    uint64_t meta[32] = {0};
    sh_ckpt_section m = {"meta", meta, sizeof meta};
    CHECK_OK(sh_ckpt_load(path, &m, 1));
    float *params = malloc(meta[NPARAMS] * 4 + 4), *optim = malloc(meta[NOPTIM] * 4 + 4);
    sh_ckpt_section secs[3] = {{"meta", meta, sizeof meta},
                               {"params", params, meta[NPARAMS] * 4},
                               {"optim", optim, meta[NOPTIM] * 4}};
    CHECK(meta[NSTATS] == 0, "the tiny model has no batch norm");
    CHECK_OK(sh_ckpt_load(path, secs + 1, meta[NOPTIM] ? 2 : 1));
    if (slot >= 0) meta[slot] = v;
    if (k >= 0 && (uint64_t)k < meta[NPARAMS]) params[k] = p;
    CHECK_OK(sh_ckpt_save(out_path, secs, meta[NOPTIM] ? 3 : 2));
    free(params);
    free(optim);
}

/* A checkpoint claiming steps no run makes (INT64_MAX, negative, a data position past its
 * steps) is refused in one line, before any step prints a negative count. */
static void impossible_counts_are_refused(void)
{
    enum { STEPS_DONE = 2, LOADER_EPOCH = 3, LOADER_STEP = 4 };
    char path[600], bad[600];
    snprintf(path, sizeof path, "%s/c.ckpt", dir);
    snprintf(bad, sizeof bad, "%s/c-bad.ckpt", dir);
    sh_train_opts o;
    opts_for(&o, mlp_cfg);
    o.max_steps = 5;
    o.save_path = path;
    sh_train_report r;
    CHECK_OK(train(&o, &r, NULL, NULL));
    const uint64_t cases[4][2] = {{STEPS_DONE, (uint64_t)INT64_MAX}, {STEPS_DONE, (uint64_t)-3},
                                  {LOADER_EPOCH, 1ull << 62}, {LOADER_STEP, 1000}};
    for (int i = 0; i < 4; i++) {
        rewrite(path, bad, (int)cases[i][0], cases[i][1], -1, 0);
        opts_for(&o, mlp_cfg);
        o.resume_path = bad;
        o.max_steps = 10;
        sh_trainer *t = NULL;
        CHECK_RC(sh_trainer_create(&o, &t), SHOAL_ERR_FORMAT);
        CHECK(strstr(shoal_last_error_message(), "no run makes these counts") &&
                  strstr(shoal_last_error_message(), bad),
              "case %d: %s", i, shoal_last_error_message());
        sh_trainer_destroy(t);
    }
}

/* Weights holding NaN or inf (a checkpoint, a Darknet .weights file) are refused where they
 * are loaded, naming the layer, for training, resuming and testing alike. */
static void nan_weights_are_refused_naming_the_layer(void)
{
    char path[600], bad[600], dk[600];
    snprintf(path, sizeof path, "%s/n.ckpt", dir);
    snprintf(bad, sizeof bad, "%s/n-bad.ckpt", dir);
    snprintf(dk, sizeof dk, "%s/n-bad.weights", dir);
    sh_train_opts o;
    opts_for(&o, mlp_cfg);
    o.max_steps = 3;
    o.save_path = path;
    sh_train_report r;
    CHECK_OK(train(&o, &r, NULL, NULL));
    sh_net *net = NULL;
    CHECK_OK(sh_net_load(mlp_cfg, 0, 1, &net));
    if (!net) return;
    size_t off = 0, cnt = 0;
    int layer = sh_net_nlayers(net) - 3; /* the last [connected] (then softmax, cost) */
    sh_net_layer_params(net, layer, &off, &cnt);
    CHECK(cnt > 0, "layer %d has no parameters", layer);
    char want[64];
    snprintf(want, sizeof want, "layer %d (", layer);
    rewrite(path, bad, -1, 0, (long)(off + cnt / 2), NAN);
    CHECK_RC(sh_snapshot_load_weights(net, bad), SHOAL_ERR_FORMAT);
    CHECK(strstr(shoal_last_error_message(), want) && strstr(shoal_last_error_message(), "1 NaN"), "%s",
          shoal_last_error_message());
    opts_for(&o, mlp_cfg);
    o.resume_path = bad;
    o.max_steps = 10;
    sh_trainer *t = NULL;
    CHECK_RC(sh_trainer_create(&o, &t), SHOAL_ERR_FORMAT);
    CHECK(strstr(shoal_last_error_message(), want) != NULL, "resume: %s", shoal_last_error_message());
    sh_trainer_destroy(t);
    /* Darknet's file: an infinite value in the same layer */
    sh_net_params(net)[off] = INFINITY;
    CHECK_OK(sh_darknet_weights_save(net, dk, 0));
    CHECK_OK(sh_snapshot_load_weights(net, path)); /* the good weights back */
    CHECK_RC(sh_snapshot_load_weights(net, dk), SHOAL_ERR_FORMAT);
    CHECK(strstr(shoal_last_error_message(), want) && strstr(shoal_last_error_message(), "1 infinite"), "%s",
          shoal_last_error_message());
    sh_net_destroy(net);
}

int main(void)
{
    check_begin("test_snapshot", 120);
    if (tiny_make_dir(dir, sizeof dir)) {
        CHECK(0, "could not write the tiny dataset");
        return check_end();
    }
    snprintf(mlp_cfg, sizeof mlp_cfg, "%s/mlp.cfg", dir);
    snprintf(other_cfg, sizeof other_cfg, "%s/other.cfg", dir);
    RUN(resume_mid_epoch_continues_bitwise);
    RUN(resume_with_two_threads_continues_bitwise);
    RUN(resumed_run_can_add_epochs);
    RUN(version_1_checkpoint_still_resumes);
    RUN(weights_load_into_a_net_of_another_batch);
    RUN(checkpoint_of_another_model_is_refused);
    RUN(checkpoint_of_another_batch_is_refused);
    RUN(damaged_checkpoint_is_refused);
    RUN(impossible_counts_are_refused);
    RUN(nan_weights_are_refused_naming_the_layer);
    tiny_remove_dir(dir);
    return check_end();
}
