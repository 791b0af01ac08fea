/* darknet_weights.h — Darknet's .weights files: read into a net built from the same cfg,
 * and write a net so that Darknet loads it.
 * Not here: shoal's own checkpoints (src/train/snapshot.c, src/io/checkpoint.c).
 * Proved by tests/nn/test_darknet_weights.c. */
#ifndef SH_DARKNET_WEIGHTS_H
#define SH_DARKNET_WEIGHTS_H

#include <stdint.h>

#include "nn/net.h"
#include "shoal/result.h"

/* One array of a layer as Darknet stores it: `count` floats at `off` of the parameter block
 * (stats = 0) or of the statistics block (stats = 1). rows > 0: Darknet's file holds the
 * (rows, count/rows) matrix transposed when its header says so (connected weights).
 * ngates > 0: the array is one gate's part of a fused gate matrix (recurrent.h): its `units`
 * rows of count/units floats each, row j stored at row sh_rnn_gate_col(units, ngates, gate, j)
 * of the matrix at `off` (an LSTM's input weights of gate f, or its state biases of gate o). */
typedef struct {
    int stats;
    size_t off, count;
    size_t rows;
    int ngates, gate;
    size_t units;
} sh_dn_blob;

/* The most arrays one layer writes: an LSTM's eight connected layers of two arrays each,
 * [rnn]'s three of five with batch norm. */
#define SH_DN_MAX_BLOBS 32

/* 1 when path names a Darknet weights file (it ends in ".weights"). */
int sh_darknet_weights_is_path(const char *path);
/* Read Darknet's .weights file into n (built from the cfg the file was written for): the
 * header (major, minor, revision, then images seen as uint64 when major*10 + minor >= 2,
 * else int32), then each layer's arrays in Darknet's order. A file too short or too long
 * for the net is SHOAL_ERR_FORMAT naming the layer and both sizes. seen may be NULL. */
shoal_result sh_darknet_weights_load(sh_net *n, const char *path, uint64_t *seen);
/* SHOAL_OK when every layer of n has a Darknet layout, else SHOAL_ERR_INVALID naming the
 * first that has none (as load and save would refuse it): asked before training, so a run
 * that is to end with --save-darknet is refused at start, not after its last step. Layers
 * outside a part of the net (a pipeline stage) are asked too: the file holds them all. */
shoal_result sh_darknet_weights_check(const sh_net *n);
/* Write n as Darknet 0.2.0 writes it (major 0, minor 2, revision 0, seen as uint64). */
shoal_result sh_darknet_weights_save(const sh_net *n, const char *path, uint64_t seen);
/* Bytes sh_darknet_weights_save writes for n (the header and every array). */
uint64_t sh_darknet_weights_nbytes(const sh_net *n);
/* rand() calls Darknet makes while it builds n, before any weights are read: one per weight
 * of each connected layer and connected sublayer (connected_layer.c's uniform start), biases
 * none. -1 when n has a layer Darknet starts otherwise ([convolutional]) or that has no
 * Darknet layout. (`darknet rnn generate` seeds rand() before it builds the net.) */
int64_t sh_darknet_init_draws(const sh_net *n);

#endif
