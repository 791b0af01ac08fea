/* solver/lbfgs.h — L-BFGS with a strong-Wolfe line search over double vectors, one iteration
 * at a time, as PyTorch's torch.optim.LBFGS(line_search_fn="strong_wolfe") runs one (a step
 * with max_iter=1): the history, the two-loop direction, the line search and its state.
 * Not here: where f and its gradient come from, or where the iterate x lives (the caller's
 * eval, solver/sandblaster.c: the ranks' sums).
 * Proved by tests/train/test_lbfgs.c (against PyTorch on known functions). */
#ifndef SH_LBFGS_H
#define SH_LBFGS_H

#include <stddef.h>
#include <stdint.h>

#include "shoal/result.h"

typedef struct {
    int history;              /* M: (s, y) pairs kept (PyTorch's history_size) */
    double lr;                /* the first trial step (the first iteration: min(1, 1/|g|_1) lr) */
    double tolerance_grad;    /* max |g| at or below: converged, no move (PyTorch: 1e-7) */
    double tolerance_change;  /* g.d above -this: no move; the bracket's smallest width (1e-9) */
    int max_ls;               /* evaluations a line search may add after its first (25) */
} sh_lbfgs_opts;

/* PyTorch's defaults, with history 10 and lr 1. */
void sh_lbfgs_opts_default(sh_lbfgs_opts *o);

/* The caller's function: f and its gradient g (n) at x + t d, or at x itself when d is NULL
 * (then t is 0). direction: d (n) has just been set, before any evaluation along it (the
 * caller may send it to the ranks that evaluate with it). d and g are borrowed for the call. */
typedef struct {
    shoal_result (*eval)(void *ctx, const double *d, double t, double *f, double *g);
    shoal_result (*direction)(void *ctx, const double *d);
    void *ctx;
} sh_lbfgs_fn;

typedef enum {
    SH_LBFGS_MOVED = 0,   /* x += t d (t >= 0: the line search may settle on 0) */
    SH_LBFGS_STILL,       /* g.d > -tolerance_change: x stays (PyTorch breaks there) */
    SH_LBFGS_CONVERGED,   /* max |g| <= tolerance_grad: x stays, nothing counted */
} sh_lbfgs_outcome;

typedef struct {
    sh_lbfgs_outcome outcome;
    double t;             /* the step along d that was taken */
    double f;             /* f at the new x (the old one when it stays) */
    double g_max;         /* max |g| there */
    int evals;            /* evaluations this iteration (the first one at x included) */
} sh_lbfgs_result;

typedef struct sh_lbfgs sh_lbfgs;

/* State for n variables: 2 M n + 8 n doubles, allocated here once (SHOAL_ERR_NOMEM says how
 * many bytes and to lower --history). */
shoal_result sh_lbfgs_create(const sh_lbfgs_opts *o, size_t n, sh_lbfgs **out);
void sh_lbfgs_destroy(sh_lbfgs *L); /* NULL is fine */

/* One iteration from x (the caller's): evaluates f at x first unless the last iteration left
 * it, then the direction, the line search along it; *r says what the caller does with x.
 * The direction stays readable (sh_lbfgs_direction) until the next call. Allocates nothing. */
shoal_result sh_lbfgs_iterate(sh_lbfgs *L, const sh_lbfgs_fn *fn, sh_lbfgs_result *r);
const double *sh_lbfgs_direction(const sh_lbfgs *L);
/* The gradient at the caller's x (zeros before the first evaluation). */
const double *sh_lbfgs_gradient(const sh_lbfgs *L);
int64_t sh_lbfgs_iterations(const sh_lbfgs *L);  /* PyTorch's state['n_iter'] */
int64_t sh_lbfgs_evaluations(const sh_lbfgs *L); /* PyTorch's state['func_evals'] */

/* The state as bytes, for checkpoints: its size, a copy out, and back (SHOAL_ERR_FORMAT when
 * the bytes are not a state for this n and history, naming what differs). */
size_t sh_lbfgs_state_nbytes(const sh_lbfgs *L);
void sh_lbfgs_state_get(const sh_lbfgs *L, void *out);
shoal_result sh_lbfgs_state_set(sh_lbfgs *L, const void *in, size_t nbytes);

#endif
