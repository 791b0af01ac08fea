/* test_tensor.c — proves tensor parallelism (src/train/mp/tensor.c, the split
 * [connected] and [convolutional] layers of src/nn/layer_dense.c, layer_conv.c and net.c)
 * with the real trainer and real processes: 2 and 4 ranks, and 2 replicas of 2 ranks, match
 * one process after 50 steps (SGD with momentum and decay, and Adam; a CNN with a conv pair
 * and a conv -> maxpool -> connected pair, dropout after), each rank's shares hold what the
 * whole layers hold, each rank allocates only its share of the split layers, the pairs are
 * chosen by what they cost (the layout line says which and why), checkpoints and Darknet's
 * .weights files cross layouts both ways (tensor-parallel to one process and back), and a net
 * with no pair to split, or none worth its traffic, is refused naming what to do. With one
 * replica the split [connected] layers step inside backward, their weight gradients never
 * written; with replicas, or a job logging the gradient norm, the trainer steps (exact both
 * ways). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "lib/layout.h"
#include "lib/layout_cfgs.h"
#include "lib/layout_checks.h"
#include "lib/ranks.h"
#include "lib/reference.h"
#include "nn/layer.h"
#include "nn/net.h"
#include "shoal/comm.h"
#include "train/mp/tensor.h"
#include "train/tiny_data.h"
#include "train/trainer.h"

static char dir[256], sgd_cfg[512], adam_cfg[512], odd_cfg[512], cnn_cfg[512], cnn_adam_cfg[512], thin_cfg[512],
    chain_cfg[512];
enum { STEPS = 50, BATCH = 16 };

/* conv 0 -> maxpool -> connected 32 (a pair: 128 bytes an image for 4352 multiply-adds),
 * then connected 24 and 4 whole: 32 + 24 and 24 + 4 cost more than they save, and 32 + 24
 * overlaps the first */
static const char sgd_text[] =
    "[net]\nbatch=16\nwidth=8\nheight=8\nchannels=1\n"
    "learning_rate=0.05\nmomentum=0.9\ndecay=0.0005\n"
    "\n[convolutional]\nfilters=4\nsize=3\nstride=1\npad=1\nactivation=relu\n"
    "\n[maxpool]\nsize=2\nstride=2\n"
    "\n[connected]\noutput=32\nactivation=relu\n"
    "\n[connected]\noutput=24\nactivation=leaky\n"
    "\n[connected]\noutput=4\nactivation=linear\n"
    "\n[softmax]\n\n[cost]\n";

/* two pairs: 32 + 24, then 64 + 4 (24 + 64 between them would cost more than it saves) */
static const char adam_text[] =
    "[net]\nbatch=16\nwidth=8\nheight=8\nchannels=1\n"
    "learning_rate=0.002\nadam=1\n"
    "\n[connected]\noutput=32\nactivation=relu\n"
    "\n[connected]\noutput=24\nactivation=relu\n"
    "\n[connected]\noutput=64\nactivation=relu\n"
    "\n[connected]\noutput=4\nactivation=linear\n"
    "\n[softmax]\n\n[cost]\n";

/* The CNN of layout_cfgs.h: two pairs of convolutions, one through pooling. */
static const char cnn_text[] = SH_TEST_NET_8X8("0.02", "momentum=0.9\ndecay=0.0005\n") SH_TEST_CNN_LAYERS("", "");
static const char cnn_adam_text[] = SH_TEST_NET_8X8("0.002", "adam=1\n") SH_TEST_CNN_LAYERS("", "");

/* Per image, 0 + 1 does 3072 multiply-adds for 256 bytes, 1 + 2 3584 for 224, 2 + 3 2176 for
 * 272: taken from the first layer, 0 + 1 would be split; the chain's best is 1 + 2 alone. */
static const char chain_text[] =
    "[net]\nbatch=16\nwidth=8\nheight=8\nchannels=1\nlearning_rate=0.05\n"
    "\n[connected]\noutput=24\nactivation=relu\n"
    "\n[connected]\noutput=64\nactivation=relu\n"
    "\n[connected]\noutput=32\nactivation=relu\n"
    "\n[connected]\noutput=4\nactivation=linear\n"
    "\n[softmax]\n\n[cost]\n";

/* 1x1 convolutions over 2 channels: every pair sends more than it computes */
static const char thin_text[] =
    "[net]\nbatch=16\nwidth=8\nheight=8\nchannels=1\nlearning_rate=0.05\n"
    "\n[convolutional]\nfilters=2\nsize=1\nactivation=relu\n"
    "\n[convolutional]\nfilters=2\nsize=1\nactivation=relu\n"
    "\n[connected]\noutput=4\nactivation=linear\n"
    "\n[softmax]\n\n[cost]\n";

