/* net.h — shoal's neural-network engine on its own: build a network from a Darknet-style
 * .cfg, run forward and backward, read and write its parameters and gradients.
 * Not here: training loops, datasets and distribution (train.h), communication (comm.h).
 * Proved by tests/train/test_api.c. Usable on its own: link libshoal, include this header.
 *
 * Threading: a shoal_net is used by one thread at a time; each net has its own pool of
 * kernel threads. Results for a given thread count are bitwise repeatable. */
#ifndef SHOAL_NET_H
#define SHOAL_NET_H

#include <stddef.h>
#include <stdint.h>
#include "shoal/result.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct shoal_net shoal_net; /* opaque */

typedef struct {
    int batch;       /* N: images per forward (the buffers' size); 0: the cfg's batch */
    uint64_t seed;   /* initial weights and dropout's generator */
    int threads;     /* kernel threads; 0: SHOAL_THREADS, else the CPUs this process may run
                        on (a process that shares its CPUs with other ranks passes its share) */
    int time_steps;  /* recurrent nets: steps per forward, each of batch rows (N = batch x
                        time_steps); 0: the cfg's [net] time_steps */
} shoal_net_opts;

/* batch 0 (the cfg's), seed 1, threads 0, time_steps 0. */
void shoal_net_opts_default(shoal_net_opts *o);

/* Parse cfg_path and build the network: every buffer a step needs is allocated here, the
 * weights drawn from o->seed. o may be NULL (the defaults). Blocks on file I/O.
 * Errors: SHOAL_ERR_INVALID (NULL cfg_path or out, bad options), SHOAL_ERR_IO (the file
 * cannot be read), SHOAL_ERR_FORMAT (the cfg is wrong: the message names file:line),
 * SHOAL_ERR_NOMEM. On success the caller owns *out (shoal_net_destroy); on error *out is
 * NULL and shoal_last_error_message() says why. */
shoal_result shoal_net_load(const char *cfg_path, const shoal_net_opts *o, shoal_net **out);
/* Free the network and its threads. NULL does nothing. */
void shoal_net_destroy(shoal_net *n);

/* Input shape: N (the batch), C, H, W; an image is C*H*W floats, channels first. Any out
 * pointer may be NULL. SHOAL_ERR_INVALID for a NULL or destroyed net. */
shoal_result shoal_net_input_shape(const shoal_net *n, int *batch, int *c, int *h, int *w);
/* Output shape: N and K, the classes (the softmax's width). */
shoal_result shoal_net_output_shape(const shoal_net *n, int *batch, int *k);

/* Forward the first nimg (1..N) images of x, (nimg, C, H, W) floats. training = 1 uses batch
 * statistics and dropout and keeps what backward needs; 0 is inference. *probs (may be
 * NULL) points at the softmax output (the last layer's when the net has no final softmax),
 * (nimg, K) floats owned by the net, valid until the
 * next forward. x is borrowed for the call, and with training = 1 until the backward after
 * it (which reads the first layers' input again): keep it alive and unchanged. Allocates nothing.
 * Errors: SHOAL_ERR_INVALID (NULL net or x, nimg out of range). */
shoal_result shoal_net_forward(shoal_net *n, const float *x, int nimg, int training, const float **probs);
/* Backward from the last forward (which must have had training = 1): the mean
 * cross-entropy of its nimg outputs against labels (nimg class indices in [0, K)) goes to
 * *loss (may be NULL), and d(loss)/d(parameters) overwrites the gradients (no need to zero
 * them). labels NULL: backward from the mean over the images of the sum of the outputs
 * (every output's gradient 1/nimg), for any net (a feature extractor; timing); *loss is then
 * not written. Allocates nothing. Errors: SHOAL_ERR_INVALID (NULL net, a label out of range,
 * no training forward before), SHOAL_ERR_FORMAT (labels given but the net does not end with
 * a plain [softmax]: no cross-entropy to take). */
shoal_result shoal_net_backward(shoal_net *n, const int32_t *labels, float *loss);

/* The parameters and their gradients: one contiguous block each, *count floats (may be
 * NULL), the same layout, owned by the net and valid until shoal_net_destroy. Write the
 * parameters to change the weights (an optimizer step, weights from elsewhere). NULL for a
 * NULL or destroyed net. */
