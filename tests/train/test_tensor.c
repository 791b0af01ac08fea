/* test_tensor.c — proves tensor parallelism (src/train/strategy_tensor.c, the split
 * [connected] layers of src/nn/layer_dense.c and net.c) with the real trainer and real
 * processes: 2 and 4 ranks match one process after 50 steps (SGD with momentum and decay,
 * and Adam), each rank's shares hold what the whole layers hold, each rank allocates only
 * its share of the split layers, checkpoints are refused clearly, and a net with no pair to
 * split is refused naming what to do. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "lib/ranks.h"
#include "nn/net.h"
#include "shoal/comm.h"
#include "train/strategy_tensor.h"
#include "train/tiny_data.h"
#include "train/trainer.h"

static char dir[256], sgd_cfg[512], adam_cfg[512], odd_cfg[512];
enum { STEPS = 50, BATCH = 16 };

/* conv (whole on every rank), then connected 32 + 24 (a pair), then 4 (whole) */
static const char sgd_text[] =
    "[net]\nbatch=16\nwidth=8\nheight=8\nchannels=1\n"
    "learning_rate=0.05\nmomentum=0.9\ndecay=0.0005\n"
    "\n[convolutional]\nfilters=4\nsize=3\nstride=1\npad=1\nactivation=relu\n"
    "\n[maxpool]\nsize=2\nstride=2\n"
    "\n[connected]\noutput=32\nactivation=relu\n"
    "\n[connected]\noutput=24\nactivation=leaky\n"
    "\n[connected]\noutput=4\nactivation=linear\n"
    "\n[softmax]\n\n[cost]\n";

/* two pairs: 32 + 24, then 16 + 4 */
static const char adam_text[] =
    "[net]\nbatch=16\nwidth=8\nheight=8\nchannels=1\n"
    "learning_rate=0.002\nadam=1\n"
    "\n[connected]\noutput=32\nactivation=relu\n"
    "\n[connected]\noutput=24\nactivation=relu\n"
    "\n[connected]\noutput=16\nactivation=relu\n"
    "\n[connected]\noutput=4\nactivation=linear\n"
    "\n[softmax]\n\n[cost]\n";

static const char odd_text[] =
    "[net]\nbatch=16\nwidth=8\nheight=8\nchannels=1\nlearning_rate=0.05\n"
    "\n[connected]\noutput=7\nactivation=relu\n"
    "\n[connected]\noutput=4\nactivation=linear\n"
    "\n[softmax]\n\n[cost]\n";

static void opts_for(sh_train_opts *o, const char *c, int64_t steps)
{
    sh_train_opts_default(o);
    o->cfg_path = c;
    o->data_dir = dir;
    o->threads = 1;
    o->quiet = 1;
    o->seed = 5;
    o->batch = BATCH;
    o->max_steps = steps;
    o->eval_each_epoch = 1;
}

/* Gather the shares of every split layer into the whole layer's layout and compare it with
 * one process, layer by layer (whole layers: this rank's copy). */
