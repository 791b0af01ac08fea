/* snapshot.h — what a training checkpoint holds and how it is restored: "meta", "params",
 * "stats", "optim", "rnn_state" (every rank's), and each rank's own state (the residuals of
 * --compress) in a file beside it, PATH.worker<rank> ("rankmeta", "rankstate").
 * Not here: the file format, atomic writing and checksums (src/io/checkpoint.c).
 * Proved by tests/train/test_snapshot.c and tests/cli/test_train_compress.c (the rank files). */
#ifndef SH_SNAPSHOT_H
#define SH_SNAPSHOT_H

#include "nn/net.h"
#include "shoal/result.h"

typedef struct sh_trainer sh_trainer;

/* Bumped when the meta layout changes. Version 1 had 16 meta slots (read still: its newer
 * slots are zero); version 2 has 32. Other versions are refused with a clear message. */
#define SH_SNAPSHOT_VERSION 2

/* Save the trainer's whole state to path (atomic: the old file survives a crash). */
shoal_result sh_snapshot_save(sh_trainer *t, const char *path);
/* The same, for a strategy whose ranks hold parts of the model (sh_strategy.part): the
 * whole model is summed from the parts on every rank (collective) and written where writes
 * is 1. The file is the one-process layout's: it resumes under any layout. */
shoal_result sh_snapshot_save_whole(sh_trainer *t, const char *path, int writes);
/* A checkpoint's "meta" section (fixed-width slots; see snapshot.c), read once per resume. */
typedef struct {
    uint64_t v[32];
} sh_snapshot_meta;

/* Read and check the meta section only (the blocks stay on disk). */
shoal_result sh_snapshot_read_meta(const char *path, sh_snapshot_meta *out);
/* The seed a checkpoint's run was started with: a resumed run shuffles with it. */
uint64_t sh_snapshot_meta_seed(const sh_snapshot_meta *m);
/* The cfg hash of the net it was saved from (sh_net_cfg_hash): which pretraining stage. */
uint64_t sh_snapshot_meta_cfg_hash(const sh_snapshot_meta *m);
/* A checkpoint holding only net's weights and statistics (no optimizer, no position): what
 * sh_snapshot_load_weights reads (`train --weights`, test, time, sample; shoal_net_save_weights
 * and shoal pretrain write it); atomic. */
shoal_result sh_snapshot_save_weights(sh_net *net, const char *path);
/* Restore the trainer's whole state from path, whose meta m was read by
 * sh_snapshot_read_meta, so that training continues bit for bit. A checkpoint of another
 * model (cfg hash, parameter count) or batch size is refused, naming both. */
shoal_result sh_snapshot_restore(sh_trainer *t, const char *path, const sh_snapshot_meta *m);
/* The strategy's per-rank state (strategy.h, rank_state_count) to PATH.worker<job_rank>
 * (atomic, checksummed; nothing when it keeps none) and its size for the checkpoint's meta,
 * which the writer writes after. Every rank, no communication. */
shoal_result sh_snapshot_save_rank_file(sh_trainer *t, const char *path);
/* After attach, on resume from path (whose meta is m): the strategy gets this rank's state
 * from PATH.worker<rank> when the checkpoint's run had as many ranks, the same state size,
 * and the file was saved at the checkpoint's step; else its state starts from zero, said
 * once (by rank 0 when it concerns every rank, else by the rank whose file is missing or
 * from another step). A damaged file is refused (SHOAL_ERR_FORMAT). */
shoal_result sh_snapshot_restore_rank_file(sh_trainer *t, const char *path, const sh_snapshot_meta *m);
/* Darknet's .weights of the trainer's model (nn/darknet_weights.h), written by rank 0. For a
 * strategy whose ranks hold parts of the model the parts are summed into the whole model on
 * every rank (collective, like sh_snapshot_save_whole) and the lead writes it: the file is
 * the one a process holding the same whole model writes. seen: images trained on. */
shoal_result sh_snapshot_save_darknet(sh_trainer *t, const char *path, uint64_t seen);
/* The same as Caffe's .caffemodel (nn/caffe/caffe.h), for a model read from a .prototxt. */
shoal_result sh_snapshot_save_caffe(sh_trainer *t, const char *path);
/* `train --weights`: sh_snapshot_load_weights into the trainer's net, or, where its ranks
 * hold parts of the model, into the whole model built from the cfg, of which this rank keeps
 * its part (every rank reads the file; no communication). */
shoal_result sh_snapshot_load_start_weights(sh_trainer *t, const char *path);
/* Only the weights and statistics, for `shoal test`, `time` and `train --weights` (any batch
 * size). A path ending in ".weights" is read as Darknet's format (nn/darknet_weights.h), one in
 * ".caffemodel" as Caffe's (nn/caffe/caffe.h). */
shoal_result sh_snapshot_load_weights(sh_net *net, const char *path);

#endif
