/* layer.h — the layer table (sh_layer_ops: cfg name, parse, forward, backward), the layer
 * record every layer file fills, and the execution context net.c hands to them.
 * Not here: buffer allocation and step order (net.c), the math of each layer (layer_*.c).
 * Proved by tests/nn/test_layer_*.c and tests/nn/test_net.c. */
#ifndef SH_LAYER_H
#define SH_LAYER_H

#include <stddef.h>
#include <stdint.h>

#include "base/util.h"
#include "nn/activation.h"
#include "nn/cfg.h"
#include "nn/darknet_weights.h"
#include "nn/net.h"
#include "nn/tensor.h"
#include "nn/threads.h"

#define SH_LAYER_MAX_SRC 8 /* inputs of one layer ([route] layers=...) */

typedef struct sh_layer sh_layer;
typedef struct sh_exec sh_exec;

/* [cost]'s loss: cross-entropy of the [softmax] before it, or a regression against targets
 * (net_unlabelled.c): Darknet's sse (1/2 sum of squares), L1, smooth (Huber, delta 1). */
enum { SH_COST_XENT = 0, SH_COST_SSE, SH_COST_L1, SH_COST_SMOOTH };

/* [rbm]'s pretraining (layer_rbm.c): CD-k or persistent CD with SGD of its own. */
typedef struct {
    int cd_k;             /* Gibbs steps per update */
    int persistent;       /* 1: the negative chain carries over from batch to batch (PCD) */
    int gaussian;         /* 1: Gaussian visible units of unit variance, 0: Bernoulli */
    int sample_visible;   /* 1: the chain samples the visible units, 0: takes their means */
    float learning_rate, momentum, decay;
    float sparsity;       /* target mean activation of a hidden unit; 0: no sparsity term */
    float sparsity_cost;  /* weight of the sparsity term's gradient */
} sh_rbm_opts;

/* What a layer parser may look at: the layers before it (their output shapes) and the
 * network input shape. */
typedef struct {
    sh_layer *layers; /* [0, index) are parsed */
    int index;
    sh_shape input;   /* the network input (C, H, W) */
    int batch;        /* rows of every buffer: time_steps x streams */
    int time_steps;   /* [net] time_steps: rows are (T, streams) time-major */
    int out_div;      /* tensor parallelism: this layer keeps outputs / out_div (1: all) */
    /* hybrid parallelism (SH_TP_GATHER): this layer keeps outputs [r K/R, (r+1) K/R) of its K
     * with r = share_rank, R = share_ranks (1: all), its output staying whole (K) */
    int share_rank, share_ranks;
    int tp_role;      /* SH_TP_* (net.h) of this layer: a column or row share sizes the fused update */
} sh_parse_ctx;

/* What a layer can do (sh_layer_ops.caps; sh_layer.caps for one layer), so that the net asks
 * its layers instead of knowing them. A layer that sets none is plain: it cannot be split,
 * packed or deferred, and is neither the output nor the loss. */
enum {
    /* tensor parallelism (net_tensor.c): a column share (its outputs or filters split) */
    SH_LAYER_SPLIT_COLUMN = 1 << 0,
    /* a row share reading any contiguous range of its inputs */
    SH_LAYER_SPLIT_ROW = 1 << 1,
    /* its shares go by channels: a column share keeps whole filters; a row share reads a
     * share of its input channels, so it follows only a column share by channels */
    SH_LAYER_SPLIT_CHANNELS = 1 << 2,
    /* acts on each channel alone: it runs on a column share by channels as on the whole */
    SH_LAYER_PER_CHANNEL = 1 << 3,
    /* hybrid parallelism: a gather share (outputs split, the output whole; SH_TP_GATHER) */
    SH_LAYER_GATHER = 1 << 4,
    /* its share applies the net's update hook itself as its gradients are made
     * (sh_net_set_update); set by parse for the layers that do */
    SH_LAYER_FUSES_UPDATE = 1 << 5,
    /* W (K, I) at w_off may be packed by the net for its products (sh_net_keep_packed) */
    SH_LAYER_PACKED_WEIGHTS = 1 << 6,
    /* dW = dY^T X from its input (N, I) and delta (N, K): sufficient factors
     * (sh_net_layer_factors) */
    SH_LAYER_FACTORS = 1 << 7,
    /* its output is the class probabilities the cross-entropy loss reads ([softmax]) */
    SH_LAYER_SOFTMAX = 1 << 8,
    /* marks the loss after the softmax, in place on it ([cost]) */
    SH_LAYER_LOSS = 1 << 9,
    /* reads the activation= key and applies it to its output (shoal_layer_info.activation) */
    SH_LAYER_ACTIVATION = 1 << 10,
};

