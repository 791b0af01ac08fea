/* net.h — a network built from a .cfg: layers in order, three contiguous blocks
 * (parameters, gradients, layer statistics), forward, loss, backward layer by layer.
 * Not here: the optimizer (optim.h), data (src/data), communication (src/comm): backward
 * only tells a callback when each layer's gradients are final.
 * Proved by tests/nn/test_net.c and tests/nn/test_layer_*.c. */

/* Three groups, in this order; src/train uses the first and the last, the middle one serves
 * model parallelism (src/train/mp):
 *   Building a net:    the [net] section, create, load, destroy, the cfg a net came from.
 *   Parts and shares:  a net's layers [lo, hi), layers split across ranks, links across a
 *                      cut, deferred weight gradients, packed weights.
 *   The net:           its blocks, threads and state, a step (forward, loss, backward, the
 *                      strategy's hooks), its layers' figures. */
#ifndef SH_NET_H
#define SH_NET_H

#include <stddef.h>
#include <stdint.h>
#include "nn/cfg.h"
#include "nn/optim.h"
#include "shoal/result.h"

/* How pictures (image folders, list files, synthetic data) become inputs: Darknet's [net]
 * keys min_crop, max_crop, aspect, angle, flip, hue, saturation, exposure, and shoal's
 * test_resize, mean, std; unset keys resolved to their defaults (net_config.c). */
typedef struct {
    int min_crop, max_crop;     /* training: shorter side drawn in [min, max] (default: the
                                   larger of width and height; max_crop: min_crop) */
    int test_resize;            /* testing: shorter side before the centre crop (the same) */
    int flip;                   /* training: mirrored half the time (default 1, Darknet's) */
    float aspect, angle;        /* training: stretch in [1/aspect, aspect]; +-angle degrees */
    float hue, saturation, exposure; /* training: colour jitter (default 0, 1, 1: none) */
    float mean[3], std[3];      /* per channel on [0, 1]: (v - mean) / std (default 0, 1) */
} sh_net_pictures;

/* ==== Building a net ==== */

/* What the [net] section says (parsed by net_config.c). */
typedef struct {
    int batch;          /* images per optimizer step (Darknet: batch/subdivisions per pass) */
    int subdivisions;
    int width, height, channels;
    int time_steps;     /* recurrent nets: a batch is time_steps x batch rows (Darknet) */
    int max_batches;
    sh_lr_policy lr;
    sh_optim_config optim;
    sh_net_pictures pictures;
} sh_net_config;

/* Parse the [net] (or [network]) section; unknown keys are errors (sh_cfg_check_unused). */
shoal_result sh_net_config_parse(sh_cfg_section *s, sh_net_config *out);
/* The [net] section's batch of the cfg at cfg_path, without building the net (a job sizes its
 * ranks' batches with it). Errors as sh_cfg_load's and sh_net_config_parse's. */
shoal_result sh_net_cfg_batch(const char *cfg_path, int *batch);

typedef struct sh_net sh_net;

/* Build a network from a parsed cfg: [net] first, then one layer per section. batch > 0
 * overrides the cfg's batch. Every buffer a step needs is allocated here; the parameters
 * are initialised from seed. Errors name path:line (unknown section, key, bad shape). */
shoal_result sh_net_create(sh_cfg *cfg, int batch, uint64_t seed, sh_net **out);
/* sh_net_create with time_steps > 0 overriding the cfg's [net] time_steps (0: the cfg's);
 * `shoal generate` builds its net with one step of one stream. */
shoal_result sh_net_create_steps(sh_cfg *cfg, int batch, int time_steps, uint64_t seed,
                                 sh_net **out);
/* sh_net_create, and the net owns cfg from then on (on error cfg is destroyed): a caller
 * that read the [net] section first (the batch, say) builds the net without parsing again. */
shoal_result sh_net_create_owning(sh_cfg *cfg, int batch, uint64_t seed, sh_net **out);
/* sh_cfg_load + sh_net_create_owning. */
shoal_result sh_net_load(const char *cfg_path, int batch, uint64_t seed, sh_net **out);
void sh_net_destroy(sh_net *n);
/* The cfg line of layer i's section, for messages. */
int sh_net_layer_line(const sh_net *n, int i);
/* The .cfg the net was built from. */
const char *sh_net_cfg_path(const sh_net *n);