float *shoal_net_params(shoal_net *n, size_t *count);
float *shoal_net_grads(shoal_net *n, size_t *count);

/* ---- layers, statistics and weight files (the Python module: shoal.Net, to_torch) ---- */

/* What a layer is, as it parsed its cfg section: enough to rebuild it elsewhere. Strings are
 * static; fields a layer does not have are 0 (NULL for strings). */
typedef struct {
    const char *type;        /* the cfg section: "convolutional", "connected", "maxpool", ... */
    const char *form;        /* "darknet" for [gru] form=darknet; NULL otherwise */
    const char *activation;  /* "linear", "relu", "leaky", "logistic", "tanh", "ramp"; NULL: none */
    int line;                /* of the section in the cfg */
    int c, h, w;             /* output per image */
    int in_c, in_h, in_w;    /* the first input per image */
    int nsrc, src[8];        /* input layers; -1: the network's input */
    int filters, size, stride, pad, groups; /* pad: pixels (conv: each side; maxpool: total);
                                               groups: conv's; softmax's WordTree groups (0: none) */
    int batch_normalize;
    int hidden, steps;       /* recurrent: state width, time steps a batch */
    float probability, temperature; /* dropout; softmax */
    /* slices in floats: of the parameter (and gradient) block, and of the statistics block */
    size_t params_offset, params_count;
    size_t weights_offset, weights_count;
    size_t biases_offset, biases_count;
    size_t scales_offset, scales_count;   /* batch norm's gammas */
    size_t stats_offset, stats_count;     /* batch norm's rolling means, then variances */
} shoal_layer_info;

/* Layers of the net (one per cfg section after [net]); 0 for a NULL or destroyed net. */
int shoal_net_nlayers(const shoal_net *n);
/* Layer i into *out. SHOAL_ERR_INVALID for a NULL or destroyed net, i out of range. */
shoal_result shoal_net_layer(const shoal_net *n, int i, shoal_layer_info *out);
/* The statistics block (batch norm's rolling values), *count floats (may be NULL); NULL when
 * the net has none. Owned by the net, saved with its weights. */
float *shoal_net_stats(shoal_net *n, size_t *count);
/* The recurrent state carried from one forward to the next (hidden and cell values of every
 * stream), *count floats; NULL for feed-forward nets. shoal_net_reset_state zeroes it. */
float *shoal_net_state(shoal_net *n, size_t *count);
void shoal_net_reset_state(shoal_net *n);
/* Read weights and statistics from path: a shoal checkpoint (shoal train --save, or
 * shoal_net_save_weights), or Darknet's .weights when the path ends so. The file must be
 * of this cfg (SHOAL_ERR_FORMAT naming both sizes otherwise); SHOAL_ERR_IO when it cannot
 * be read. Blocks on file I/O. (Implemented in src/train/net_weights.c: checkpoints are
 * the training job's format.) */
shoal_result shoal_net_load_weights(shoal_net *n, const char *path);
/* Write the weights and statistics to path, atomically: Darknet's .weights when the path
 * ends so (SHOAL_ERR_INVALID for a layer Darknet has no layout for), else a shoal checkpoint
 * that shoal test --weights, shoal train --weights and shoal_net_load_weights read. */
shoal_result shoal_net_save_weights(const shoal_net *n, const char *path);
/* Layer i's name ("conv 0", "connected 3": type and index; owned by the net) and the
 * milliseconds the last forward and backward spent in it (any out pointer may be NULL), for
 * timing. SHOAL_ERR_INVALID for a NULL or destroyed net, or i out of 0 .. nlayers-1. */
shoal_result shoal_net_layer_times(const shoal_net *n, int i, const char **name, double *forward_ms,
                                   double *backward_ms);
/* rand() calls Darknet makes while it builds this net before reading weights (its connected
 * layers' uniform start): what `darknet rnn generate -srand N` spends before sampling, so a
 * program can draw as it does. -1 when Darknet starts a layer otherwise ([convolutional]) or
 * has no such layer, or for a NULL net. */
int64_t shoal_net_darknet_init_draws(const shoal_net *n);

#ifdef __cplusplus
}
#endif
#endif
