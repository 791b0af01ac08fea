/* test_pipeline_tp.c — proves pipeline and tensor parallelism composed (--pipeline S
 * --tensor-parallel T: src/train/mp/pipeline.c with mp/tensor_plan.c) with the real trainer
 * and real processes: 2 stages x 2 tensor ranks on 4 ranks match one process after 50 steps
 * with SGD and with Adam, dropout included, and so do 2 replicas of them on 8 ranks, and a
 * CNN whose stages each split a convolutional pair (conv + conv; conv -> maxpool ->
 * connected), the pairs chosen inside each stage by tensor parallelism's cost rule (the
 * layout line says which and why the others stay whole); each rank allocates only its shares
 * of its stage (parameters, gradients, optimizer state); checkpoints cross one process,
 * plain pipelines and the composed layout both ways (the CNN's convolutional shares too); a
 * rank started with another T stops every rank at start-up naming it; impossible layouts (no
 * pair in any stage, none worth its bytes) get one clear error; a killed rank stops the
 * others, which name a rank. */
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "lib/layout.h"
#include "lib/layout_cfgs.h"
#include "lib/layout_checks.h"
#include "lib/ranks.h"
#include "lib/reference.h"
#include "nn/net.h"
#include "nn/optim.h"
#include "shoal/comm.h"
#include "train/mp/pipeline.h"
#include "train/tiny_data.h"
#include "train/trainer.h"
#include "train/trainer_internal.h"

static char dir[256], sgd_cfg[512], adam_cfg[512], plain_cfg[512], odd_cfg[512], thin_cfg[512], cnn_cfg[512],
    cnn_adam_cfg[512];
enum { STEPS = 50, GLOBAL_BATCH = 16 };

/* Stage 0: a pair (32 + 24), a whole layer (24 + 20 costs more than it saves) and dropout;
 * stage 1: a pair (64 + 32) and a whole layer. The dropout sits in one stage, so the
 * micro-batches draw its masks in one process's order, and every tensor rank of the stage
 * draws the same. */
#define STAGED_LAYERS                                                                        \
    "\n[connected]\noutput=32\nactivation=relu\nstage=0\n"                                   \
    "\n[connected]\noutput=24\nactivation=leaky\n"                                           \
    "\n[connected]\noutput=20\nactivation=relu\n"                                            \
    "\n[dropout]\nprobability=0.2\n"                                                         \
    "\n[connected]\noutput=64\nactivation=relu\nstage=1\n"                                   \
    "\n[connected]\noutput=32\nactivation=relu\n"                                            \
    "\n[connected]\noutput=4\nactivation=linear\n"                                           \
    "\n[softmax]\n\n[cost]\n"

static const char sgd_text[] = "[net]\nbatch=16\nwidth=8\nheight=8\nchannels=1\n"
                               "learning_rate=0.05\nmomentum=0.9\ndecay=0.0005\n" STAGED_LAYERS;

static const char adam_text[] = "[net]\nbatch=16\nwidth=8\nheight=8\nchannels=1\n"
                                "learning_rate=0.002\nadam=1\ndecay=0.0005\n" STAGED_LAYERS;

/* No dropout: replicas draw their own shard's masks, which one process does not. */
static const char plain_text[] = SH_TEST_STAGED_CFG;
static const char odd_text[] = SH_TEST_ODD_CFG;

/* 1x1 convolutions over 2 channels in stage 0: a pair that sends more than it computes. */
static const char thin_text[] = SH_TEST_NET_8X8("0.05", "")
    "\n[convolutional]\nfilters=2\nsize=1\nactivation=relu\nstage=0\n"
    "\n[convolutional]\nfilters=2\nsize=1\nactivation=relu\n"
    "\n[connected]\noutput=4\nactivation=linear\nstage=1\n"
    "\n[softmax]\n\n[cost]\n";

/* The CNN cut before conv 2: stage 0 splits conv 0 + conv 1, stage 1 conv 2 + connected 4
 * (maxpool 3 between), whose input gradient goes back to stage 0: summed over the ranks. */
