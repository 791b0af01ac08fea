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
 * next forward. x is borrowed for the call. Allocates nothing.
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

/* Layers of the net (one per cfg section after [net]); 0 for a NULL or destroyed net. */
int shoal_net_nlayers(const shoal_net *n);
/* Layer i's name ("conv 0", "connected 3": type and index; owned by the net) and the
 * milliseconds the last forward and backward spent in it (any out pointer may be NULL), for
 * timing. SHOAL_ERR_INVALID for a NULL or destroyed net, or i out of 0 .. nlayers-1. */
shoal_result shoal_net_layer_times(const shoal_net *n, int i, const char **name, double *forward_ms,
                                   double *backward_ms);
/* Read weights and statistics from path: a shoal checkpoint (shoal train --save), Darknet's
 * .weights or Caffe's .caffemodel (a net from a .prototxt), told by the file's first bytes
 * whatever its name. The file must be of this cfg (SHOAL_ERR_FORMAT
 * naming both sizes otherwise); SHOAL_ERR_IO or SHOAL_ERR_FORMAT, naming the file, when it
 * cannot be read. Blocks on file I/O; path borrowed. (Implemented in
 * src/train/net_weights.c: checkpoints are the training job's format.) */
shoal_result shoal_net_load_weights(shoal_net *n, const char *path);
/* rand() calls Darknet makes while it builds this net before reading weights (its connected
 * layers' uniform start): what `darknet rnn generate -srand N` spends before sampling, so a
 * program can draw as it does. -1 when Darknet starts a layer otherwise ([convolutional]) or
 * has no such layer, or for a NULL net. */
int64_t shoal_net_darknet_init_draws(const shoal_net *n);

#ifdef __cplusplus
}
#endif
#endif
