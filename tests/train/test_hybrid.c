/* test_hybrid.c — proves hybrid parallelism (src/train/mp/hybrid.c, the gather shares
 * of src/nn/layer_dense.c, the cut of src/nn/net_tensor.c and dropout's rows) with the real
 * trainer and real processes: every scheme (broadcast, vertical, horizontal) on 2, 3 and 4
 * ranks matches one process with the same global batch after 50 steps (SGD with momentum and
 * decay, and Adam; dropout in both parts; a connected layer whose outputs the ranks do not
 * divide evenly), each rank holds only its shares of the connected layers, checkpoints and
 * Darknet's .weights files cross layouts both ways, and impossible layouts are refused naming what to do.
 * Under broadcast the shares step themselves as dW is made (their weight gradients never
 * written whole), and a checkpoint there resumes bit for bit (SGD and Adam). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "lib/layout.h"
#include "lib/layout_checks.h"
#include "lib/ranks.h"
#include "lib/reference.h"
#include "nn/net.h"
#include "shoal/comm.h"
#include "train/mp/hybrid.h"
#include "train/tiny_data.h"
#include "train/trainer.h"

static char dir[256], sgd_cfg[512], adam_cfg[512], noconn_cfg[512], narrow_cfg[512];
enum { STEPS = 50 };

/* conv, maxpool, dropout (the data-parallel part), then connected 32, dropout, connected 4 */
static const char sgd_text[] =
    "[net]\nbatch=16\nwidth=8\nheight=8\nchannels=1\n"
    "learning_rate=0.05\nmomentum=0.9\ndecay=0.0005\n"
    "\n[convolutional]\nfilters=4\nsize=3\nstride=1\npad=1\nactivation=relu\n"
    "\n[maxpool]\nsize=2\nstride=2\n"
    "\n[dropout]\nprobability=.2\n"
    "\n[connected]\noutput=32\nactivation=relu\n"
    "\n[dropout]\nprobability=.3\n"
    "\n[connected]\noutput=4\nactivation=linear\n"
    "\n[softmax]\n\n[cost]\n";

/* two conv layers, connected 22 (uneven on 3 and 4 ranks), 10, then 4 */
static const char adam_text[] =
    "[net]\nbatch=16\nwidth=8\nheight=8\nchannels=1\n"
    "learning_rate=0.002\nadam=1\n"
    "\n[convolutional]\nfilters=4\nsize=3\nstride=1\npad=1\nactivation=leaky\n"
    "\n[convolutional]\nfilters=3\nsize=3\nstride=2\npad=1\nactivation=relu\n"
    "\n[connected]\noutput=22\nactivation=relu\n"
    "\n[dropout]\nprobability=.25\n"
    "\n[connected]\noutput=10\nactivation=leaky\n"
    "\n[connected]\noutput=4\nactivation=linear\n"
    "\n[softmax]\n\n[cost]\n";

static const char noconn_text[] =
    "[net]\nbatch=16\nwidth=8\nheight=8\nchannels=1\nlearning_rate=0.05\n"
    "\n[convolutional]\nfilters=4\nsize=3\nstride=1\npad=1\nactivation=relu\n"
    "\n[avgpool]\n"
    "\n[softmax]\n\n[cost]\n";

static const char narrow_text[] =
    "[net]\nbatch=16\nwidth=8\nheight=8\nchannels=1\nlearning_rate=0.05\n"
    "\n[convolutional]\nfilters=4\nsize=3\nstride=1\npad=1\nactivation=relu\n"
    "\n[connected]\noutput=2\nactivation=linear\n"
    "\n[softmax]\n\n[cost]\n";

static void opts_for(sh_train_opts *o, const char *c, int batch, int64_t steps)
{
    sh_test_train_opts(o, c, dir, batch, steps, 5);
}

typedef struct {
    const char *cfg, *resume, *save; /* save: train to STEPS/2 and save, no comparison */
    sh_hybrid_scheme scheme;
    int batch;                       /* global */
    const char *weights;             /* start from it (and so does the one process compared) */
    const char *dn;                  /* write Darknet's file here and a checkpoint at DN.ckpt */
} hy_arg;