static const char odd_text[] =
    "[net]\nbatch=16\nwidth=8\nheight=8\nchannels=1\nlearning_rate=0.05\n"
    "\n[connected]\noutput=7\nactivation=relu\n"
    "\n[connected]\noutput=4\nactivation=linear\n"
    "\n[softmax]\n\n[cost]\n";

static void opts_for(sh_train_opts *o, const char *c, int64_t steps)
{
    sh_test_train_opts(o, c, dir, BATCH, steps, 5);
}

/* Gather the shares of every split layer into the whole layer's layout and compare it with
 * one process, layer by layer (whole layers: this rank's copy). */
typedef struct {
    const char *cfg, *resume, *save; /* save: train to STEPS/2 and save, no comparison */
    int T;                           /* 0: the world */
    const char *weights;             /* start from it (and so does the one process compared) */
    const char *dn;                  /* write Darknet's file here and a checkpoint at DN.ckpt */
    const char *logdir;              /* TensorBoard events: the gradient norm is wanted */
} tp_arg;

/* Who stepped: with one replica and no gradient norm wanted the strategy, each split
 * [connected] layer inside backward (its weight gradients never written: zero as allocated);
 * else the trainer, every split layer's weight gradients written. */
static void check_fused(int rank, const sh_strategy *st, sh_net *mine, sh_net *whole, int want)
{
    int fused = 0, written = 0;
    for (int i = 0; i < sh_net_nlayers(whole); i++) {
        size_t wo, wc, mo, mc, w_off, rows, cols, nonzero = 0;
        sh_net_layer_params(whole, i, &wo, &wc);
        sh_net_layer_params(mine, i, &mo, &mc);
        if (mc == wc || strncmp(sh_net_layer_name(mine, i), "connected", 9)) continue;
        sh_net_layer_weights(mine, i, &w_off, &rows, &cols);
        for (size_t j = 0; j < rows * cols; j++) nonzero += sh_net_grads(mine)[w_off + j] != 0.0f;
        if (nonzero) written++;
        else fused++;
    }
    CHECK(st->applies_update == want, "rank %d: the strategy steps %d, expected %d", rank, st->applies_update, want);
    CHECK(want ? written == 0 : fused == 0, "rank %d: %d split connected layers stepped inside backward, %d written",
          rank, fused, written);
}

static void exact_job(shoal_comm *c, void *arg)
{
    const tp_arg *a = arg;
    const char *cfg = a->cfg;
    int T = a->T ? a->T : shoal_comm_world(c), R = shoal_comm_world(c) / T, r = shoal_comm_rank(c) % T;
    sh_tp_opts to = {cfg, T, BATCH / R, 5};
    sh_strategy *st = NULL;
    sh_net *net = NULL;
    CHECK(sh_strategy_tensor_create(c, &to, &st, &net) == SHOAL_OK, "%s", shoal_last_error_message());
    if (!st) return;
    sh_train_opts o;
    opts_for(&o, cfg, a->save ? STEPS / 2 : STEPS);
    o.batch = BATCH / R;
    o.strategy = st;
    o.logdir = a->logdir;
    sh_test_rank_run run = {.files = {a->resume, a->save, a->weights, a->dn}};
    if (!check_rank_trains(c, &o, net, &run)) goto done;
    sh_train_opts ro;
    opts_for(&ro, cfg, STEPS);
    ro.weights_path = a->weights;
    check_one_process_trains(&ro, &run);
    if (!run.t || !run.ref) goto done;
    sh_net *mine = sh_trainer_net(run.t), *whole = sh_trainer_net(run.ref);
    check_fused(r, st, mine, whole, R == 1 && !a->logdir);
    if (a->dn) check_darknet_file_is_whole(r, cfg, a->dn, run.ckpt, whole); /* the shares gathered */
    CHECK(sh_net_nparams(mine) < sh_net_nparams(whole), "rank %d holds %zu of %zu parameters", r,
          sh_net_nparams(mine), sh_net_nparams(whole));
    /* what this rank should hold: one process's whole model cut as the checkpoints cut it */
    size_t np = sh_net_nparams(mine), held = 0;
    float *want = malloc(np * sizeof *want);
    CHECK(want && st->part && st->part->take, "no shares to compare");
    if (!want || !st->part || !st->part->take) {
        free(want);
        goto done;
    }
    st->part->take(st, sh_net_params(whole), want);
    double diff = 0, norm = 0;
    for (size_t j = 0; j < np; j++) {
        diff += ((double)sh_net_params(mine)[j] - want[j]) * ((double)sh_net_params(mine)[j] - want[j]);
        norm += (double)want[j] * want[j];
    }
    free(want);
    for (int i = 0; i < sh_net_nlayers(whole); i++) {
        size_t wo, wc, mo, mc;
        sh_net_layer_params(whole, i, &wo, &wc);
        sh_net_layer_params(mine, i, &mo, &mc);
        held += mc;
        CHECK(mc <= wc, "layer %d: %zu parameters here, %zu in the whole layer", i, mc, wc);
    }
    CHECK(held == sh_net_nparams(mine), "layers' shares %zu, block %zu", held, sh_net_nparams(mine));
    double rel = sqrt(diff / (norm > 0 ? norm : 1));
    CHECK(rel < 1e-5, "rank %d of %d: %.3g relative to one process after %d steps", r, T, rel, STEPS);
    CHECK(rel > 0, "rank %d: bitwise equal to one process: were the layers split?", r);
    check_reports_match(shoal_comm_rank(c), R, &run.rep, &run.rr);
done:
    sh_test_rank_run_fini(&run);
    sh_strategy_destroy(st);
}

