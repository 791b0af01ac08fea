/* source.h — a streamed dataset's images made one at a time: picture files decoded and
 * augmented, or synthetic pictures drawn; bad files skipped (or refused) and counted.
 * Not here: which image when, threads, batches (stream.c).
 * Proved by tests/data/test_stream.c. */
#ifndef SH_SOURCE_H
#define SH_SOURCE_H

#include <stdint.h>

#include "data/augment.h"
#include "data/data.h"
#include "data/image.h"
#include "data/image_list.h"

/* Consecutive bad files after which a sample gives up: the data set, not a file, is broken. */
#define SH_SOURCE_MAX_BAD_RUN 1000
/* Bad files named in warnings, per process; the rest are counted. */
#define SH_SOURCE_WARN_MAX 100

struct sh_source {
    sh_image_list *list;        /* files; NULL: synthetic */
    sh_image_opts opts;
    int train;                  /* 1: random augmentation; 0: the test's centre crop */
    int strict;
    int64_t count;              /* images */
    int nclasses;
    uint64_t seed;              /* synthetic: the pictures' seed */
    int64_t first_item;         /* synthetic: image i is drawn as item first_item + i */
    uint64_t *bad;              /* files: (count + 63) / 64 bits, a file known bad (atomic) */
    int64_t nbad;               /* atomic */
    int64_t made;               /* images made so far (atomic): how much was decoded */
};

/* One decoding thread's buffers, reused from image to image. */
typedef struct {
    sh_image img;
    sh_augment_scratch aug;
    char path[4096];
} sh_source_scratch;

/* Files of list (ownership taken, also on error) made into o's shape; train picks the random
 * augmentation, else the centre crop. */
shoal_result sh_source_files_create(sh_image_list *list, const sh_image_opts *o, int train, int strict,
                                    sh_source **out);
/* count synthetic pictures of o's shape and nclasses classes, image i drawn from
 * (seed, first_item + i). */
shoal_result sh_source_synthetic_create(int64_t count, int64_t first_item, int nclasses, uint64_t seed,
                                        const sh_image_opts *o, sh_source **out);
void sh_source_destroy(sh_source *s);

/* Image item into dst (C, H, W) and its label, its random draws from sample_seed. A file
 * that fails to read or decode is warned about once, marked, and replaced by the next
 * good file of the list (whose label comes with it); with strict, or after
 * SH_SOURCE_MAX_BAD_RUN bad files in a row, the failure is returned. Thread-safe for
 * distinct scratches. */
shoal_result sh_source_fill(sh_source *s, int64_t item, uint64_t sample_seed, sh_source_scratch *scr,
                            float *dst, int32_t *label);

void sh_source_scratch_fini(sh_source_scratch *scr);

/* A synthetic picture (synthetic.c): its class's coarse 8 x 8 pattern plus noise, both from
 * seed, scaled by o's mean and std; the class is item % nclasses. */
void sh_synthetic_draw(uint64_t seed, int64_t item, int nclasses, const sh_image_opts *o, float *dst,
                       int32_t *label);

#endif