/* This rank's parameters against one process's, layer by layer: whole layers, and each
 * connected layer's rows [r K/N, (r+1) K/N) of W (K, I) and those biases. */
static void compare(sh_net *mine, sh_net *whole, int r, int N, double *diff, double *norm, size_t *held)
{
    for (int i = 0; i < sh_net_nlayers(whole); i++) {
        size_t wo, wc, mo, mc;
        sh_net_layer_params(whole, i, &wo, &wc);
        sh_net_layer_params(mine, i, &mo, &mc);
        *held += mc;
        const float *w = sh_net_params(whole) + wo, *m = sh_net_params(mine) + mo;
        if (mc != wc) { /* a share: rows k0.. of W, then biases k0.. */
            int kc, kh, kw;
            sh_net_layer_shape(whole, i, &kc, &kh, &kw);
            size_t K = (size_t)kc, k0 = (size_t)r * K / (size_t)N, ks = ((size_t)r + 1) * K / (size_t)N - k0;
            size_t in = (wc - K) / K;
            CHECK(mc == ks * in + ks, "layer %d: share of %zu values, expected %zu", i, mc, ks * in + ks);
            for (size_t j = 0; j < ks * in; j++) {
                double d = (double)m[j] - w[k0 * in + j];
                *diff += d * d;
                *norm += (double)w[k0 * in + j] * w[k0 * in + j];
            }
            for (size_t j = 0; j < ks; j++) {
                double d = (double)m[ks * in + j] - w[K * in + k0 + j];
                *diff += d * d;
            }
            continue;
        }
        for (size_t j = 0; j < wc; j++) {
            *diff += ((double)m[j] - w[j]) * ((double)m[j] - w[j]);
            *norm += (double)w[j] * w[j];
        }
    }
}

static void exact_job(shoal_comm *c, void *arg)
{
    const hy_arg *a = arg;
    int N = shoal_comm_world(c), r = shoal_comm_rank(c);
    sh_hybrid_opts ho = {a->cfg, a->scheme, a->batch, 5};
    sh_strategy *st = NULL;
    sh_net *net = NULL;
    CHECK(sh_strategy_hybrid_create(c, &ho, &st, &net) == SHOAL_OK, "%s", shoal_last_error_message());
    if (!st) return;
    sh_train_opts o;
    opts_for(&o, a->cfg, st->batch, a->save ? STEPS / 2 : STEPS);
    o.strategy = st;
    sh_test_rank_run run = {.files = {a->resume, a->save, a->weights, a->dn}};
    if (!check_rank_trains(c, &o, net, &run)) goto done;
    sh_train_opts ro;
    opts_for(&ro, a->cfg, a->batch, STEPS);
    ro.weights_path = a->weights;
    CHECK(sh_trainer_create(&ro, &run.ref) == SHOAL_OK && sh_trainer_run(run.ref, &run.rr) == SHOAL_OK, "%s",
          shoal_last_error_message());
    if (!run.ref) goto done;
    sh_net *mine = sh_trainer_net(run.t), *whole = sh_trainer_net(run.ref);
    if (a->dn) check_darknet_file_is_whole(r, a->cfg, a->dn, run.ckpt, whole); /* the shares gathered */
    CHECK(sh_net_nparams(mine) < sh_net_nparams(whole), "rank %d holds %zu of %zu parameters", r,
          sh_net_nparams(mine), sh_net_nparams(whole));
    double diff = 0, norm = 0;
    size_t held = 0;
    compare(mine, whole, r, N, &diff, &norm, &held);
    CHECK(held == sh_net_nparams(mine), "layers' shares %zu, block %zu", held, sh_net_nparams(mine));
    double rel = sqrt(diff / (norm > 0 ? norm : 1));
    CHECK(rel < 1e-5, "%s, rank %d of %d: %.3g relative to one process after %d steps",
          sh_hybrid_scheme_name(a->scheme), r, N, rel, STEPS);
    check_reports_match(r, 1, &run.rep, &run.rr); /* the test accuracy, the train loss */
    CHECK(fabs(run.rep.test_loss - run.rr.test_loss) < 1e-4 * (1 + run.rr.test_loss),
          "%s on %d: test loss %.6f vs %.6f", sh_hybrid_scheme_name(a->scheme), N, run.rep.test_loss, run.rr.test_loss);
    sh_hybrid_profile hp;
    sh_strategy_hybrid_profile(st, &hp);
    CHECK(hp.sent_nbytes > hp.act_nbytes && hp.act_nbytes > 0, "bytes per step %.0f, activities %.0f",
          hp.sent_nbytes, hp.act_nbytes);
done:
    sh_test_rank_run_fini(&run);
    sh_strategy_destroy(st);
}