static void exact_job(shoal_comm *c, void *arg)
{
    const char *cfg = arg;
    int r = shoal_comm_rank(c), T = shoal_comm_world(c);
    sh_tp_opts to = {cfg, T, BATCH, 5};
    sh_strategy *st = NULL;
    sh_net *net = NULL;
    CHECK(sh_strategy_tensor_create(c, &to, &st, &net) == SHOAL_OK, "%s", shoal_last_error_message());
    if (!st) return;
    sh_train_opts o;
    opts_for(&o, cfg, STEPS);
    o.strategy = st;
    sh_trainer *t = NULL;
    sh_train_report rep;
    CHECK(sh_trainer_create_with_net(&o, net, &t) == SHOAL_OK && sh_trainer_run(t, &rep) == SHOAL_OK,
          "rank %d: %s", r, shoal_last_error_message());
    sh_train_opts ro;
    opts_for(&ro, cfg, STEPS);
    sh_trainer *ref = NULL;
    sh_train_report rr;
    CHECK(sh_trainer_create(&ro, &ref) == SHOAL_OK && sh_trainer_run(ref, &rr) == SHOAL_OK, "%s",
          shoal_last_error_message());
    if (!t || !ref) goto done;
    sh_net *mine = sh_trainer_net(t), *whole = sh_trainer_net(ref);
    CHECK(sh_net_nparams(mine) < sh_net_nparams(whole), "rank %d holds %zu of %zu parameters", r,
          sh_net_nparams(mine), sh_net_nparams(whole));
    double diff = 0, norm = 0;
    size_t held = 0;
    for (int i = 0; i < sh_net_nlayers(whole); i++) {
        size_t wo, wc, mo, mc;
        sh_net_layer_params(whole, i, &wo, &wc);
        sh_net_layer_params(mine, i, &mo, &mc);
        held += mc;
        const float *w = sh_net_params(whole) + wo, *m = sh_net_params(mine) + mo;
        int kc, kh, kw, mk, mh, mw;
        sh_net_layer_shape(whole, i, &kc, &kh, &kw);
        sh_net_layer_shape(mine, i, &mk, &mh, &mw);
        size_t K = (size_t)kc * kh * kw, k = (size_t)mk * mh * mw;
        if (mc == wc) { /* whole here, or a row split: compare what it has */
            for (size_t j = 0; j < wc; j++) {
                diff += ((double)m[j] - w[j]) * ((double)m[j] - w[j]);
                norm += (double)w[j] * w[j];
            }
            continue;
        }
        if (k < K) { /* column split: rows [r k, (r+1) k) of W (K, I), then those biases */
            size_t in = (wc - K) / K;
            CHECK(mc == k * in + k, "layer %d: share of %zu values, expected %zu", i, mc, k * in + k);
            for (size_t j = 0; j < k * in; j++) {
                double d = (double)m[j] - w[(size_t)r * k * in + j];
                diff += d * d;
                norm += (double)w[(size_t)r * k * in + j] * w[(size_t)r * k * in + j];
            }
            for (size_t j = 0; j < k; j++) {
                double d = (double)m[k * in + j] - w[K * in + (size_t)r * k + j];
                diff += d * d;
            }
        } else { /* row split: columns [r i, (r+1) i) of W (K, I), biases whole */
            size_t i_mine = (mc - K) / K, I = (wc - K) / K;
            for (size_t row = 0; row < K; row++)
                for (size_t col = 0; col < i_mine; col++) {
                    double wv = w[row * I + (size_t)r * i_mine + col];
                    double d = (double)m[row * i_mine + col] - wv;
                    diff += d * d;
                    norm += wv * wv;
                }
            for (size_t j = 0; j < K; j++) {
                double d = (double)m[K * i_mine + j] - w[K * I + j];
                diff += d * d;
            }
        }
    }
    CHECK(held == sh_net_nparams(mine), "layers' shares %zu, block %zu", held, sh_net_nparams(mine));
    double rel = sqrt(diff / (norm > 0 ? norm : 1));
    CHECK(rel < 1e-5, "rank %d of %d: %.3g relative to one process after %d steps", r, T, rel, STEPS);
    CHECK(rel > 0, "rank %d: bitwise equal to one process: were the layers split?", r);
    CHECK(fabs(rep.test_accuracy - rr.test_accuracy) < 1e-9, "test accuracy %.4f vs %.4f", rep.test_accuracy,
          rr.test_accuracy);
    CHECK(fabs(rep.train_loss - rr.train_loss) < 1e-4 * (1 + rr.train_loss), "train loss %.6f vs %.6f",
          rep.train_loss, rr.train_loss);
    CHECK(sh_trainer_save(t, "/nonexistent/x.ckpt") == SHOAL_ERR_INVALID &&
              strstr(shoal_last_error_message(), "not written yet"),
          "checkpoint under tensor parallelism: %s", shoal_last_error_message());
done:
    sh_trainer_destroy(ref);
    sh_trainer_destroy(t);
    sh_strategy_destroy(st);
}

static void t_two_ranks_sgd_match_one_process(void)
{
    sh_test_ranks_opts o = {.links = SH_TEST_REAL, .deadline_s = 120};
    RUN_RANKS(2, &o, exact_job, sgd_cfg);
}

static void t_two_and_four_ranks_adam_match_one_process(void)
{
    sh_test_ranks_opts o = {.links = SH_TEST_REAL, .deadline_s = 120};
    RUN_RANKS(2, &o, exact_job, adam_cfg);
    RUN_RANKS(4, &o, exact_job, adam_cfg);
}

static void refused_job(shoal_comm *c, void *arg)
{
    const char *want = arg;
    sh_tp_opts to = {strstr(want, "divisible") ? odd_cfg : sgd_cfg, strstr(want, "on 3") ? 2 : shoal_comm_world(c),
                     BATCH, 5};
    sh_strategy *st = NULL;
    sh_net *net = NULL;
    shoal_result rc = sh_strategy_tensor_create(c, &to, &st, &net);
    CHECK(rc == SHOAL_ERR_INVALID && !st && !net, "rc %d", rc);
    CHECK(strstr(shoal_last_error_message(), want) != NULL, "wanted \"%s\" in: %s", want, shoal_last_error_message());
}

static void t_impossible_layouts_are_refused(void)
{
    sh_test_ranks_opts o = {.links = SH_TEST_REAL, .deadline_s = 60};
    RUN_RANKS(2, &o, refused_job, "divisible by 2");
    RUN_RANKS(3, &o, refused_job, "on 3 ranks");
}

int main(void)
{
    check_begin("test_tensor", 240);
    if (tiny_make_dir(dir, sizeof dir) || tiny_write_file(dir, "sgd.cfg", sgd_text) ||
        tiny_write_file(dir, "adam.cfg", adam_text) || tiny_write_file(dir, "odd.cfg", odd_text)) {
        fprintf(stderr, "cannot write the test data\n");
        return 1;
    }
    snprintf(sgd_cfg, sizeof sgd_cfg, "%s/sgd.cfg", dir);
    snprintf(adam_cfg, sizeof adam_cfg, "%s/adam.cfg", dir);
    snprintf(odd_cfg, sizeof odd_cfg, "%s/odd.cfg", dir);
    RUN(t_two_ranks_sgd_match_one_process);
    RUN(t_two_and_four_ranks_adam_match_one_process);
    RUN(t_impossible_layouts_are_refused);
    tiny_remove_dir(dir);
    return check_end();
}