typedef struct {
    const char *cfg_name;   /* "convolutional": the [section] name */
    /* SH_LAYER_* bits every layer of this kind has; parse may clear what its options rule
     * out and set what they add (sh_layer.caps). Deferred weight gradients: the weights hook. */
    unsigned caps;
    const char *short_name; /* "conv": for sh_net_layer_name */
    const char *form;       /* "darknet": the form= this table stands for (NULL: the section's only one) */
    /* Read keys through cfg.h getters; set src/nsrc (default: the previous layer), out
     * shape, parameter/stat/workspace/keep counts and flops. Do not allocate (a file read at
     * parse time, [softmax] tree=, is the one exception; fini frees it). */
    shoal_result (*parse)(sh_layer *l, sh_cfg_section *s, const sh_parse_ctx *ctx);
    /* Fill this layer's parameters (and stats) deterministically from rng. May be NULL. */
    void (*init)(sh_layer *l, float *params, float *stats, sh_rng *rng);
    void (*forward)(sh_layer *l, sh_exec *x);
    /* Write dL/d(params) into x->grad[0] (through sh_exec_partials' slots for sums over
     * images) and write (or add, when accum[k]) dL/d(input k) into in_delta[k] if non-NULL. */
    void (*backward)(sh_layer *l, sh_exec *x);
    /* The weight and bias gradients alone, overwriting the layer's gradient slice: dW from
     * l->in[0] (nimg, inputs) and l->delta (nimg, outputs) as backward leaves it (the
     * activation's gradient applied). When x->defer_weights and sh_layer_defers_weights(l),
     * backward skips them and the caller runs this later, over a whole batch of factors it
     * kept (a pipeline stage's micro-batches: net_part.c); x->weights_add: adds to them
     * instead. May be NULL: never deferred. */
    void (*weights)(sh_layer *l, sh_exec *x);
    /* Free what parse allocated (only [softmax] tree=: its group sizes). May be NULL; called
     * for every layer whose parse ran, including one that failed. */
    void (*fini)(sh_layer *l);
    /* Darknet's .weights layout (darknet_weights.c): fill out[0..max) with this layer's
     * arrays in the order Darknet's parser.c saves them; return how many. NULL: the layer
     * has no parameters (a layer with parameters and no layout cannot be read or written). */
    int (*darknet_blobs)(const sh_layer *l, sh_dn_blob *out, int max);
    /* Set by a layer whose arrays could be laid out as Darknet's but whose equations differ
     * from the same section's in Darknet: why its weights would not mean the same there (one
     * sentence, no trailing period); reading or writing a .weights file is then refused. */
    const char *darknet_refusal;
} sh_layer_ops;

struct sh_layer {
    const sh_layer_ops *ops;
    unsigned caps;          /* SH_LAYER_* bits: ops->caps as this layer's parse left them */
    int index, line;
    char name[32];          /* "conv 0" */
    /* inputs: layer indices, -1 = the network input */
    int nsrc, src[SH_LAYER_MAX_SRC];
    size_t src_outputs[SH_LAYER_MAX_SRC]; /* C*H*W of each input (set by net.c) */
    sh_shape in_shape, out_shape; /* in_shape: shape of src[0] */
    const sh_shape *from_shape;   /* shortcut: shape of src[1] (in the layer array) */
    size_t inputs, outputs; /* C*H*W of in and out */

