/* dense.h — what the [connected] layer's files share: the path rules by the machine
 * (dense_rules.c), the products on each path (dense_gemm.c), the tensor-parallel shares
 * (dense_share.c); layer_dense.c is the layer itself.
 * Not here: the tests' knobs (layer.h), a pipeline stage's packed copies (net.h).
 * Proved by tests/nn/test_layer_dense.c, tests/train/test_tensor.c, test_hybrid.c. */
#ifndef SH_DENSE_H
#define SH_DENSE_H

#include "nn/layer.h"

enum {
    /* a whole layer packs its own weights only up to this many (W^T and W packed take twice
     * the weights' floats, paid back over the rows); past it, X alone (dense_rules.c) */
    SH_DENSE_SELF_PACK_MAX = 1 << 20,
    /* the fewest outputs for which a layer runs few rows on gemm_small.c */
    SH_DENSE_SMALL_MIN_OUTPUTS = 64,
    /* rows of dW a share computes and steps at once (32 x 6272 floats: 800 KB, in L2) */
    SH_DENSE_FUSE_ROWS = 32,
    /* rows of a gather share's forward per turned-around product: 32 x 6272 inputs packed
     * stay in L2, a whole batch of 128 does not */
    SH_DENSE_GATHER_ROWS = 32,
};

static inline int sh_dense_min(int a, int b) { return a < b ? a : b; }

/* This layer's outputs [k0, k0 + ks) of the ld columns of its output and delta buffers: all
 * of them, except for a gather share (its columns of the whole output). */
static inline void sh_dense_cols(const sh_layer *l, int *k0, int *ks, int *ld)
{
    int K = l->out_shape.c;
    *k0 = 0;
    *ks = *ld = K;
    if (l->tp_role != SH_TP_GATHER) return;
    long long r = l->tp_rank, R = l->tp_ranks;
    *k0 = (int)(r * K / R);
    *ks = (int)((r + 1) * K / R) - *k0;
}

/* ---- dense_rules.c: the machine's rules ---- */

/* 1 under the newer rule set (L2 of 2 MiB a core or more, or AMD's AVX-512 CPUs). */
int sh_dense_rules_newer(void);
/* Rows per product [lo, hi] on gemm_small.c, the forward's (dx 0) or the input gradient's
 * (dx 1): the test's (sh_dense_small_*_rows) or the machine's; [1, 0]: none. */
const int *sh_dense_rules_window(int dx);
/* 0 when the machine's forward window does not take a product of rows x inputs (its packed
 * rows would not fit in L2); 1 under a test's window. */
int sh_dense_rules_fwd_fits(int rows, int inputs);

/* ---- dense_gemm.c: the products, each on the path this pass takes ---- */

/* Scratch (ws_count) and cache (cache_count) a layer of k kept outputs needs for its paths. */
void sh_dense_gemm_size(sh_layer *l, const sh_parse_ctx *ctx, int k);
/* Rows per product: the whole pass on one thread, else two chunks per thread. */
int sh_dense_gemm_chunk(const sh_exec *x);
/* 1 when this pass runs on the layer's own packed operands (forward and backward alike). */
int sh_dense_gemm_self_packs(const sh_layer *l, const sh_exec *x);
/* The layer's own W^T (forward) or W (input gradient) packed from the parameters. */
void sh_dense_gemm_pack_wt(sh_layer *l, sh_exec *x);
void sh_dense_gemm_pack_w(sh_layer *l, sh_exec *x);
/* X packed for dW when this pass's dW runs on the packed kernel: 1 if so. */
int sh_dense_gemm_pack_x(sh_layer *l, sh_exec *x);
/* Y (n, ks) = X W^T for images [n0, n1) into this layer's columns of l->out (no bias). */
void sh_dense_gemm_forward(sh_layer *l, sh_exec *x, int tid, int n0, int n1);
/* dX (n, I) = dY W for images [n0, n1), written or added (accum) into in_delta[0]. */
void sh_dense_gemm_dx(sh_layer *l, sh_exec *x, int tid, int n0, int n1);
/* Rows [k0, k1) of dW (K, I) = dY^T X over the pass, written or added (x->weights_add). */
void sh_dense_gemm_dw(sh_layer *l, sh_exec *x, int k0, int k1);
/* Bias gradients of outputs [k0, k1): dY's columns summed over the pass, in image order. */
void sh_dense_gemm_bias(sh_layer *l, sh_exec *x, int k0, int k1);

/* ---- dense_share.c: tensor-parallel and hybrid shares ---- */

/* A share's weights: the whole layer's draws, in its order, keeping the share's. */
void sh_dense_share_init(sh_layer *l, float *params, sh_rng *rng);
/* After the share's product: a row share sums Y over the ranks, then bias and activation; a
 * gather share sums its whole output. */
void sh_dense_share_forward(sh_layer *l, sh_exec *x);
/* After backward: a column or gather share sums its input's gradient over the ranks. */
void sh_dense_share_backward(sh_layer *l, sh_exec *x);
/* dW in blocks of SH_DENSE_FUSE_ROWS rows, each stepped by x->update at once, then the
 * biases (SH_LAYER_FUSES_UPDATE layers). */
void sh_dense_share_update(sh_layer *l, sh_exec *x);

#endif