static const char cnn_text[] = SH_TEST_NET_8X8("0.02", "momentum=0.9\ndecay=0.0005\n")
    SH_TEST_CNN_LAYERS("stage=0\n", "stage=1\n");
static const char cnn_adam_text[] = SH_TEST_NET_8X8("0.002", "adam=1\n") SH_TEST_CNN_LAYERS("stage=0\n", "stage=1\n");

static void opts_for(sh_train_opts *o, const char *c, int batch, int64_t steps)
{
    sh_test_train_opts(o, c, dir, batch, steps, 7);
}

typedef struct {
    const char *cfg;
    int stages, T, micro;
    int64_t steps;
    const char *resume, *save; /* NULL: none */
} pt_arg;

/* This rank's shares of layers [lo, hi) against one process's whole layers: the squared
 * difference and norm added up; *held: the values the shares hold. W is (K, I) with K the
 * layer's units (outputs, filters): a column share is rows [t k, (t+1) k) of W and those
 * biases, a row share columns [t i, (t+1) i) of W and the biases whole (Megatron-LM's split,
 * as mp/tensor_plan.c's). */
static void compare_shares(sh_net *mine, sh_net *whole, int t, double *diff, double *norm, size_t *held,
                           size_t *expected)
{
    int lo, hi;
    sh_net_part(mine, &lo, &hi);
    for (int i = lo; i < hi; i++) {
        size_t wo, wc, mo, mc;
        sh_net_layer_params(whole, i, &wo, &wc);
        sh_net_layer_params(mine, i, &mo, &mc);
        *held += mc;
        const float *w = sh_net_params(whole) + wo, *m = sh_net_params(mine) + mo;
        int kc, kh, kw, mk, mh, mw;
        sh_net_layer_shape(whole, i, &kc, &kh, &kw);
        sh_net_layer_shape(mine, i, &mk, &mh, &mw);
        size_t K = (size_t)kc, k = (size_t)mk, r = (size_t)t;
        if (mc == wc) { /* whole on every rank */
            *expected += wc;
            for (size_t j = 0; j < wc; j++) {
                *diff += ((double)m[j] - w[j]) * ((double)m[j] - w[j]);
                *norm += (double)w[j] * w[j];
            }
            continue;
        }
        if (k < K) { /* column */
            size_t in = (wc - K) / K;
            *expected += k * in + k;
            for (size_t j = 0; j < k * in; j++) {
                double d = (double)m[j] - w[r * k * in + j];
                *diff += d * d;
                *norm += (double)w[r * k * in + j] * w[r * k * in + j];
            }
            for (size_t j = 0; j < k; j++) {
                double d = (double)m[k * in + j] - w[K * in + r * k + j];
                *diff += d * d;
            }
            continue;
        }
        size_t I = (wc - K) / K, in = I / 2; /* row, T = 2 */
        *expected += K * in + K;
        for (size_t row = 0; row < K; row++)
            for (size_t col = 0; col < in && mc == K * in + K; col++) {
                double wv = w[row * I + r * in + col], d = (double)m[row * in + col] - wv;
                *diff += d * d;
                *norm += wv * wv;
            }
        for (size_t j = 0; j < K && mc == K * in + K; j++) {
            double d = (double)m[K * in + j] - w[K * I + j];
            *diff += d * d;
        }
    }
}

/* Every rank trains its shares of its stage, then compares them with one process trained on
 * the whole batch, and checks what it allocated. */