static void t_two_ranks_sgd_match_one_process(void)
{
    sh_test_ranks_opts o = {.links = SH_TEST_REAL, .deadline_s = 120};
    tp_arg a = {sgd_cfg, NULL, NULL, 0, NULL, NULL, NULL};
    RUN_RANKS(2, &o, exact_job, &a);
}

/* The CNN: a conv pair and a conv -> maxpool -> connected pair, dropout after; SGD and Adam,
 * 2 ranks, and 2 replicas of 2; SGD again through the convolutions' column cache. */
static void t_cnn_conv_pairs_match_one_process(void)
{
    sh_test_ranks_opts o = {.links = SH_TEST_REAL, .deadline_s = 120};
    tp_arg a = {cnn_cfg, NULL, NULL, 0, NULL, NULL, NULL};
    RUN_RANKS(2, &o, exact_job, &a);
    tp_arg b = {cnn_adam_cfg, NULL, NULL, 0, NULL, NULL, NULL};
    RUN_RANKS(2, &o, exact_job, &b);
    tp_arg c = {cnn_cfg, NULL, NULL, 2, NULL, NULL, NULL};
    RUN_RANKS(4, &o, exact_job, &c);
    /* the convolutions' column cache (many threads' path: no Winograd, dW by filters) */
    int cache_from = sh_conv_cache_min_threads;
    sh_conv_cache_min_threads = 1;
    RUN_RANKS(2, &o, exact_job, &a);
    sh_conv_cache_min_threads = cache_from;
}

/* Each of 2 ranks of the CNN holds half of the split convolutions: their filters'
 * rows (column) or their channels of every filter (row), and the layout line names the
 * chosen pairs with their bytes and the candidates left whole with why. */
static void layout_job(shoal_comm *c, void *arg)
{
    (void)arg;
    sh_tp_opts to = {cnn_cfg, 2, BATCH, 5};
    sh_strategy *st = NULL;
    sh_net *net = NULL, *whole = NULL;
    CHECK(sh_strategy_tensor_create(c, &to, &st, &net) == SHOAL_OK, "%s", shoal_last_error_message());
    sh_cfg *cfg = NULL;
    CHECK(sh_cfg_load(cnn_cfg, &cfg) == SHOAL_OK && sh_net_create_part(cfg, BATCH, 5, 0, -1, &whole) == SHOAL_OK,
          "%s", shoal_last_error_message());
    if (st && whole) {
        /* conv 0, 2: 4 of 8 filters (4x9 + 4 and 4x72 + 4); conv 1: 4 of 8 channels of its 8
         * filters (8x36 + 8); connected 4: 4 of 8 channels of 3x3 (16x36 + 16) */
        static const size_t share[] = {40, 296, 292, 0, 592};
        for (int i = 0; i < 5; i++) {
            size_t mo, mc, wo, wc;
            sh_net_layer_params(net, i, &mo, &mc);
            sh_net_layer_params(whole, i, &wo, &wc);
            CHECK(mc == share[i], "layer %d holds %zu parameters of %zu, want %zu", i, mc, wc, share[i]);
        }
        char line[4096];
        sh_test_describe(sh_strategy_tensor_describe, st, line, sizeof line);
        CHECK(strstr(line, "layers 0 (8 filters, 4 per rank, by output channels) + 1 (8 filters, by input channels)") &&
                  strstr(line, "1152 bytes per image") &&
                  strstr(line, "layers 2 (8 filters, 4 per rank, by output channels) + 4 (16 outputs, by input rows) "
                               "(layer 3 between pools the share)") &&
                  strstr(line, "not split: layers 1 + 2 (3200 bytes per image for 41472 multiply-adds): overlaps"),
              "layout:\n%s", line);
    }
    sh_net_destroy(whole);
    sh_cfg_destroy(cfg);
    sh_strategy_destroy(st);
}