/* ==== Parts and shares: what model parallelism builds on (src/train/mp) ==== */

/* sh_net_create for a part of the net, layers [lo, hi) (hi < 0: to the end): a pipeline
 * stage. Every layer is parsed (shapes, costs and stage= keys of all of them are
 * queryable), but only the part's layers get parameters, gradients, statistics and
 * buffers, and those parameters equal the whole net's from the same seed. The part takes
 * as input the output of layer lo-1 (sh_net_part_input_count values per image); when it
 * is not the last part, backward starts from sh_net_part_output_delta, filled by the
 * caller, instead of a loss. lo must pass sh_net_can_cut (else SHOAL_ERR_INVALID naming
 * the layer); the outputs of earlier layers it reads come as links (sh_net_part_holds).
 * The cfg stays the caller's. */
shoal_result sh_net_create_part(sh_cfg *cfg, int batch, uint64_t seed, int lo, int hi, sh_net **out);
/* Tensor parallelism over `ranks` ranks, this one `rank`: roles[i] (SH_TP_COLUMN = 1,
 * SH_TP_ROW = 2, 0 none; one per layer) split layer pairs as Megatron-LM: a column layer
 * keeps 1/ranks of its outputs (a convolutional one: of its filters), the row layer after it
 * (or after pooling between) the same share of its inputs (channels); its
 * output is summed over the ranks through the sum hook (sh_net_set_sum) before bias and
 * activation, and the column layer's input gradient after backward. Only pairs that
 * sh_net_tp_pair_end accepts; the shares hold what the whole net draws from the seed. */
enum { SH_TP_NONE = 0, SH_TP_COLUMN, SH_TP_ROW, SH_TP_GATHER };
shoal_result sh_net_create_tensor(sh_cfg *cfg, int batch, uint64_t seed, int rank, int ranks,
                                  const unsigned char *roles, sh_net **out);
/* Both: layers [lo, hi) (hi < 0: to the end) with the shares roles[] gives (one per layer of
 * the whole net). Hybrid parallelism's connected part: every [connected] SH_TP_GATHER, which
 * keeps outputs [rank K/ranks, (rank+1) K/ranks) and sums its whole (N, K) output over the
 * ranks (the others' columns are zero here) and its input's gradient. */
shoal_result sh_net_create_part_tensor(sh_cfg *cfg, int batch, uint64_t seed, int lo, int hi, int rank, int ranks,
                                       const unsigned char *roles, sh_net **out);
/* Hybrid parallelism over `ranks` ranks (net_tensor.c): *cut = the first [connected] layer;
 * layers before it run data-parallel, the rest (a chain: each reads the layer before it)
 * model-parallel with every [connected] split by outputs (roles[i] = SH_TP_GATHER, else 0;
 * roles has nlayers entries). SHOAL_ERR_INVALID with one line naming the layer and what to do
 * when no [connected] layer exists, none precedes it, one has fewer outputs than ranks or
 * batch_normalize, the net cannot be cut there or a later layer reads across the cut. */
shoal_result sh_net_hybrid_plan(const sh_net *n, int ranks, int *cut, unsigned char *roles);
/* The next passes' images are rows of a larger batch of `total` rows: groups of `group`
 * consecutive rows, group g from row g * stride + offset. Layers drawing random numbers per
 * row (dropout) draw for all `total` rows in order and keep their own rows' draws, so a share
 * of a batch drops what one process running the whole batch drops. total 0: the whole batch. */
void sh_net_set_rows(sh_net *n, int total, int group, int stride, int offset);
/* The row layer j of a column/row pair starting at layer i over `ranks`, or -1: layer i is
 * [connected] or [convolutional] (groups=1) without batch norm whose outputs (filters) ranks
 * divides; j = i + 1, or after [maxpool] / [avgpool] layers when i is convolutional (they
 * pool each channel: they run on its share); j is [connected], or [convolutional] (groups=1)
 * after a convolutional i, without batch norm; each of i+1..j reads only the layer before
 * it, and nothing after reads i's input or the layers before j. */
int sh_net_tp_pair_end(const sh_net *n, int i, int ranks);
/* 1 when layer i's tensor shares go by channels (whole filters: [convolutional]), 0 when by
 * output columns and input rows ([connected]). */