    /* options (each layer uses its own) */
    sh_act act;
    int filters, size, stride, pad; /* conv: pad = padding in pixels; pool: total padding */
    int batch_normalize;
    int group;                      /* conv: images unrolled into one product */
    int groups;                     /* conv: channel groups (groups=), 1 = ordinary */
    float probability, scale;       /* dropout */
    float temperature;              /* softmax */
    float alpha, beta, kappa;       /* lrn: s = kappa + alpha sum x^2, y = x s^-beta */
    int tree_groups;                /* softmax tree=: groups of the WordTree, 0: no tree */
    int *tree_group_size;           /* [tree_groups]: consecutive outputs per group */
    int alias_input;                /* [cost]: out/delta are src[0]'s */
    int reverse, extra;             /* reorg */
    int flip;                       /* crop */
    int cost;                       /* [cost]: SH_COST_* */
    sh_rbm_opts rbm;                /* [rbm] */
    int pretraining;                /* [rbm]: 1 in the net that pretrains it (sh_net_create_pretrain) */
    int steps, hidden;              /* recurrent: T (rows are (T, streams)), state width */
    int ngates;                     /* gated recurrent ([gru], [lstm]): gates per unit */
    const struct sh_rnn_loop *rnn_loop; /* recurrent: the time loop a split runs (recurrent.h) */
    int input_onehot;               /* recurrent: this pass's input rows are one-hot */
    int stage;                      /* stage=K: its pipeline stage; -1: not placed */
    /* Tensor parallelism (Megatron-LM's pair of [connected] or [convolutional] layers over
     * tp_ranks ranks): SH_TP_COLUMN keeps outputs (filters) [r*K/T, (r+1)*K/T) of the whole
     * layer's K and sums its input's gradient over the ranks; SH_TP_ROW keeps the same share
     * of its inputs (channels) and sums its output (before bias and activation) over the
     * ranks. SH_TP_GATHER (hybrid
     * parallelism) keeps outputs [r*K/T, (r+1)*K/T) (floor; T need not divide K) but its
     * output buffer stays whole: the other ranks' columns arrive through the sum (they are
     * zero here), and its input's gradient is summed as a column share's. */
    int tp_role, tp_rank, tp_ranks;
    size_t tp_whole;                /* K (column, gather) or I (row) of the whole layer */

    /* slices of the three blocks, in floats from each block's start */
    size_t param_off, param_count;  /* everything this layer owns */
    size_t w_off, w_count;          /* weights (decay) */
    size_t b_off, b_count;          /* biases / BN shift (no decay) */
    size_t s_off, s_count;          /* BN scales (no decay), right after the biases */
    size_t reduce_off, reduce_count; /* gradients computed per thread and summed */
    size_t stat_off, stat_count;    /* BN rolling mean then rolling variance */
    size_t ws_count;                /* scratch floats per thread */
    size_t keep_count;              /* floats per image kept from forward to backward */
    size_t keep_fixed;              /* floats kept per layer (per channel stats, ...) */
    size_t cache_count;             /* floats of a per-layer cache (conv columns), batch-sized */
    size_t state_off, state_count;  /* recurrent state carried from batch to batch (floats) */
    double flops;                   /* multiply-adds per image, forward */

    /* buffers (set by net.c) */
    float *out;      /* (N, out) */
    float *delta;    /* (N, out): dL/d(out) */
    const float *in[SH_LAYER_MAX_SRC];       /* src outputs */
    float *in_delta[SH_LAYER_MAX_SRC];       /* src deltas, NULL: not needed */
    int accum[SH_LAYER_MAX_SRC];             /* 1: add into in_delta, 0: overwrite */
    float *keep;     /* (N, keep_count) then keep_fixed */
    float *cache;    /* cache_count floats */
    float *state;    /* state_count floats in the net's state block (recurrent layers) */
    /* [connected] with packed weights (sh_net_keep_packed): W^T for forward, W for the
     * input's gradient, in gemm_packed.c's panels; NULL: OpenBLAS products */
    const float *packed_fwd, *packed_bwd;
    double fwd_ms, bwd_ms;
};

/* Everything a forward or backward pass needs besides the layer. */
struct sh_exec {
    int nimg;            /* images in this pass, <= batch */
    int batch;           /* images the buffers hold */
    int training;
    int nthreads;
    sh_pool *pool;
    float *params, *stats;
    float **grad;        /* [nslots]: grad[0] is the net's block, others partials */
    int nslots;          /* partial-gradient slots: 1, or 2 per thread */
    int slot_images;     /* images per slot in the current sh_exec_partials */
    int nslots_used;     /* slots the current backward filled (net.c sums them) */
    float **work;        /* [nthreads]: ws floats each */
    sh_rng *rng;         /* dropout */
    int next_chunk;      /* sh_exec_chunks' shared counter (atomic access) */
    int used_partials;   /* set by sh_exec_partials: net.c sums the partial blocks */
    /* Tensor parallelism: buf[0..count) = its sum over the ranks (sh_net_set_sum); a failure
     * is kept in sum_rc and returned by the pass. */
    shoal_result (*sum)(void *ctx, float *buf, size_t count);
    void *sum_ctx;
    shoal_result sum_rc;
    /* Random draws (dropout): this pass's images are rows of a larger batch of rows_total
     * rows (0: they are the whole batch), in groups of rows_group consecutive rows, group g
     * starting at row g * rows_stride + rows_offset. A layer drawing per row draws as if the
     * whole batch ran, keeping its rows' draws (sh_net_set_rows). */
    int rows_total, rows_group, rows_stride, rows_offset;
    int defer_weights;   /* 1: layers that can leave their weight gradients to ops->weights */
    int unpacked;        /* SH_PACK_* bits: products that ignore the packed weights now */
    int weights_add;     /* 1: ops->weights adds into the gradients instead of overwriting */
    /* Early readiness (sh_net_set_grad_rows): a layer whose weight gradient goes by rows of
     * outputs may compute it in blocks of grad_rows rows (0: whole) and offer each finished
     * block at once with sh_exec_offer, before the rest of its backward; net.c offers what
     * is left of the layer's slice after it (ready_count: floats offered, a prefix). */
    int grad_rows;
    void (*ready)(void *ctx, int layer, size_t offset, size_t count);
    void *ready_ctx;
    int ready_layer;
    size_t ready_count;
    int grad_row0;       /* the block's first row, for the layer's split over the block */
    /* Hybrid parallelism (sh_net_set_update): a layer whose gradients are final as it
     * computes them (SH_LAYER_FUSES_UPDATE) steps parameters [offset, offset + count) of the
     * net's block with g, a block of rows at a time, instead of writing its gradients whole;
     * NULL: gradients are written. */
    void (*update)(void *ctx, size_t offset, const float *g, size_t count);
    void *update_ctx;
};

