/* plot_data.h — the numbers `shoal plot` draws from files other than event files: the
 * per-step breakdown of a --timeline trace, and bus bandwidth against message size from
 * benchmark outputs (shoal bench --json, JSON lines of the peers' benchmarks, nccl-tests
 * tables).
 * Not here: TensorBoard files (tb_read.h), drawing (svg_plot.h), flags (cmd_plot.c).
 * Proved by tests/cli/test_plot.c. */
#ifndef SH_PLOT_DATA_H
#define SH_PLOT_DATA_H

#include <stddef.h>
#include <stdint.h>

#include "io/tb_read.h"
#include "shoal/result.h"

/* The stages of a step as the timeline names them, bottom of the bar first. */
#define SH_STAGES 5
extern const char *const sh_stage_names[SH_STAGES]; /* data, forward, backward, wait, optimizer */

typedef struct {
    int nranks, nsteps;
    int *rank;          /* [nranks]: the trace's pid of each bar, ascending */
    int64_t *step;      /* [nsteps], ascending */
    double *ms;         /* [nsteps][nranks][SH_STAGES] milliseconds; NaN: rank had no such step */
} sh_breakdown;

/* Read a trace written by `shoal train --timeline` and sum, per rank and step in
 * [step_lo, step_hi) (hi < 0: all), the stage events (the whole-stage events, not the
 * per-layer ones). Errors: SHOAL_ERR_IO (cannot read), SHOAL_ERR_FORMAT (not JSON, not a
 * trace, no step events in the window), naming the file. Free with sh_breakdown_fini. */
shoal_result sh_breakdown_read(const char *path, int64_t step_lo, int64_t step_hi, sh_breakdown *out);
void sh_breakdown_fini(sh_breakdown *b);

typedef struct {
    char label[160];    /* "shoal allreduce, 2 ranks" or the file's name */
    size_t n;
    double *nbytes;     /* message size (B), ascending as read */
    double *busbw_gb_s; /* out-of-place where the output has both */
    int generic;        /* rows of "x" and "y" (any measure): the axes are xlabel, ylabel */
    char xlabel[80], ylabel[80];
} sh_bench_curve;

/* Read one benchmark output: a `shoal bench --json` object, JSON lines with "size" and
 * "busbw_gb_s" (bench/comm's peers) or with "x" and "y" (any measure; "x_label",
 * "y_label" and "label" name the axes and the curve: bench/scaling), or a table with a header naming size and busbw
 * columns (shoal bench, nccl-tests); "[rank N] " prefixes of `shoal launch` are skipped.
 * Errors: SHOAL_ERR_IO, SHOAL_ERR_FORMAT (no row found; a malformed JSON line, with its
 * line number). Free with sh_bench_curve_fini. */
shoal_result sh_bench_curve_read(const char *path, sh_bench_curve *out);
void sh_bench_curve_fini(sh_bench_curve *c);

/* A run from `shoal train --json` output (the JSON object, "[rank 0] " prefixes allowed):
 * its history as the series train/loss, test/loss, test/accuracy and train/epoch, wall time
 * in seconds since the run's start. Errors: SHOAL_ERR_IO, SHOAL_ERR_FORMAT (no JSON object
 * with a "history" array; a trace or benchmark output is named as such). Free with
 * sh_tb_run_fini. */
shoal_result sh_train_json_read(const char *path, sh_tb_run *out);

#endif