/* The pairs are the chain's best set, not the first layer's: 1 + 2 splits, 0 + 1 (worth
 * less) overlaps it, 2 + 3 costs more than it saves. */
static void chain_job(shoal_comm *c, void *arg)
{
    (void)arg;
    sh_tp_opts to = {chain_cfg, 2, BATCH, 5};
    sh_strategy *st = NULL;
    sh_net *net = NULL;
    CHECK(sh_strategy_tensor_create(c, &to, &st, &net) == SHOAL_OK, "%s", shoal_last_error_message());
    if (!st) return;
    char line[4096];
    sh_test_describe(sh_strategy_tensor_describe, st, line, sizeof line);
    CHECK(strstr(line, "layers 1 (64 outputs, 32 per rank, by output columns) + 2 (32 outputs, by input rows)") &&
              strstr(line, "224 bytes per image allreduced, 3584 multiply-adds") &&
              strstr(line, "not split: layers 0 + 1 (256 bytes per image for 3072 multiply-adds): overlaps layers 1 + 2") &&
              strstr(line, "not split: layers 2 + 3 (272 bytes per image for 2176 multiply-adds): costs more than it "
                           "saves") && !strstr(line, "layers 0 (24"),
          "layout:\n%s", line);
    sh_strategy_destroy(st);
}

static void t_shares_and_layout_lines_name_the_chosen_pairs(void)
{
    sh_test_ranks_opts o = {.links = SH_TEST_REAL, .deadline_s = 60};
    RUN_RANKS(2, &o, layout_job, NULL);
    RUN_RANKS(2, &o, chain_job, NULL);
}

static void t_two_and_four_ranks_adam_match_one_process(void)
{
    sh_test_ranks_opts o = {.links = SH_TEST_REAL, .deadline_s = 120};
    tp_arg a = {adam_cfg, NULL, NULL, 0, NULL, NULL, NULL};
    RUN_RANKS(2, &o, exact_job, &a);
    RUN_RANKS(4, &o, exact_job, &a);
}

/* The update inside backward (one replica) against the trainer's (the gradient norm logged,
 * TensorBoard's): both match one process; exact_job checks who stepped. */
static void t_update_inside_backward_only_without_the_gradient_norm(void)
{
    sh_test_ranks_opts o = {.links = SH_TEST_REAL, .deadline_s = 120};
    char tb[600];
    snprintf(tb, sizeof tb, "%s/tb", dir);
    tp_arg a = {adam_cfg, NULL, NULL, 0, NULL, NULL, tb};
    RUN_RANKS(2, &o, exact_job, &a);
    tp_arg b = {sgd_cfg, NULL, NULL, 0, NULL, NULL, tb};
    RUN_RANKS(2, &o, exact_job, &b);
}

/* 2 replicas of 2 tensor-parallel ranks on 4: each replica half the batch. */
static void t_two_replicas_of_two_ranks_match_one_process(void)
{
    sh_test_ranks_opts o = {.links = SH_TEST_REAL, .deadline_s = 120};
    tp_arg a = {sgd_cfg, NULL, NULL, 2, NULL, NULL, NULL};
    RUN_RANKS(4, &o, exact_job, &a);
    tp_arg b = {adam_cfg, NULL, NULL, 2, NULL, NULL, NULL};
    RUN_RANKS(4, &o, exact_job, &b);
}

static char ckpt_one[600], ckpt_tp[600], dn_one[600], dn_tp[600], cnn_one[600], cnn_tp[600];

/* One process's checkpoint resumes on 4 tensor-parallel ranks, and 2 ranks' checkpoint in
 * one process, and the same on 2 ranks with the CNN's convolutional shares: each ends where
 * one process that never stopped does. */