/* Offer the next count floats of layer l's gradient slice (from its start, in order) as final. */
static inline void sh_exec_offer(sh_exec *x, const sh_layer *l, size_t count)
{
    if (x->ready) x->ready(x->ready_ctx, x->ready_layer, l->param_off + x->ready_count, count);
    x->ready_count += count;
}

/* 1 when layer l has every capability in caps (SH_LAYER_* bits). */
static inline int sh_layer_can(const sh_layer *l, unsigned caps) { return (l->caps & caps) == caps; }

/* A layer whose weight gradients may be deferred (x->defer_weights): it has the weights hook
 * and no batch norm or tensor-parallel share (their gradients need more than dY and X). */
static inline int sh_layer_defers_weights(const sh_layer *l)
{
    return l->ops->weights && !l->batch_normalize && l->tp_role == SH_TP_NONE;
}


typedef void (*sh_image_fn)(sh_layer *l, sh_exec *x, int tid, int n0, int n1);
/* Run fn(l, x, tid, n0, n1) over the images [0, x->nimg) in chunks of `chunk` images with
 * fixed boundaries (0, chunk, 2*chunk, ...), each handed to whichever thread is free: a
 * busy core does not hold the others back. fn's results must depend only on [n0, n1)
 * (tid selects scratch space only), so they are the same whichever thread runs a chunk. */
void sh_exec_chunks(sh_layer *l, sh_exec *x, int chunk, sh_image_fn fn);
/* sh_exec_chunks with a chunk chosen from the thread count (one chunk when single-threaded),
 * for layers whose per-image results do not depend on the chunking at all. */
void sh_exec_images(sh_layer *l, sh_exec *x, sh_image_fn fn);
/* For gradients summed over images: the images are cut into x->nslots fixed chunks (slots),
 * handed out like sh_exec_chunks; fn writes its chunk's gradients into
 * sh_exec_grad(x, l, sh_exec_slot(x, n0), offset) (overwriting), and net.c sums the slots in
 * slot order after the layer's backward, over [reduce_off, reduce_off + reduce_count). Deterministic for a
 * thread count whichever thread runs which chunk. */
void sh_exec_partials(sh_layer *l, sh_exec *x, sh_image_fn fn);
static inline int sh_exec_slot(const sh_exec *x, int n0) { return n0 / x->slot_images; }
/* Where a slot's sums for the net's block offset off (within the layer's reduce range) go:
 * slot 0 is the net's gradient block, the others hold the layer's range from their start. */
static inline float *sh_exec_grad(const sh_exec *x, const sh_layer *l, int slot, size_t off)
{
    return slot == 0 ? x->grad[0] + off : x->grad[slot] + (off - l->reduce_off);
}
/* Run fn(l, x, tid, c0, c1) on every thread over its share of count items (channels). */
void sh_exec_split(sh_layer *l, sh_exec *x, int count, sh_image_fn fn);

/* The table and lookup. */
const sh_layer_ops *sh_layer_find(const char *cfg_name);
/* 1 for a section name Darknet knows and shoal's table lacks ([local], [upsample], ...). */
int sh_layer_is_darknet_only(const char *cfg_name);
/* "[convolutional], [connected], ...": every section the table has. */
void sh_layer_list(char *out, size_t out_nbytes);
/* The closest name in the table, for "did you mean". */
const char *sh_layer_closest(const char *cfg_name);

