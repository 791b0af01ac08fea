/* progress.h — how a training run shows where it is: on a terminal one line rewritten in place
 * ("epoch 2/5  step 430/937  loss 0.4123  acc 86.2%  3150 img/s  ETA 1m12s"), elsewhere (a log
 * file, a pipe) the same text as plain lines every K steps and at each epoch's end.
 * Not here: what the numbers mean (the trainer computes loss and accuracy), TensorBoard.
 * Proved by tests/io/test_progress.c. */
#ifndef SH_PROGRESS_H
#define SH_PROGRESS_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include "shoal/result.h"

/* What one line shows. Counters are 1-based as a person reads them (epoch 1 is the first). */
typedef struct {
    int64_t epoch, epochs;   /* epochs <= 0: "epoch 3" without a total */
    int64_t step, steps;     /* step within the epoch; steps <= 0: no total */
    double loss;             /* NaN: left out */
    double acc;              /* fraction in [0, 1]; NaN or < 0: left out */
    double img_per_s;        /* <= 0: left out (not measured yet) */
    double eta_s;            /* < 0: left out */
    const char *loss_name;   /* NULL: "loss"; text: "bits/char" */
    const char *item_name;   /* NULL: "img" (img/s); text: "char" */
} sh_progress_view;

/* Pure formatting: the line for v into buf (no newline, no escape codes); returns its length
 * (truncated to nbytes - 1 when buf is short, like snprintf). */
size_t sh_progress_format(const sh_progress_view *v, char *buf, size_t nbytes);
/* A duration as people read it: "45s", "1m12s", "2h03m", "3d04h"; "?" when unknown. */
size_t sh_progress_format_duration(double seconds, char *buf, size_t nbytes);

typedef struct {
    int64_t epochs;          /* total epochs of the run, for "epoch 2/5" and the ETA */
    int64_t steps_per_epoch;
    int64_t last_step;       /* steps done (over all epochs) when the run ends, as --max-steps
                                says: the last epoch's line counts to it; 0: epochs x steps */
    double time_limit_s;     /* the run ends this many seconds after create at the latest
                                (--time-limit): the ETA never passes it; 0: none */
    int64_t images_per_step; /* the global batch, for img/s */
    int log_every_steps;     /* plain output: one line every this many steps; <= 0: 100 */
    FILE *out;               /* NULL: stderr. Borrowed until destroy. */
    int is_tty;              /* -1: isatty(out) decides; 0: plain lines; 1: live line */
    double min_redraw_s;     /* live line: redraw at most this often; <= 0: 0.1 s */
    const char *loss_name;   /* what the loss is called; NULL: "loss" */
    const char *item_name;   /* what a step's items are called in the rate; NULL: "img" */
} sh_progress_opts;

void sh_progress_opts_default(sh_progress_opts *o);

typedef struct sh_progress sh_progress;

shoal_result sh_progress_create(const sh_progress_opts *o, sh_progress **out);
void sh_progress_destroy(sh_progress *p); /* ends a live line with a newline; NULL is fine */
/* Report that step `step` (0-based, within epoch `epoch`, also 0-based) finished with this
 * loss and accuracy (fraction; NaN when not measured). Rate and ETA come from a moving window
 * of the last steps, so a slow start or a pause fades out. Allocates nothing. */
void sh_progress_step(sh_progress *p, int64_t epoch, int64_t step, double loss, double acc);
/* The same with the clock given (tests, replay): now_ns on the sh_now_ns() scale. */
void sh_progress_step_at(sh_progress *p, uint64_t now_ns, int64_t epoch, int64_t step,
                         double loss, double acc);
/* End of an epoch: the last line stays on screen, followed by extra (e.g. "test acc 88.1%")
 * when not NULL. */
void sh_progress_epoch_end(sh_progress *p, const char *extra);
/* Erase a live line before printing something else (a warning), so the two do not mix;
 * the next step redraws it. Plain output: does nothing. */
void sh_progress_clear(sh_progress *p);

#endif
