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
 * (rows, count/rows) matrix transposed when its header says so (connected weights). */
typedef struct {
    int stats;
    size_t off, count;
    size_t rows;
} sh_dn_blob;

/* The most arrays one layer writes: a GRU's six connected layers of four arrays each. */
#define SH_DN_MAX_BLOBS 32

/* 1 when path names a Darknet weights file (it ends in ".weights"). */
int sh_darknet_weights_is_path(const char *path);
/* Read Darknet's .weights file into n (built from the cfg the file was written for): the
 * header (major, minor, revision, then images seen as uint64 when major*10 + minor >= 2,
 * else int32), then each layer's arrays in Darknet's order. A file too short or too long
 * for the net is SHOAL_ERR_FORMAT naming the layer and both sizes. seen may be NULL. */
shoal_result sh_darknet_weights_load(sh_net *n, const char *path, uint64_t *seen);
/* Write n as Darknet 0.2.0 writes it (major 0, minor 2, revision 0, seen as uint64). */
shoal_result sh_darknet_weights_save(const sh_net *n, const char *path, uint64_t seen);
/* Bytes sh_darknet_weights_save writes for n (the header and every array). */
uint64_t sh_darknet_weights_nbytes(const sh_net *n);

#endif