int sh_net_tp_by_channels(const sh_net *n, int i);
/* The tensor-parallel sum: buf[0..count) = its sum over the ranks; forward and backward
 * return its error. Borrowed ctx. */
void sh_net_set_sum(sh_net *n, shoal_result (*sum)(void *ctx, float *buf, size_t count), void *ctx);
/* Hybrid parallelism and tensor parallelism with one replica: the shares' gradients
 * ([connected] gather, column and row shares) are final as backward makes them, so
 * each steps its parameters through update(ctx, offset, g, count) (offsets in the net's
 * block; threads call it at once on disjoint ranges) a block of rows at a time, its dW never
 * written whole: the layers for which sh_net_layer_fuses_update says 1 leave their part of
 * the gradient block unwritten, and the caller steps the others. NULL: off. Borrowed ctx. */
void sh_net_set_update(sh_net *n, void (*update)(void *ctx, size_t offset, const float *g, size_t count), void *ctx);
int sh_net_layer_fuses_update(const sh_net *n, int i);
/* The caller's step of the others (sh_optim_begin already called): every layer with
 * parameters that sh_net_layer_fuses_update does not name, params and grads being the
 * optimizer's blocks, this net's part's at base in them. */
void sh_net_step_unfused(const sh_net *n, sh_optim *o, float *params, const float *grads, size_t base);
/* 1 when the net may be cut before layer c (0 < c < nlayers): no layer from c on reads a
 * layer before c-1 ([route] and [shortcut] across the cut), and layer c is not [cost]. */
int sh_net_cut_ok(const sh_net *n, int c);
/* 1 when a pipeline may cut the net before layer c (0 < c < nlayers): layer c is not [cost]
 * (which works in place on its source). Routes and shortcuts may cross it: their sources
 * travel as links (sh_net_cut_links). */
int sh_net_can_cut(const sh_net *n, int c);
/* 1 when layer s (0 <= s < c) is read by a layer at or after c ([route], [shortcut], or the
 * layer after it): its output must cross a cut before c. */
int sh_net_crosses(const sh_net *n, int s, int c);
/* The links of a cut before c: the layers s < c-1 whose output crosses it (besides layer c-1's,
 * the part's input), ascending, into layers (nlayers entries; NULL: count only); returns how
 * many. A stage receives its start's links with its input and sends its end's with its output,
 * in this order, and their gradients back the same way. */
int sh_net_cut_links(const sh_net *n, int c, int *layers);
/* For a part [lo, hi): 1 when it holds layer s < lo-1's output and its gradient (a link of its
 * start: read by its layers or passed on), and 1 when layer s's output (and so its gradient)
 * crosses its end. A sent layer's gradient is filled by the caller before backward, and the
 * part's layers add theirs to it (the part's input's too, in sh_net_input_delta). */
int sh_net_part_holds(const sh_net *n, int s);
int sh_net_part_sends(const sh_net *n, int s);
/* Layer s's output (nimg, outputs) and gradient as this part holds them: a held link's or its
 * own layer's; the gradient of layer lo-1 is the input's (sh_net_input_delta). */
float *sh_net_link_output(sh_net *n, int s);
size_t sh_net_layer_outputs(const sh_net *n, int s); /* values per image of layer s's output */
float *sh_net_link_delta(sh_net *n, int s);
/* The part this net runs: layers [lo, hi) ([0, nlayers) for the whole net). */
void sh_net_part(const sh_net *n, int *lo, int *hi);
/* stage=K of layer i in the cfg; -1 when not given. */
int sh_net_layer_stage(const sh_net *n, int i);
/* C*H*W the part takes per image and gives per image (its last layer's output). */
size_t sh_net_part_input_count(const sh_net *n);
size_t sh_net_part_output_count(const sh_net *n);
/* The part's last layer's output (nimg, out) after forward, and its delta (nimg, out), which
 * a part that is not the last fills before backward. */
const float *sh_net_part_output(const sh_net *n);
float *sh_net_part_output_delta(sh_net *n);
/* Also compute dL/d(input) on backward: gradient checks of the first layer, and a pipeline
 * stage sending its input's gradient to the stage before. (nimg, part input count). */