static void exact_job(shoal_comm *c, void *arg)
{
    const pt_arg *a = arg;
    int g = shoal_comm_rank(c), n = shoal_comm_world(c);
    int replicas = n / (a->stages * a->T), t = g % a->T;
    sh_pipe_opts po = {a->cfg, a->stages, a->micro, GLOBAL_BATCH / replicas, 7};
    sh_strategy *st = NULL;
    sh_net *net = NULL;
    CHECK(sh_strategy_pipeline_tp_create(c, &po, a->T, &st, &net) == SHOAL_OK, "%s", shoal_last_error_message());
    if (!st) return;
    sh_train_opts o;
    opts_for(&o, a->cfg, GLOBAL_BATCH / replicas, a->save ? a->steps / 2 : a->steps);
    o.strategy = st;
    sh_test_rank_run run = {.files = {a->resume, a->save, NULL, NULL}};
    if (!check_rank_trains(c, &o, net, &run)) goto done;
    sh_train_opts ro;
    opts_for(&ro, a->cfg, GLOBAL_BATCH, a->steps);
    check_one_process_trains(&ro, &run);
    if (!run.ref) goto done;
    sh_net *mine = sh_trainer_net(run.t), *whole = sh_trainer_net(run.ref);
    double diff = 0, norm = 0;
    size_t held = 0, expected = 0;
    if (a->T == 2) compare_shares(mine, whole, t, &diff, &norm, &held, &expected);
    else { /* a plain pipeline's stage: its layers whole */
        held = expected = sh_net_nparams(mine);
        double rel = check_stage_holds_its_layers(g, mine, whole);
        diff = rel * rel;
        norm = 1;
    }
    /* what it allocates: its shares' parameters, as many gradients, the optimizer's state
     * per parameter (momentum; Adam's two moments) and a few scalars */
    size_t noptim = 0;
    (void)sh_optim_state(run.t->opt, &noptim);
    CHECK(held == sh_net_nparams(mine) && expected == held, "rank %d: layers' shares %zu, block %zu, expected %zu",
          g, held, sh_net_nparams(mine), expected);
    int lo, hi;
    size_t stage_whole = 0;
    sh_net_part(mine, &lo, &hi);
    for (int i = lo; i < hi; i++) {
        size_t o2, c2;
        sh_net_layer_params(whole, i, &o2, &c2);
        stage_whole += c2;
    }
    CHECK(a->T > 1 ? sh_net_nparams(mine) < stage_whole : sh_net_nparams(mine) == stage_whole,
          "rank %d holds %zu parameters; its stage's layers %d-%d have %zu", g, sh_net_nparams(mine), lo, hi - 1,
          stage_whole);
    CHECK(run.t->nparams == sh_net_nparams(mine) && noptim <= 2 * sh_net_nparams(mine) + 8,
          "rank %d: trainer %zu parameters, optimizer %zu values for %zu parameters", g, run.t->nparams, noptim,
          sh_net_nparams(mine));
    double rel = sqrt(diff / (norm > 0 ? norm : 1));
    CHECK(rel < 1e-5, "rank %d (stage %d, tensor rank %d): %.3g relative to one process after %lld steps", g,
          g / a->T % a->stages, t, rel, (long long)a->steps);
    CHECK(rel > 0, "rank %d: bitwise equal to one process: was the stage split?", g);
    check_reports_match(g, replicas, &run.rep, &run.rr);
done:
    sh_test_rank_run_fini(&run);
    sh_strategy_destroy(st);
}

/* SGD with 4 micro-batches, Adam with 2. */
static void t_two_stages_two_tensor_ranks_sgd_and_adam_dropout_match(void)
{
    sh_test_ranks_opts o = {.links = SH_TEST_REAL, .deadline_s = 120};
    pt_arg a = {sgd_cfg, 2, 2, 4, STEPS, NULL, NULL}, b = {adam_cfg, 2, 2, 2, STEPS, NULL, NULL};
    RUN_RANKS(4, &o, exact_job, &a);
    RUN_RANKS(4, &o, exact_job, &b);
}

/* -n 8 --pipeline 2 --tensor-parallel 2: 2 replicas, each half the batch. */
static void t_two_replicas_of_two_by_two_match(void)
{
    sh_test_ranks_opts o = {.links = SH_TEST_REAL, .deadline_s = 180};
    pt_arg a = {plain_cfg, 2, 2, 2, STEPS, NULL, NULL};
    RUN_RANKS(8, &o, exact_job, &a);
}

