/* tb_read.h — reading TensorBoard event files back: the scalars of a run (its --logdir or
 * one events.out.tfevents.* file) as series by tag, for `shoal plot`.
 * Not here: writing (tb_events.h), drawing (svg_plot.h).
 * Proved by tests/cli/test_plot.c (runs shoal train, then plots what it wrote). */
#ifndef SH_TB_READ_H
#define SH_TB_READ_H

#include <stddef.h>
#include <stdint.h>

#include "shoal/result.h"

typedef struct {
    char tag[256];
    size_t n, cap;
    int64_t *step;
    double *wall_time;  /* seconds since the epoch */
    double *value;
} sh_tb_series;

typedef struct {
    sh_tb_series *series;
    int nseries, series_cap;
    int *slots;             /* open-addressing index of series by tag: -1 empty */
    size_t nslots;          /* a power of two, at least twice nseries */
    double first_wall_time; /* the earliest record: wall time 0 of the run */
} sh_tb_run;

/* Read every scalar of path: a directory (all its events.out.tfevents.* files, in name
 * order) or one event file. Records are checked (length and data CRCs); histograms and
 * other summaries are skipped. Errors: SHOAL_ERR_IO (cannot open, no event file in a
 * directory), SHOAL_ERR_FORMAT (a damaged record, naming the file and byte offset). The
 * caller frees with sh_tb_run_fini (also after an error). */
shoal_result sh_tb_run_read(const char *path, sh_tb_run *out);
void sh_tb_run_fini(sh_tb_run *r);
/* Append one point to tag's series (made on first use): how other readers (a train --json
 * history) fill a run. Errors: SHOAL_ERR_NOMEM. */
shoal_result sh_tb_run_add(sh_tb_run *r, const char *tag, int64_t step, double wall_time, double value);
/* The series of tag, or NULL. */
const sh_tb_series *sh_tb_run_find(const sh_tb_run *r, const char *tag);

#endif