void sh_net_want_input_delta(sh_net *n, int on);
const float *sh_net_input_delta(const sh_net *n);
/* Deferred weight gradients (zero-bubble pipelines' split of backward into B and W): with
 * on = 1, backward leaves the weight and bias gradients of the layers sh_net_layer_defers
 * names unwritten, computing only what flows to earlier layers. Their factors after backward
 * are sh_net_layer_factors'; the caller keeps them for several micro-batches, one after the
 * other, and computes the gradients with sh_net_layer_weight_grads. */
void sh_net_defer_weights(sh_net *n, int on);
/* 1 when layer i of the part can defer its weight gradients ([connected] without batch norm
 * or tensor-parallel share): its only gradients are dW = dY^T X and db = sum of dY's rows. */
int sh_net_layer_defers(const sh_net *n, int i);
/* Layer i's (sh_net_layer_defers) weight and bias gradients from rows rows of its input x
 * (rows, inputs) and output gradient dy (rows, outputs), overwriting its slice of the gradient
 * block (add = 1: adding to it), over the net's threads. Both are read only; allocates
 * nothing. */
void sh_net_layer_weight_grads(sh_net *n, int i, const float *x, const float *dy, int rows, int add);
/* Packed weights for products over few rows (a pipeline's micro-batches), where OpenBLAS
 * re-packs a weight matrix at every call: each whole [connected] layer of the part, while the
 * copies fit in max_bytes, keeps W^T (forward) and W (its input's gradient) packed in
 * gemm_packed.c's panels, and its products use them. sh_net_pack_weights refreshes the copies
 * from the parameters (which: SH_PACK_FORWARD, SH_PACK_BACKWARD or both): the caller's duty
 * after every update, the forward ones before the next pass, the others before its first
 * backward (a pipeline stage packs them while it waits for the gradient). A net
 * sharing another's blocks (sh_net_use_blocks) borrows its copies with sh_net_share_packed
 * (src must outlive dst). Results differ from OpenBLAS's by rounding only. */
shoal_result sh_net_keep_packed(sh_net *n, size_t max_bytes);
/* Which packed copies (SH_PACK_* bits) pay for a pipeline stage's micro-batches of this many
 * rows, kept by each update: under the older rules (Intel under 2 MiB of L2 a core, or unknown)
 * none at 24-48 rows (the few-row products as fast), both otherwise; under the newer (from 2
 * MiB, AMD's AVX-512 CPUs) W alone (dX) from 16 rows, both below (dense_rules.c). */
int sh_dense_stage_packs(int rows);
void sh_net_share_packed(sh_net *dst, const sh_net *src);
enum { SH_PACK_FORWARD = 1, SH_PACK_BACKWARD = 2 };
void sh_net_pack_weights(sh_net *n, int which);
/* Which products use the packed copies from now on (SH_PACK_* bits; all by default): a pass
 * may run before its copies are refreshed with the others off. */
void sh_net_use_packed(sh_net *n, int which);
/* One optimizer step (sh_optim_begin already called) over all the net's parameters, as
 * sh_optim_apply over the whole block does it, with the packed copies named in which
 * (SH_PACK_* bits) of each packed layer refreshed 16 rows of W at a time as they are updated,
 * while those rows are in cache (the pack alone reads the weights again from memory); the
 * others are left stale, for the caller to pack (sh_net_pack_weights) before they are used. */
void sh_net_update_packed(sh_net *n, sh_optim *o, const float *grads, int which);
/* dst computes on src's blocks (src outlives dst): its parameters and gradients at
 * [param_off, + its count) of src's, its statistics at stats_off of src's, with src's kernel
 * threads. For copies of one part that take turns (a pipeline stage's micro-batches in
 * flight) and for the parts of a whole net (hybrid's two halves). */
void sh_net_share_blocks(sh_net *dst, sh_net *src, size_t param_off, size_t stats_off);

/* ==== The net: its blocks, a step, its layers' figures ==== */

const sh_net_config *sh_net_get_config(const sh_net *n);
int sh_net_batch(const sh_net *n);        /* N of every buffer: time_steps x streams rows */
int sh_net_time_steps(const sh_net *n);   /* [net] time_steps (1 for feed-forward nets) */
int sh_net_input_count(const sh_net *n);  /* C*H*W of one input */
int sh_net_nclasses(const sh_net *n);     /* K of the output (the last layer's outputs) */
/* 1 when the net ends with [softmax] (then optionally [cost]): only then does sh_net_loss
 * apply. Nets without one (feature extractors) run forward and sh_net_loss_sum. */