static void run_scheme(sh_hybrid_scheme scheme)
{
    sh_test_ranks_opts o = {.links = SH_TEST_REAL, .deadline_s = 120};
    hy_arg sgd2 = {sgd_cfg, NULL, NULL, scheme, 16, NULL, NULL};
    RUN_RANKS(2, &o, exact_job, &sgd2);
    hy_arg adam3 = {adam_cfg, NULL, NULL, scheme, 18, NULL, NULL};
    RUN_RANKS(3, &o, exact_job, &adam3);
    hy_arg sgd4 = {sgd_cfg, NULL, NULL, scheme, 16, NULL, NULL};
    RUN_RANKS(4, &o, exact_job, &sgd4);
    if (scheme == SH_HYBRID_BROADCAST) { /* 72 rows a share: forward blocks of 32, 32 and 8 */
        hy_arg tall = {sgd_cfg, NULL, NULL, scheme, 72, NULL, NULL};
        RUN_RANKS(2, &o, exact_job, &tall);
    }
    hy_arg adam4 = {adam_cfg, NULL, NULL, scheme, 16, NULL, NULL};
    RUN_RANKS(4, &o, exact_job, &adam4);
}

static void t_broadcast_matches_one_process_on_2_3_4_ranks(void) { run_scheme(SH_HYBRID_BROADCAST); }

/* A batch of 21 on 3 ranks: the test set's last batch (64 = 3 x 21 + 1) leaves two ranks no
 * image, and evaluation still runs on all three. */
static void t_evaluation_with_empty_shares(void)
{
    sh_test_ranks_opts o = {.links = SH_TEST_REAL, .deadline_s = 120};
    hy_arg a = {sgd_cfg, NULL, NULL, SH_HYBRID_VERTICAL, 21, NULL, NULL};
    RUN_RANKS(3, &o, exact_job, &a);
}
static void t_vertical_matches_one_process_on_2_3_4_ranks(void) { run_scheme(SH_HYBRID_VERTICAL); }
static void t_horizontal_matches_one_process_on_2_3_4_ranks(void) { run_scheme(SH_HYBRID_HORIZONTAL); }

static char ckpt_one[600], ckpt_hy[600], dn_one[600], dn_hy[600];

/* This rank's connected shares' weight gradients: how many are not zero. */
static size_t share_grads_written(sh_net *mine, sh_net *whole)
{
    size_t nonzero = 0;
    for (int i = 0; i < sh_net_nlayers(whole); i++) {
        size_t wo, wc, mo, mc;
        int kc, kh, kw;
        sh_net_layer_params(whole, i, &wo, &wc);
        sh_net_layer_params(mine, i, &mo, &mc);
        if (mc == wc) continue;
        sh_net_layer_shape(whole, i, &kc, &kh, &kw);
        size_t in = (wc - (size_t)kc) / (size_t)kc, ks = mc / (in + 1); /* rows of W (ks, in), ks biases */
        for (size_t j = 0; j < ks * in; j++) nonzero += sh_net_grads(mine)[mo + j] != 0.0f;
    }
    return nonzero;
}

/* Broadcast: 50 steps straight (the strategy steps the shares itself, their weight gradients
 * never written, unlike vertical's); 25 steps and a checkpoint, then 25 more from it: the
 * same parameters bit for bit. */