/* Resolve a Darknet layer reference (negative: relative to index) to an absolute index
 * before index, or fail naming the key. */
shoal_result sh_layer_ref(const sh_cfg_section *s, const char *key, int ref, int index,
                          int *out);

/* Internal views for tests and tools. */
sh_layer *sh_net_layer(sh_net *n, int i);

/* The layer table rows, one per file. */
extern const sh_layer_ops sh_conv_ops, sh_dense_ops, sh_maxpool_ops, sh_avgpool_ops,
    sh_dropout_ops, sh_softmax_ops, sh_cost_ops, sh_shortcut_ops, sh_route_ops, sh_reorg_ops,
    sh_crop_ops, sh_rnn_ops, sh_gru_ops, sh_lstm_ops, sh_crnn_ops;
/* Darknet's autoencoder layers, and the restricted Boltzmann machine (layer_rbm.c). */
extern const sh_layer_ops sh_deconv_ops, sh_upsample_ops, sh_local_ops, sh_rbm_ops;
extern const sh_layer_ops sh_lrn_ops; /* [normalization] (layer_lrn.c) */
/* Not in the table: [gru] with form=darknet (layer_gru.c's parse hands the layer over). */
extern const sh_layer_ops sh_gru_darknet_ops;

/* Shared helpers of the conv layer (im2col.c). col is (C*S*S, OH*OW) with rows ld_col
 * floats apart (ld_col >= OH*OW lets several images sit side by side). */
void sh_im2col(const float *im, int c, int h, int w, int size, int stride, int pad, int oh,
               int ow, float *col, size_t ld_col);
/* Only output rows [oy_lo, oy_hi): col column (oy - oy_lo)*OW + ox. */
void sh_im2col_rows(const float *im, int c, int h, int w, int size, int stride, int pad,
                    int oy_lo, int oy_hi, int ow, float *col, size_t ld_col);
void sh_col2im_rows(const float *col, size_t ld_col, int c, int h, int w, int size, int stride,
                    int pad, int oy_lo, int oy_hi, int ow, float *im);
/* im += col2im(col) (adds: overlapping windows sum). */
void sh_col2im(const float *col, size_t ld_col, int c, int h, int w, int size, int stride,
               int pad, int oh, int ow, float *im);

/* Thread count from which small conv layers cache their columns (layer_conv.c); tests lower
 * it to 2 to exercise that path. */
extern int sh_conv_cache_min_threads;
/* [connected]'s knobs and rules (dense_rules.c). Rows from which a layer packs its own
 * weights for the packed kernels (64 by default; tests set it past a batch to take
 * OpenBLAS's path). */
extern int sh_dense_self_pack_min_rows;
/* 1 when a whole [connected] layer of this many weights packs them itself for a pass of rows
 * run in products of product_rows: from sh_dense_self_pack_min_rows rows, up to 1M weights;
 * under the newer rules (L2 of 2 MiB a core or more, AMD's AVX-512 CPUs), above L2 / 8 bytes
 * of weights only for products of at most 32 rows. */
int sh_dense_self_packs(size_t weights, int rows, int product_rows);
/* Rows per product [lo, hi] from which a whole [connected] layer of 64 outputs or more runs
 * forward and dX on gemm_small.c's turned-around products (tests move them before building
 * a net: its scratch is sized for hi rows). {-1, -1}: by the machine (the older rules forward
 * 4-96 and dX 12-48; the newer forward 4-128 while rows x inputs floats fit in L2, dX at
 * 16-128 on AMD's AVX-512 CPUs, none on the others). */
extern int sh_dense_small_fwd_rows[2], sh_dense_small_dx_rows[2];
/* 1 (default): 3x3 stride-1 pad-1 convolutions run forward and the input gradient through
 * Winograd F(2x2, 3x3) (conv_winograd.c); 0: through im2col + sgemm (tests compare both). */
extern int sh_conv_winograd;

/* Batch norm over (N, C, HW) used by conv and connected (layer_batchnorm.c). */
void sh_bn_forward(sh_layer *l, sh_exec *x, float *raw /* (N, C, HW) in: pre-BN */);
void sh_bn_backward(sh_layer *l, sh_exec *x);
/* Its parse's last step for a layer with batch_normalize=1 (its output shape, activation and
 * scratch set): x_hat kept per image (keep_count), or recovered from the output in backward
 * (linear, leaky) in one channel of scratch. */
void sh_bn_size(sh_layer *l);
/* 1 (default): recover x_hat where the activation inverts; 0: keep it (tests compare). */
extern int sh_bn_recover;

#endif