/* The CNN: each stage's convolutional pair split, SGD and Adam. */
static void t_cnn_stages_split_conv_pairs_match(void)
{
    sh_test_ranks_opts o = {.links = SH_TEST_REAL, .deadline_s = 120};
    pt_arg a = {cnn_cfg, 2, 2, 4, STEPS, NULL, NULL};
    RUN_RANKS(4, &o, exact_job, &a);
    pt_arg b = {cnn_adam_cfg, 2, 2, 2, STEPS, NULL, NULL};
    RUN_RANKS(4, &o, exact_job, &b);
}

/* --pipeline 2 --tensor-parallel 2 over cfg on the job's ranks: with `refused`, start-up
 * fails with SHOAL_ERR_INVALID and a line holding every want[]; else it succeeds and the
 * layout lines (sh_strategy_pipeline_describe) hold every want[]. */
typedef struct {
    const char *cfg;
    int refused;
    const char *want[4];
} layout_arg;

static void layout_job(shoal_comm *c, void *arg)
{
    const layout_arg *a = arg;
    sh_pipe_opts po = {a->cfg, 2, 2, 0, 7};
    sh_strategy *st = NULL;
    sh_net *net = NULL;
    shoal_result rc = sh_strategy_pipeline_tp_create(c, &po, 2, &st, &net);
    char line[4096];
    if (a->refused) {
        CHECK(rc == SHOAL_ERR_INVALID && !st && !net, "rank %d: rc %d", shoal_comm_rank(c), rc);
        snprintf(line, sizeof line, "%s", shoal_last_error_message());
    } else {
        CHECK(rc == SHOAL_OK, "%s", shoal_last_error_message());
        if (!st) return;
        sh_test_describe(sh_strategy_pipeline_describe, st, line, sizeof line);
    }
    for (int k = 0; k < 4 && a->want[k]; k++)
        CHECK(strstr(line, a->want[k]), "wanted \"%s\" in:\n%s", a->want[k], line);
    sh_strategy_destroy(st);
}

/* The layout line: each stage's pairs chosen by tensor parallelism's rule and described as
 * its layout line does; stage 1's pair counts the allreduce of its first layer's input
 * gradient (64 + 1152 bytes per image: it goes back to stage 0). */
static void t_layout_line_explains_each_stages_pairs(void)
{
    sh_test_ranks_opts o = {.links = SH_TEST_REAL, .deadline_s = 60};
    layout_arg cnn = {cnn_cfg, 0,
                      {"    layers 0 (8 filters, 4 per rank, by output channels) + 1 (8 filters, by input channels): "
                       "one allreduce of its output forward",
                       "    layers 2 (8 filters, 4 per rank, by output channels) + 4 (16 outputs, by input rows) "
                       "(layer 3 between pools the share)",
                       "1216 bytes per image allreduced, 22176 multiply-adds per image split", NULL}};
    RUN_RANKS(4, &o, layout_job, &cnn);
    layout_arg fc = {sgd_cfg, 0,
                     {"layers 0 (32 outputs, 16 per rank, by output columns) + 1 (24 outputs, by input rows)",
                      "not split: layers 1 + 2 (208 bytes per image for 1248 multiply-adds): costs more than it saves",
                      "layers 4 (64 outputs, 32 per rank, by output columns) + 5 (32 outputs, by input rows)", NULL}};
    RUN_RANKS(4, &o, layout_job, &fc);
}

static char ckpt_one[600], ckpt_pt[600], ckpt_pipe[600], ckpt_pt2[600], cnn_one[600], cnn_pt[600];

/* One process's checkpoint resumes on 2 x 2 ranks; 2 x 2 ranks' resumes in one process and
 * in a plain 2-stage pipeline; a plain pipeline's resumes on 2 x 2 ranks; the same both ways
 * with the CNN's convolutional shares. Each ends where one process that never stopped does
 * (dropout included: its stream is carried along). */
