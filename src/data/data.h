/* data.h — datasets in memory (IDX as MNIST/Fashion-MNIST, CIFAR-10 binary, text) or
 * streamed (pictures in folders or list files, synthetic), and a loader that shuffles each
 * epoch from a seed and shards each global batch across ranks.
 * Not here: the model (src/nn), communication (src/comm).
 * Proved by tests/data/test_idx.c, test_cifar.c, test_loader.c, test_stream.c, test_open.c. */
#ifndef SH_DATA_H
#define SH_DATA_H

#include <stddef.h>
#include <stdint.h>
#include "shoal/result.h"

/* How pictures become network inputs (image folders, list files, synthetic data): the cfg's
 * [net] keys, Darknet's where it has one. Training draws the geometry and colour per image;
 * testing resizes the shorter side to test_resize and takes the centre crop. */
typedef struct {
    int c, h, w;                /* the network's input: channels (1 grey, 3 RGB), height, width */
    int min_crop, max_crop;     /* training: the shorter side resized to a random length in
                                   [min_crop, max_crop] */
    int test_resize;            /* testing: the shorter side's length before the centre crop */
    float aspect;               /* training: width stretched by a factor in [1/aspect, aspect] */
    float angle;                /* training: rotated by up to +-angle degrees */
    int flip;                   /* training: mirrored left to right half the time */
    float hue;                  /* training: hue shifted by up to +-hue of the colour circle */
    float saturation, exposure; /* training: HSV's S and V scaled by [1/x, x] */
    float mean[3], std[3];      /* per channel, on values in [0, 1]: (v - mean) / std */
} sh_image_opts;

/* No augmentation, no normalization: min_crop = max_crop = test_resize = max(h, w),
 * aspect, saturation, exposure and std 1, the rest 0. */
void sh_image_opts_default(sh_image_opts *o, int c, int h, int w);

/* Pictures made when the loader asks for them (source.c): decoded from files or drawn. */
typedef struct sh_source sh_source;

/* Images in memory are kept as bytes (a quarter of floats' memory) and scaled to [0,1] per
 * batch; a streamed dataset holds no pixels, its source makes each image on demand. */
typedef struct {
    int count;           /* images */
    int c, h, w;         /* shape of one image */
    int nclasses;        /* 1 + largest label */
    uint8_t *pixels;     /* (count, C, H, W) */
    int32_t *labels;     /* (count) */
    char name[256];      /* source, for messages */
    int text;            /* 1: pixels holds count bytes of text, each item one byte read as a
                            one-hot of 256 (c = 256, h = w = 1) whose label is the next byte */
    sh_source *source;   /* non-NULL: streamed (pixels and labels NULL); owned */
    uint64_t fingerprint;/* the files and labels (streamed from files), for checkpoints; 0: none */
} sh_dataset;

/* What --data names, for training and testing (open.c): "synthetic"; a list file of
 * pictures (its first line `PATH LABEL`, PATH a .jpg/.jpeg/.png) or else text; a folder of
 * class folders (its "val" folder, or DIR/train beside DIR/val, the held-out set); else a
 * folder of IDX or CIFAR-10 files. */
typedef struct {
    const char *path;           /* --data */
    const char *test_path;      /* --test-data (pictures: a folder or list file); NULL: DIR/val */
    sh_image_opts image;        /* the pictures' shape and preprocessing */
    int nclasses;               /* synthetic: classes (the net's outputs) */
    uint64_t seed;              /* synthetic: the pictures follow from it */
    int strict;                 /* 1: a bad picture file stops the run; 0: skipped and counted */
} sh_data_opts;

/* Open the training and the held-out set. Errors name the path and what to do. */
shoal_result sh_data_open(const sh_data_opts *o, sh_dataset **train, sh_dataset **test);
/* The held-out set alone (shoal test): a picture folder's val/ labelled by its classes (its
 * files not listed), test_path, a list file itself, text's tail, IDX's or CIFAR's test split. */
shoal_result sh_data_open_test(const sh_data_opts *o, sh_dataset **test);

/* Streamed datasets: picture files found bad so far (skipped, each warned about once). */
int64_t sh_dataset_bad_files(const sh_dataset *d);

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
    int threads;         /* streamed: decoding threads (0: 1) */
    int prefetch;        /* streamed: steps decoded ahead of the one being read (0: 2) */
    /* Regression targets (NULL: none): image i's target is item i of `targets` (as many items
     * as the dataset, images only), written scaled to [0,1] into target_out (borrowed; local
     * batch x its C*H*W floats) by every sh_loader_next, row for row with x. */
    const sh_dataset *targets;
    float *target_out;
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
/* sh_loader_next into *x; a streamed loader may hand back its own buffer of the same size
 * (cap floats, from sh_alloc_aligned) instead of copying into it and keep the old one. */
shoal_result sh_loader_take(sh_loader *l, float **x, size_t cap, int32_t *y, int *n);
/* Streamed datasets: step k's shard is decoded by the loader's threads while earlier steps
 * train, at most prefetch steps ahead; image i of an epoch's order gets its augmentation
 * from (seed, epoch, i) alone, so every rank count and resume sees the same pictures. A
 * loader that does not shuffle (evaluation) decodes no further than its epoch's end until
 * it is read or sought again. A bad file is replaced by the next good one in the list
 * (sh_source_fill); with strict data it is the error next() returns. */
/* Seconds next() waited for images that were not decoded yet (streamed; 0 in memory). */
double sh_loader_wait_s(const sh_loader *l);
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