static void fused_resume_job(shoal_comm *c, void *arg)
{
    const char *cfg = arg;
    char ck[600];
    snprintf(ck, sizeof ck, "%s/fused.ckpt", dir);
    float *straight = NULL;
    for (int pass = 0; pass < 4; pass++) { /* straight, vertical, the first half, resumed */
        int batch = shoal_comm_world(c) == 3 ? 18 : 16;
        sh_hybrid_opts ho = {cfg, pass == 1 ? SH_HYBRID_VERTICAL : SH_HYBRID_BROADCAST, batch, 5};
        sh_strategy *st = NULL;
        sh_net *net = NULL;
        CHECK(sh_strategy_hybrid_create(c, &ho, &st, &net) == SHOAL_OK, "%s", shoal_last_error_message());
        if (!st) break;
        sh_train_opts o;
        opts_for(&o, cfg, st->batch, pass == 2 ? STEPS / 2 : STEPS);
        o.strategy = st;
        o.save_path = pass == 2 ? ck : NULL;
        o.resume_path = pass == 3 ? ck : NULL;
        sh_trainer *t = NULL;
        sh_train_report rep;
        CHECK(sh_trainer_create_with_net(&o, net, &t) == SHOAL_OK && sh_trainer_run(t, &rep) == SHOAL_OK, "%s",
              shoal_last_error_message());
        CHECK(shoal_barrier(c) == SHOAL_OK, "%s", shoal_last_error_message());
        size_t np = t ? sh_net_nparams(sh_trainer_net(t)) : 0;
        if (pass < 2 && t) {
            sh_net *plan = NULL;
            sh_cfg *pc = NULL;
            CHECK(sh_cfg_load(cfg, &pc) == SHOAL_OK && sh_net_create(pc, 1, 5, &plan) == SHOAL_OK, "%s",
                  shoal_last_error_message());
            size_t written = plan ? share_grads_written(sh_trainer_net(t), plan) : 0;
            CHECK(pass == 0 ? st->applies_update && written == 0 : !st->applies_update && written > 0,
                  "%s: the strategy steps %d, %zu share gradients written", pass ? "vertical" : "broadcast",
                  st->applies_update, written);
            sh_net_destroy(plan);
            sh_cfg_destroy(pc);
        }
        if (pass == 0 && t) {
            straight = malloc(np * sizeof *straight);
            memcpy(straight, sh_net_params(sh_trainer_net(t)), np * sizeof *straight);
        }
        if (pass == 3 && t && straight)
            CHECK(!memcmp(straight, sh_net_params(sh_trainer_net(t)), np * sizeof *straight),
                  "rank %d: resumed at step %d, the parameters differ from 50 steps straight", shoal_comm_rank(c),
                  STEPS / 2);
        sh_trainer_destroy(t);
        sh_strategy_destroy(st);
    }
    free(straight);
}

static void t_broadcast_steps_the_shares_and_resumes_bit_for_bit(void)
{
    sh_test_ranks_opts o = {.links = SH_TEST_REAL, .deadline_s = 120};
    RUN_RANKS(2, &o, fused_resume_job, sgd_cfg);
    RUN_RANKS(3, &o, fused_resume_job, adam_cfg);
}

/* One process's checkpoint resumes on 4 hybrid ranks, and 2 hybrid ranks' checkpoint in one
 * process: both end where one process that never stopped does. */
static void t_checkpoints_cross_layouts(void)
{
    sh_train_opts so, ro;
    opts_for(&so, adam_cfg, 16, STEPS / 2);
    so.save_path = ckpt_one;
    opts_for(&ro, adam_cfg, 16, STEPS);
    hy_arg resume = {adam_cfg, ckpt_one, NULL, SH_HYBRID_HORIZONTAL, 16, NULL, NULL};
    hy_arg first = {adam_cfg, NULL, ckpt_hy, SH_HYBRID_VERTICAL, 16, NULL, NULL};
    check_checkpoints_cross("hybrid", &so, exact_job, 4, &resume, 2, &first, &ro, ckpt_hy, 1);
}

/* Darknet's file: one process's loaded into 4 hybrid ranks, 2 hybrid ranks' written whole (the
 * checkpoint's shares, bitwise; one process's within rounding) and loaded into 3 hybrid ranks
 * and into one process; each run from a file ends where one process from it does. */