static void t_checkpoints_cross_layouts(void)
{
    sh_test_ranks_opts o = {.links = SH_TEST_REAL, .deadline_s = 120};
    sh_train_opts so, ro;
    opts_for(&so, sgd_cfg, GLOBAL_BATCH, STEPS / 2);
    so.save_path = ckpt_one;
    opts_for(&ro, sgd_cfg, GLOBAL_BATCH, STEPS);
    pt_arg from_one = {sgd_cfg, 2, 2, 4, STEPS, ckpt_one, NULL}, write = {sgd_cfg, 2, 2, 4, STEPS, NULL, ckpt_pt};
    check_checkpoints_cross("2 stages x 2 tensor ranks", &so, exact_job, 4, &from_one, 4, &write, &ro, ckpt_pt, 1);
    pt_arg to_pipe = {sgd_cfg, 2, 1, 4, STEPS, ckpt_pt, NULL};
    RUN_RANKS(2, &o, exact_job, &to_pipe);

    pt_arg pipe = {adam_cfg, 2, 1, 2, STEPS, NULL, ckpt_pipe};
    RUN_RANKS(2, &o, exact_job, &pipe);
    pt_arg from_pipe = {adam_cfg, 2, 2, 2, STEPS, ckpt_pipe, NULL};
    RUN_RANKS(4, &o, exact_job, &from_pipe);
    pt_arg write_adam = {adam_cfg, 2, 2, 2, STEPS, NULL, ckpt_pt2};
    RUN_RANKS(4, &o, exact_job, &write_adam);
    opts_for(&ro, adam_cfg, GLOBAL_BATCH, STEPS);
    check_resumes_in_one_process("2 stages x 2 tensor ranks (Adam)", &ro, ckpt_pt2, 1);
    /* the CNN's convolutional shares: one process's resumed on 2 x 2 ranks and back */
    opts_for(&so, cnn_adam_cfg, GLOBAL_BATCH, STEPS / 2);
    so.save_path = cnn_one;
    opts_for(&ro, cnn_cfg, GLOBAL_BATCH, STEPS);
    pt_arg cnn_from = {cnn_adam_cfg, 2, 2, 2, STEPS, cnn_one, NULL};
    pt_arg cnn_write = {cnn_cfg, 2, 2, 4, STEPS, NULL, cnn_pt};
    check_checkpoints_cross("2 stages x 2 tensor ranks (CNN)", &so, exact_job, 4, &cnn_from, 4, &cnn_write, &ro,
                            cnn_pt, 1);
}

/* The last rank was started with another T: every rank stops at start-up, naming it. */
static void mismatched_job(shoal_comm *c, void *arg)
{
    (void)arg;
    int g = shoal_comm_rank(c), n = shoal_comm_world(c);
    sh_pipe_opts po = {sgd_cfg, 2, 4, 0, 7};
    sh_strategy *st = NULL;
    sh_net *net = NULL;
    shoal_result rc = sh_strategy_pipeline_tp_create(c, &po, g == n - 1 ? 1 : 2, &st, &net);
    CHECK(rc == SHOAL_ERR_MISMATCH && !st && !net, "rank %d: rc %d", g, rc);
    CHECK(strstr(shoal_last_error_message(), "rank 3 runs --pipeline 2 --micro-batches 4 --batch 0 --tensor-parallel 1 "
                                             "but rank 0 runs --pipeline 2 --micro-batches 4 --batch 0 "
                                             "--tensor-parallel 2"),
          "%s", shoal_last_error_message());
}

static void t_impossible_layouts_are_refused(void)
{
    sh_test_ranks_opts o = {.links = SH_TEST_REAL, .deadline_s = 60};
    RUN_RANKS(4, &o, mismatched_job, NULL);
    layout_arg not_divisible = {sgd_cfg, 1, {"does not divide the 2 ranks into replicas of 2 stages x 2 tensor ranks"}};
    RUN_RANKS(2, &o, layout_job, &not_divisible);
    layout_arg no_pair = {odd_cfg, 1, {"no stage of", "has a pair of layers to split inside it: two consecutive"}};
    RUN_RANKS(4, &o, layout_job, &no_pair);
    layout_arg none_worth = {thin_cfg, 1,
                             {"is worth splitting: the best, layers 0 + 1, does 384 multiply-adds per image against "
                              "512 bytes per image allreduced (split above 8 per byte); use --pipeline alone"}};
    RUN_RANKS(4, &o, layout_job, &none_worth);
}

