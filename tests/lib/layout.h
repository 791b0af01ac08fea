/* layout.h — what the parallel-layout tests (pipeline, tensor, hybrid) set up the same way
 * around a run: the trainer options every run shares, the files a rank's run resumes from,
 * starts from and writes, the cfgs and paths of the test's directory, and the layout lines a
 * strategy prints.
 * Not here: the yardstick and the comparisons (reference.h), the checks shared by those
 * tests (layout_checks.h), the ranks (ranks.h).
 * Used by tests/train/test_pipeline.c, test_tensor.c and test_hybrid.c. */
#ifndef SH_TEST_LAYOUT_H
#define SH_TEST_LAYOUT_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "train/strategy.h"
#include "train/trainer.h"

/* The defaults, then quiet, one kernel thread, a test evaluation each epoch, and cfg,
 * data_dir, batch (images per step), steps (max_steps) and seed as given. */
void sh_test_train_opts(sh_train_opts *o, const char *cfg, const char *data_dir, int batch, int64_t steps,
                        uint64_t seed);

/* The files of one rank's run; NULL: none. */
typedef struct {
    const char *resume;  /* continue from this checkpoint */
    const char *save;    /* checkpoint written at the end */
    const char *weights; /* start from these weights (and so does the one process compared) */
    const char *dn;      /* Darknet's file written here, and then the checkpoint at DN.ckpt */
} sh_test_layout_files;

/* Point o at f's files. With f->dn the checkpoint's path DN.ckpt is written into ckpt
 * (ckpt_nbytes bytes; o keeps pointing at it, so it must outlive o's use). */
void sh_test_layout_files_apply(sh_train_opts *o, const sh_test_layout_files *f, char *ckpt,
                                size_t ckpt_nbytes);

/* A file of a test's directory: its name, its text (NULL: nothing written, only the path, for
 * what a run writes there) and the buffer its path goes in. */
typedef struct {
    const char *name, *text;
    char *path;
    size_t path_nbytes;
} sh_test_file;
#define SH_TEST_FILE(name, text, buf) {(name), (text), (buf), sizeof(buf)}
#define SH_TEST_NFILES(files) ((int)(sizeof(files) / sizeof *(files)))

/* Each file's path dir/name into its buffer, and its text (when not NULL) into it. 0, or -1
 * after one line on stderr naming the file. */
int sh_test_files_write(const char *dir, const sh_test_file *files, int count);

/* The layout lines describe(s, f) writes (sh_strategy_tensor_describe, ..._pipeline_...),
 * NUL-terminated in text (text_nbytes; what does not fit is dropped). */
void sh_test_describe(void (*describe)(const sh_strategy *s, FILE *f), const sh_strategy *s, char *text,
                      size_t text_nbytes);

#endif
