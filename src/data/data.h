/* data.h — datasets in memory (IDX as MNIST/Fashion-MNIST, CIFAR-10 binary, synthetic) and
 * a loader that shuffles each epoch from a seed and shards each global batch across ranks.
 * Not here: the model (src/nn), communication (src/comm).
 * Proved by tests/data/test_idx.c, test_cifar.c, test_loader.c. */
#ifndef SH_DATA_H
#define SH_DATA_H

#include <stddef.h>
#include <stdint.h>
#include "shoal/result.h"

/* Images are kept as bytes (a quarter of floats' memory) and scaled to [0,1] per batch. */
typedef struct {
    int count;           /* images */
    int c, h, w;         /* shape of one image */
    int nclasses;        /* 1 + largest label */
    uint8_t *pixels;     /* (count, C, H, W) */
    int32_t *labels;     /* (count) */
    char name[256];      /* source, for messages */
    int text;            /* 1: pixels holds count bytes of text, each item one byte read as a
                            one-hot of 256 (c = 256, h = w = 1) whose label is the next byte */
} sh_dataset;

/* IDX files (MNIST format): images idx3-ubyte and labels idx1-ubyte, gzipped or raw (by
 * content, not name). Wrong magic, truncated data, counts that differ: SHOAL_ERR_FORMAT
 * naming the file and what to do. */
shoal_result sh_idx_load(const char *images_path, const char *labels_path, sh_dataset **out);
/* CIFAR-10 binary batches (1 label byte + 3072 pixel bytes per record). */
shoal_result sh_cifar_load(const char *const *paths, int npaths, sh_dataset **out);
/* Random images whose class is learnable (for benchmarks and tests). */
shoal_result sh_synthetic_create(int count, int c, int h, int w, int nclasses, uint64_t seed,
                                 sh_dataset **out);
/* Find a dataset in dir: train-/t10k- IDX files (.gz or not), or CIFAR-10's
 * data_batch_*.bin / test_batch.bin. train = 1 for the training split, 0 for the test. */
shoal_result sh_dataset_open_dir(const char *dir, int train, sh_dataset **out);
/* Any file as character-level text (bytes, as `darknet rnn train`): train = 1 gives all but
 * the held-out tail (the last tenth, at most 1 MiB), 0 the tail. An empty or too short file
 * is SHOAL_ERR_FORMAT naming it. */
shoal_result sh_text_load(const char *path, int train, sh_dataset **out);
void sh_dataset_destroy(sh_dataset *d);

typedef struct {
    int global_batch;    /* images per step over all ranks */
    int rank, world;     /* this rank's share of every global batch */
    uint64_t seed;       /* epoch e's order is a function of (seed, e) alone */
    int shuffle;         /* 0: dataset order (evaluation) */
    int drop_last;       /* 1: an epoch has floor(count / global_batch) steps; 0: ceil */
    int time_steps;      /* text: rows per stream per step (T); 0: 1 */
} sh_loader_opts;

typedef struct sh_loader sh_loader;

/* Text (d->text): no shuffling; the global batch is T x S rows, S streams, each stream a
 * contiguous segment of count / S bytes read in order, T bytes per step; rank r takes the
 * streams [r*S/world, (r+1)*S/world), rows (t, stream) time-major. An epoch has
 * (segment - 1) / T steps; the next epoch starts each stream over. */

/* Global step k of an epoch covers order[k*B, (k+1)*B); rank r takes the contiguous part
 * [r*B/world, (r+1)*B/world) of it, so the ranks together read each image once per epoch
 * and N ranks see exactly what one rank with the same global batch sees. */
shoal_result sh_loader_create(const sh_dataset *d, const sh_loader_opts *o, sh_loader **out);
void sh_loader_destroy(sh_loader *l);
int sh_loader_local_batch_max(const sh_loader *l); /* buffer size the caller allocates */
int64_t sh_loader_steps_per_epoch(const sh_loader *l);
/* Fill this rank's part of the next global step: x (n, C, H, W) in [0,1], y (n). Moves to the
 * next epoch (reshuffled) after the last step. Allocates nothing. */
shoal_result sh_loader_next(sh_loader *l, float *x, int32_t *y, int *n);
/* Where the loader is: epoch and step within it; seek restores both (resume). */
int64_t sh_loader_epoch(const sh_loader *l);
int64_t sh_loader_step(const sh_loader *l);
shoal_result sh_loader_seek(sh_loader *l, int64_t epoch, int64_t step);
/* Images of the current epoch's order read so far (text: steps), and a seek to an image:
 * the epoch goes on from there at this loader's batch and world (an elastic job after a
 * change of world; text cannot). */
int64_t sh_loader_image(const sh_loader *l);
shoal_result sh_loader_seek_image(sh_loader *l, int64_t epoch, int64_t image);
/* Steps from here to the end of epoch `epochs` (counted from 0; 0 when past it). */
int64_t sh_loader_steps_left(const sh_loader *l, int64_t epochs);

#endif