int sh_net_has_softmax(const sh_net *n);
/* SHOAL_OK, or SHOAL_ERR_FORMAT naming path:line of the last layer when the net cannot be
 * trained or tested: no final softmax, nor a regression's [cost], nor an [rbm] pretraining. */
shoal_result sh_net_check_trainable(const sh_net *n);

/* Nets that learn without labels (net_unlabelled.c). 1 when sh_net_loss reads labels (the net
 * ends with [softmax]); 0 for a regression and a pretraining net, whose sh_net_correct is 0. */
int sh_net_has_labels(const sh_net *n);
/* 1 when the net ends in [cost] type=sse, L1 or smooth after a layer other than [softmax]: its
 * loss compares the output (nimg, K) with targets. */
int sh_net_is_regression(const sh_net *n);
/* A regression's targets: target (nimg, K), borrowed and kept filled by the caller for every
 * pass, or NULL for the input itself (an autoencoder; SHOAL_ERR_INVALID naming the layer when
 * the output's count differs from the input's). sh_net_loss then ignores its labels. */
shoal_result sh_net_set_target(sh_net *n, const float *target);
/* The [rbm] layers in order into layers (nlayers entries; NULL: count only); how many. */
int sh_net_rbm_layers(const sh_net *n, int *layers);
/* The net that pretrains [rbm] layer `layer` (greedy, layer-wise: src/train/pretrain.c): the
 * part [0, layer] of the cfg's net (parameters of the whole net's from the seed), whose
 * layers below run forward in inference whatever the pass, whose loss is the [rbm]'s
 * (sh_rbm_loss: minus the pseudo-likelihood, or the reconstruction error) and whose backward
 * is CD-k on the [rbm] alone (zero gradients below); its [net] rate, momentum and decay are
 * the [rbm]'s, at a constant rate, and only the [rbm]'s weights decay. Its cfg hash is the
 * cfg's mixed with the layer, so a checkpoint of one pretraining stage resumes only that one.
 * SHOAL_ERR_INVALID when layer is not an [rbm]. The cfg stays the caller's. */
shoal_result sh_net_create_pretrain(sh_cfg *cfg, int batch, uint64_t seed, int layer, sh_net **out);
/* The [rbm] a pretraining net trains; -1 for any other net. */
int sh_net_pretraining(const sh_net *n);
uint64_t sh_net_cfg_hash(const sh_net *n);

/* Kernel threads for this network's layers (1 = single-threaded, deterministic per count).
 * A new net has 1; how many a rank should use is sh_cpus_threads_per_rank (base/cpus.h). */
void sh_net_set_threads(sh_net *n, int nthreads);
/* Kernel threads the net uses (sh_net_set_threads). */
int sh_net_threads(const sh_net *n);

/* The three blocks. Parameters and gradients have the same layout; a layer's slice is
 * [offset, offset + count). Statistics (batch-norm running mean/variance) are state that
 * is saved and loaded but not trained. */
size_t sh_net_nparams(const sh_net *n);
float *sh_net_params(sh_net *n);
float *sh_net_grads(sh_net *n);
float *sh_net_stats(sh_net *n, size_t *count);
/* Move the parameter and gradient blocks into memory the caller provides and keeps
 * (sh_net_nparams floats each, 64-byte aligned, alive as long as the net): a window shared
 * with other ranks, say. copy_params: copy the parameters there (else what is there stays,
 * e.g. another rank's copy). The caller frees both blocks, after sh_net_destroy; the net
 * frees neither. */
void sh_net_use_blocks(sh_net *n, float *params, float *grads, int copy_params);
/* Keep the statistics in the caller's block (sh_net_stats' count floats, alive as long as
 * the net; the net does not free it): copies of one part that take turns share them. */
void sh_net_use_stats(sh_net *n, float *stats);
/* Decay ranges for the optimizer: weights decay, biases and batch-norm parameters don't. */
const sh_param_range *sh_net_param_ranges(const sh_net *n, int *nranges);

/* The recurrent layers' state (hidden and cell values of every stream) carried from one
 * forward to the next, as Darknet carries it from batch to batch: each forward starts from
 * it and leaves the last time step's values in it. Zero after create; saved in training
 * checkpoints. count may be NULL; 0 floats for feed-forward nets. */
