/* stream.h — the loader's streamed half: decoding threads fill a ring of step slots ahead of
 * the trainer, each slot one step's shard of this rank.
 * Not here: the order and the shard arithmetic's contract (data.h, loader.c), making one
 * image (source.c). Proved by tests/data/test_stream.c. */
#ifndef SH_STREAM_H
#define SH_STREAM_H

#include <stdint.h>

#include "data/data.h"

typedef struct sh_stream sh_stream;

/* Threads start at once and wait: nothing is decoded before the first next or seek. */
shoal_result sh_stream_create(const sh_dataset *d, const sh_loader_opts *o, int64_t steps_per_epoch,
                              sh_stream **out);
void sh_stream_destroy(sh_stream *s);
/* This rank's part of the step at the stream's position, then the position moves on. */
shoal_result sh_stream_next(sh_stream *s, float *x, int32_t *y, int *n);
/* The same, trading the caller's buffer (cap floats, sh_alloc_aligned) for the slot's when
 * their sizes are equal: no copy; the caller's old buffer is decoded into later. */
shoal_result sh_stream_take(sh_stream *s, float **x, size_t cap, int32_t *y, int *n);
/* Drop what was decoded ahead and start again at (epoch, step) (step < steps per epoch). */
void sh_stream_seek(sh_stream *s, int64_t epoch, int64_t step);
double sh_stream_wait_s(const sh_stream *s);

/* Epoch e's order of count images (loader.c): Fisher-Yates from (seed, e), or 0..count-1. */
void sh_loader_make_order(int32_t *order, int count, uint64_t seed, int64_t epoch, int shuffle);
/* The random stream of the image at place i of epoch e's order: (seed, e, i) alone. */
uint64_t sh_loader_sample_seed(uint64_t seed, int64_t epoch, int64_t i);

#endif