static void t_darknet_weights_cross_layouts(void)
{
    sh_test_ranks_opts o = {.links = SH_TEST_REAL, .deadline_s = 120};
    sh_train_opts so;
    opts_for(&so, adam_cfg, 16, STEPS / 2);
    so.save_darknet_path = dn_one;
    CHECK(sh_test_write_one(&so) == SHOAL_OK, "%s", shoal_last_error_message());
    hy_arg from_one = {adam_cfg, NULL, NULL, SH_HYBRID_HORIZONTAL, 16, dn_one, NULL};
    RUN_RANKS(4, &o, exact_job, &from_one);
    hy_arg write = {sgd_cfg, NULL, NULL, SH_HYBRID_BROADCAST, 16, NULL, dn_hy};
    RUN_RANKS(2, &o, exact_job, &write);
    hy_arg from_hy = {sgd_cfg, NULL, NULL, SH_HYBRID_VERTICAL, 18, dn_hy, NULL};
    RUN_RANKS(3, &o, exact_job, &from_hy);
}

typedef struct {
    const char *cfg, *want;
    sh_hybrid_scheme scheme;
    int batch;
} refused_arg;

static void refused_job(shoal_comm *c, void *arg)
{
    const refused_arg *a = arg;
    sh_hybrid_opts ho = {a->cfg, a->scheme, a->batch, 5};
    sh_strategy *st = NULL;
    sh_net *net = NULL;
    shoal_result rc = sh_strategy_hybrid_create(c, &ho, &st, &net);
    CHECK(rc == SHOAL_ERR_INVALID && !st && !net, "rc %d", rc);
    CHECK(strstr(shoal_last_error_message(), a->want) != NULL, "wanted \"%s\" in: %s", a->want,
          shoal_last_error_message());
}

static void t_impossible_layouts_are_refused(void)
{
    sh_test_ranks_opts o = {.links = SH_TEST_REAL, .deadline_s = 60};
    refused_arg none = {noconn_cfg, "no [connected] layer", SH_HYBRID_BROADCAST, 16};
    RUN_RANKS(2, &o, refused_job, &none);
    refused_arg narrow = {narrow_cfg, "fewer than the 3 ranks", SH_HYBRID_VERTICAL, 18};
    RUN_RANKS(3, &o, refused_job, &narrow);
    refused_arg uneven = {sgd_cfg, "does not split into 3 equal shares", SH_HYBRID_BROADCAST, 16};
    RUN_RANKS(3, &o, refused_job, &uneven);
    refused_arg horiz = {sgd_cfg, "divisible by 3 x 3 = 9", SH_HYBRID_HORIZONTAL, 12};
    RUN_RANKS(3, &o, refused_job, &horiz);
}

int main(void)
{
    check_begin("test_hybrid", 600);
    if (tiny_make_dir(dir, sizeof dir) || tiny_write_file(dir, "sgd.cfg", sgd_text) ||
        tiny_write_file(dir, "adam.cfg", adam_text) || tiny_write_file(dir, "noconn.cfg", noconn_text) ||
        tiny_write_file(dir, "narrow.cfg", narrow_text)) {
        fprintf(stderr, "cannot write the test data\n");
        return 1;
    }
    snprintf(sgd_cfg, sizeof sgd_cfg, "%s/sgd.cfg", dir);
    snprintf(adam_cfg, sizeof adam_cfg, "%s/adam.cfg", dir);
    snprintf(noconn_cfg, sizeof noconn_cfg, "%s/noconn.cfg", dir);
    snprintf(narrow_cfg, sizeof narrow_cfg, "%s/narrow.cfg", dir);
    snprintf(ckpt_one, sizeof ckpt_one, "%s/one.ckpt", dir);
    snprintf(ckpt_hy, sizeof ckpt_hy, "%s/hy.ckpt", dir);
    snprintf(dn_one, sizeof dn_one, "%s/one.weights", dir);
    snprintf(dn_hy, sizeof dn_hy, "%s/hy.weights", dir);
    RUN(t_broadcast_matches_one_process_on_2_3_4_ranks);
    RUN(t_vertical_matches_one_process_on_2_3_4_ranks);
    RUN(t_horizontal_matches_one_process_on_2_3_4_ranks);
    RUN(t_evaluation_with_empty_shares);
    RUN(t_broadcast_steps_the_shares_and_resumes_bit_for_bit);
    RUN(t_checkpoints_cross_layouts);
    RUN(t_darknet_weights_cross_layouts);
    RUN(t_impossible_layouts_are_refused);
    tiny_remove_dir(dir);
    return check_end();
}