static void t_checkpoints_cross_layouts(void)
{
    sh_train_opts so, ro;
    opts_for(&so, adam_cfg, STEPS / 2);
    so.save_path = ckpt_one;
    opts_for(&ro, adam_cfg, STEPS);
    tp_arg resume = {adam_cfg, ckpt_one, NULL, 0, NULL, NULL, NULL};
    tp_arg first = {adam_cfg, NULL, ckpt_tp, 0, NULL, NULL, NULL};
    check_checkpoints_cross("tensor-parallel", &so, exact_job, 4, &resume, 2, &first, &ro, ckpt_tp, 1);
    /* the CNN's convolutional shares, on 2 ranks both ways */
    opts_for(&so, cnn_adam_cfg, STEPS / 2);
    so.save_path = cnn_one;
    opts_for(&ro, cnn_cfg, STEPS);
    tp_arg cnn_resume = {cnn_adam_cfg, cnn_one, NULL, 0, NULL, NULL, NULL};
    tp_arg cnn_first = {cnn_cfg, NULL, cnn_tp, 0, NULL, NULL, NULL};
    check_checkpoints_cross("tensor-parallel CNN", &so, exact_job, 2, &cnn_resume, 2, &cnn_first, &ro, cnn_tp, 1);
}

/* Darknet's file: one process's loaded into 2 replicas of 2 tensor-parallel ranks, 2 ranks'
 * written whole (the checkpoint's shares, bitwise; one process's within rounding) and loaded
 * into 4 ranks and into one process; each run from a file ends where one process from it
 * does. */
static void t_darknet_weights_cross_layouts(void)
{
    sh_test_ranks_opts o = {.links = SH_TEST_REAL, .deadline_s = 120};
    sh_train_opts so;
    opts_for(&so, sgd_cfg, STEPS / 2);
    so.save_darknet_path = dn_one;
    CHECK(sh_test_write_one(&so) == SHOAL_OK, "%s", shoal_last_error_message());
    tp_arg from_one = {sgd_cfg, NULL, NULL, 2, dn_one, NULL, NULL};
    RUN_RANKS(4, &o, exact_job, &from_one);
    tp_arg write = {adam_cfg, NULL, NULL, 0, NULL, dn_tp, NULL};
    RUN_RANKS(2, &o, exact_job, &write);
    tp_arg from_tp = {adam_cfg, NULL, NULL, 0, dn_tp, NULL, NULL};
    RUN_RANKS(4, &o, exact_job, &from_tp);
}

static void refused_job(shoal_comm *c, void *arg)
{
    const char *want = arg;
    sh_tp_opts to = {strstr(want, "divisible") ? odd_cfg : strstr(want, "worth") ? thin_cfg : sgd_cfg,
                     strstr(want, "3 ranks") ? 2 : shoal_comm_world(c), BATCH, 5};
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
    RUN_RANKS(2, &o, refused_job, "is worth splitting: the best, layers 1 + 2, does 768 multiply-adds per image "
                                  "against 528 bytes per image allreduced");
    RUN_RANKS(3, &o, refused_job, "does not divide the 3 ranks");
}

int main(void)
{
    check_begin("test_tensor", 240);
    const sh_test_file files[] = {
        SH_TEST_FILE("sgd.cfg", sgd_text, sgd_cfg),     SH_TEST_FILE("adam.cfg", adam_text, adam_cfg),
        SH_TEST_FILE("odd.cfg", odd_text, odd_cfg),     SH_TEST_FILE("cnn.cfg", cnn_text, cnn_cfg),
        SH_TEST_FILE("cnn_adam.cfg", cnn_adam_text, cnn_adam_cfg),
        SH_TEST_FILE("thin.cfg", thin_text, thin_cfg),  SH_TEST_FILE("chain.cfg", chain_text, chain_cfg),
        SH_TEST_FILE("cnn_one.ckpt", NULL, cnn_one),    SH_TEST_FILE("cnn_tp.ckpt", NULL, cnn_tp),
        SH_TEST_FILE("one.ckpt", NULL, ckpt_one),       SH_TEST_FILE("tp.ckpt", NULL, ckpt_tp),
        SH_TEST_FILE("one.weights", NULL, dn_one),      SH_TEST_FILE("tp.weights", NULL, dn_tp)};
    if (tiny_make_dir(dir, sizeof dir) || sh_test_files_write(dir, files, SH_TEST_NFILES(files))) {
        fprintf(stderr, "cannot write the test data\n");
        return 1;
    }
    RUN(t_two_ranks_sgd_match_one_process);
    RUN(t_two_and_four_ranks_adam_match_one_process);
    RUN(t_cnn_conv_pairs_match_one_process);
    RUN(t_shares_and_layout_lines_name_the_chosen_pairs);
    RUN(t_two_replicas_of_two_ranks_match_one_process);
    RUN(t_update_inside_backward_only_without_the_gradient_norm);
    RUN(t_checkpoints_cross_layouts);
    RUN(t_darknet_weights_cross_layouts);
    RUN(t_impossible_layouts_are_refused);
    tiny_remove_dir(dir);
    return check_end();
}