/* Rank 3 (stage 1, tensor rank 1) dies at step 3: the others stop instead of waiting, and
 * its stage's other rank and the tensor rank 1 of stage 0, its two partners, name it. */
static void killed_job(shoal_comm *c, void *arg)
{
    (void)arg;
    int g = shoal_comm_rank(c);
    sh_pipe_opts po = {plain_cfg, 2, 4, 0, 7};
    sh_strategy *st = NULL;
    sh_net *net = NULL;
    CHECK(sh_strategy_pipeline_tp_create(c, &po, 2, &st, &net) == SHOAL_OK, "%s", shoal_last_error_message());
    if (!st) return;
    sh_train_opts o;
    opts_for(&o, plain_cfg, GLOBAL_BATCH, 20);
    o.strategy = st;
    const char *msg = check_stops_when_one_dies(c, &o, net, 20, 3, 3);
    /* its partners name it by its job rank (their communicators' ranks differ); rank 0 waits on
     * them, and names whichever stopped first */
    CHECK(g == 0 ? strstr(msg, "rank 1") || strstr(msg, "rank 2") || strstr(msg, "rank 3")
                 : strstr(msg, "job rank 3") != NULL,
          "rank %d: the error names the lost rank: %s", g, msg);
    sh_strategy_destroy(st);
}

static void t_killed_rank_stops_the_others(void)
{
    sh_test_ranks_opts o = {.links = SH_TEST_REAL, .deadline_s = 60, .timeout_ms = 5000, .dying_mask = 8};
    RUN_RANKS(4, &o, killed_job, NULL);
}

int main(void)
{
    check_begin("test_pipeline_tp", 600);
    const sh_test_file files[] = {
        SH_TEST_FILE("sgd.cfg", sgd_text, sgd_cfg),       SH_TEST_FILE("adam.cfg", adam_text, adam_cfg),
        SH_TEST_FILE("plain.cfg", plain_text, plain_cfg), SH_TEST_FILE("odd.cfg", odd_text, odd_cfg),
        SH_TEST_FILE("cnn.cfg", cnn_text, cnn_cfg),       SH_TEST_FILE("thin.cfg", thin_text, thin_cfg),
        SH_TEST_FILE("cnn_adam.cfg", cnn_adam_text, cnn_adam_cfg),
        SH_TEST_FILE("cnn_one.ckpt", NULL, cnn_one),      SH_TEST_FILE("cnn_pt.ckpt", NULL, cnn_pt),
        SH_TEST_FILE("one.ckpt", NULL, ckpt_one),         SH_TEST_FILE("pt.ckpt", NULL, ckpt_pt),
        SH_TEST_FILE("pt2.ckpt", NULL, ckpt_pt2),         SH_TEST_FILE("pipe.ckpt", NULL, ckpt_pipe)};
    if (tiny_make_dir(dir, sizeof dir) || sh_test_files_write(dir, files, SH_TEST_NFILES(files))) {
        fprintf(stderr, "cannot write the test data\n");
        return 1;
    }
    RUN(t_two_stages_two_tensor_ranks_sgd_and_adam_dropout_match);
    RUN(t_two_replicas_of_two_by_two_match);
    RUN(t_cnn_stages_split_conv_pairs_match);
    RUN(t_layout_line_explains_each_stages_pairs);
    RUN(t_checkpoints_cross_layouts);
    RUN(t_impossible_layouts_are_refused);
    RUN(t_killed_rank_stops_the_others);
    tiny_remove_dir(dir);
    return check_end();
}