float *sh_net_state(sh_net *n, size_t *count);
void sh_net_reset_state(sh_net *n);

int sh_net_nlayers(const sh_net *n);
/* "conv 0", "maxpool 1": type and index, for logs and `shoal time --per-layer`. */
const char *sh_net_layer_name(const sh_net *n, int i);
void sh_net_layer_params(const sh_net *n, int i, size_t *offset, size_t *count);
/* Layer i's weights as a matrix of rows (outputs: filters or connected outputs) x cols
 * at w_off of the parameter block (the biases and scales follow them up to the end of the
 * layer's slice); rows = 0 when it has no weights. */
void sh_net_layer_weights(const sh_net *n, int i, size_t *w_off, size_t *rows, size_t *cols);
/* A connected layer's sufficient factors: its weight gradient is dY^T X, dW (K, I) from
 * dY (N, K) and X (N, I) over the batch; both hold this step's values when backward calls
 * grad_ready for the layer (copy them then). 0 (and nothing set) for other layers. */
int sh_net_layer_factors(const sh_net *n, int i, const float **x, const float **dy, int *inputs, int *outputs);
/* Output shape (C, H, W) and multiply-adds per image of layer i's forward pass. */
void sh_net_layer_shape(const sh_net *n, int i, int *c, int *h, int *w);
double sh_net_layer_flops(const sh_net *n, int i);

/* Forward the first nimg (<= batch) images of x (nimg, C, H, W). training = 1 uses batch
 * statistics in batch norm and drops out; 0 is inference. Allocates nothing. */
shoal_result sh_net_forward(sh_net *n, const float *x, int nimg, int training);
/* Output of the last forward (the softmax's when there is one), (nimg, K). */
const float *sh_net_output(const sh_net *n);
/* Mean cross-entropy of the last forward against labels (nimg), and prepare backward. */
float sh_net_loss(sh_net *n, const int32_t *labels);
/* The loss sum(outputs) / nimg of the last forward, for timing backward through a net
 * without softmax (`shoal time`): every output's delta is 1/nimg. */
void sh_net_loss_sum(sh_net *n);
/* How many of the last forward's argmax predictions equal labels. */
int sh_net_correct(const sh_net *n, const int32_t *labels);
/* The same for rows [lo, hi) of the last forward's output, labels indexed by row. */
int sh_net_correct_rows(const sh_net *n, const int32_t *labels, int lo, int hi);

/* Called by backward when layer i's gradients (slice offset, count of the gradient block)
 * are final; layers are visited last to first. */
typedef void (*sh_grad_ready_fn)(void *ctx, int layer, size_t offset, size_t count);
/* Backward from the last sh_net_loss: writes d(mean loss)/d(params) into the gradient
 * block (overwrites, no need to zero first). ready may be NULL. Allocates nothing. */
shoal_result sh_net_backward(sh_net *n, sh_grad_ready_fn ready, void *ctx);
/* rows > 0: backward offers a [connected] layer's weight gradient to ready in blocks of
 * that many output rows, each as soon as it is computed (before the layer's input
 * gradient), then the rest of the layer's slice; the slices come in order and cover it.
 * Every gradient keeps its bits (each row's sum runs as in the whole product). 0: one
 * call per layer (the default). A data-parallel strategy asks for it to start sending
 * sooner. */
void sh_net_set_grad_rows(sh_net *n, int rows);

/* Called by forward before layer i (one with parameters) runs: a data-parallel strategy
 * whose last step's exchanges may still be in flight waits there for the ones holding layer
 * i's parameters. An error stops the forward and is its result. NULL fn: none. */
typedef shoal_result (*sh_before_forward_fn)(void *ctx, int layer);
void sh_net_set_before_forward(sh_net *n, sh_before_forward_fn fn, void *ctx);

/* Milliseconds the last forward and backward spent in layer i. */
void sh_net_layer_times(const sh_net *n, int i, double *forward_ms, double *backward_ms);
/* Dropout's random state, so that resume and ranks are exact. */
struct sh_rng_state { uint64_t s[4]; };
void sh_net_rng_get(const sh_net *n, uint64_t state[4]);
void sh_net_rng_set(sh_net *n, const uint64_t state[4]);

#endif
