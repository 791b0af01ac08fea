/* solver/lbfgs.c — one L-BFGS iteration at a time, as torch/optim/lbfgs.py runs a step with
 * max_iter=1 and line_search_fn="strong_wolfe", decision for decision, so the iterates agree with
 * PyTorch's to the rounding of f and g.
 * Not here: f and g (the caller's sh_lbfgs_fn), the iterate x (the caller moves it).
 * Proved by tests/train/test_lbfgs.c. */
#include "train/solver/lbfgs.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "base/util.h"

/* The (s, y) history and the two-loop recursion for the direction d, the first trial step
 * min(1, 1/|g|_1) lr (then lr), and the strong-Wolfe line search (c1 1e-4, c2 0.9): a bracketing
 * phase that extrapolates by cubic interpolation inside [t + 0.01 (t - t_prev), 10 t], then a
 * zoom that interpolates inside the bracket and moves a trial that comes within a tenth of an end
 * away from it; Python's min/max included.
 * Cost: the state holds 2 M n + 8 n doubles and runs 4 M n multiply-adds besides the evaluations.
 * Reference: Nocedal and Wright, Numerical Optimization, algorithms 3.5, 3.6, 7.4. */

#define C1 1e-4 /* sufficient decrease (Armijo), PyTorch's _strong_wolfe default */
#define C2 0.9  /* curvature */
#define YS_MIN 1e-10 /* a pair with y.s at or below this is not kept (PyTorch's test) */
#define NWORK 3 /* gradients a line search holds at once: two bracket ends and a trial */

struct sh_lbfgs {
    sh_lbfgs_opts o;
    size_t n;
    int64_t n_iter, func_evals;
    int num_old, first;      /* pairs kept; the oldest's slot (a ring of M) */
    double **y, **s;         /* (M) pointers to (n): y = g_k+1 - g_k, s = t d */
    double *ro, *al;         /* (M) 1 / y.s; the two-loop's alphas */
    double h_diag;           /* y.s / y.y of the newest pair: the initial inverse Hessian */
    double *d, *g, *prev_g;  /* (n) direction, gradient at x, gradient at the last x */
    double *tmp_y, *tmp_s;   /* (n) a candidate pair, swapped into the ring when kept */
    double *work[NWORK];     /* (n) the line search's gradients */
    double t, loss, prev_loss;
    int has_g, has_prev;     /* g and loss hold x's; prev_g holds the last iteration's */
    double *block;           /* every vector above, one allocation */
};

void sh_lbfgs_opts_default(sh_lbfgs_opts *o)
{
    o->history = 10;
    o->lr = 1;
    o->tolerance_grad = 1e-7;
    o->tolerance_change = 1e-9;
    o->max_ls = 25;
}

shoal_result sh_lbfgs_create(const sh_lbfgs_opts *o, size_t n, sh_lbfgs **out)
{
    *out = NULL;
    if (o->history < 1) return SH_FAIL(SHOAL_ERR_INVALID, "L-BFGS: --history %d: keep at least 1 pair", o->history);
    size_t M = (size_t)o->history, nvec = 2 * M + 5 + NWORK; /* y, s; d, g, prev_g, tmp_y, tmp_s; work */
    if (n && nvec > SIZE_MAX / sizeof(double) / n)
        return SH_FAIL(SHOAL_ERR_NOMEM, "L-BFGS: %zu vectors of %zu values do not fit in memory; lower --history",
                       nvec, n);
    sh_lbfgs *L = calloc(1, sizeof *L);
    double **ptrs = calloc(2 * M, sizeof *ptrs);
    double *small = calloc(2 * M, sizeof *small);
    double *block = calloc(nvec * (n ? n : 1), sizeof *block);
    if (!L || !ptrs || !small || !block) {
        free(L), free(ptrs), free(small), free(block);
        return SH_FAIL(SHOAL_ERR_NOMEM, "L-BFGS: the history of %d pairs and its work vectors need %.1f MB for %zu "
                       "parameters, more than this machine gives; lower --history", o->history,
                       (double)nvec * (double)n * sizeof(double) / 1e6, n);
    }
    L->o = *o;
    L->n = n;
    L->y = ptrs;
    L->s = ptrs + M;
    L->ro = small;
    L->al = small + M;
    L->block = block;
    double *v = block;
    for (size_t k = 0; k < M; k++, v += n) L->y[k] = v;
    for (size_t k = 0; k < M; k++, v += n) L->s[k] = v;
    L->d = v, v += n;
    L->g = v, v += n;
    L->prev_g = v, v += n;
    L->tmp_y = v, v += n;
    L->tmp_s = v, v += n;
    for (int k = 0; k < NWORK; k++, v += n) L->work[k] = v;
    L->h_diag = 1;
    *out = L;
    return SHOAL_OK;
}

void sh_lbfgs_destroy(sh_lbfgs *L)
{
    if (!L) return;
    free(L->block);
    free(L->ro);
    free(L->y);
    free(L);
}

const double *sh_lbfgs_direction(const sh_lbfgs *L) { return L->d; }
const double *sh_lbfgs_gradient(const sh_lbfgs *L) { return L->g; }
int64_t sh_lbfgs_iterations(const sh_lbfgs *L) { return L->n_iter; }
int64_t sh_lbfgs_evaluations(const sh_lbfgs *L) { return L->func_evals; }

static double dot(const double *a, const double *b, size_t n)
{
    double s = 0;
    for (size_t i = 0; i < n; i++) s += a[i] * b[i];
    return s;
}

static double abs_max(const double *a, size_t n)
{
    double m = 0;
    for (size_t i = 0; i < n; i++) m = fabs(a[i]) > m ? fabs(a[i]) : m;
    return m;
}

/* Python's max(a, b) and min(a, b): the first argument unless the second compares past it
 * (so a NaN first stays, as PyTorch's interpolation lets it). */
static double py_max(double a, double b) { return b > a ? b : a; }
static double py_min(double a, double b) { return b < a ? b : a; }

/* The minimiser of the cubic through (x1, f1, g1) and (x2, f2, g2), clamped to [lo, hi]; the
 * middle of [lo, hi] when the cubic has none. PyTorch's _cubic_interpolate. */
static double cubic(double x1, double f1, double g1, double x2, double f2, double g2, double lo, double hi)
{
    double d1 = g1 + g2 - 3 * (f1 - f2) / (x1 - x2);
    double d2_square = d1 * d1 - g1 * g2;
    if (!(d2_square >= 0)) return (lo + hi) / 2.;
    double d2 = sqrt(d2_square), min_pos;
    if (x1 <= x2) min_pos = x2 - (x2 - x1) * ((g2 + d2 - d1) / (g2 - g1 + 2 * d2));
    else min_pos = x1 - (x1 - x2) * ((g1 + d2 - d1) / (g1 - g2 + 2 * d2));
    return py_min(py_max(min_pos, lo), hi);
}

static double cubic_between(double x1, double f1, double g1, double x2, double f2, double g2)
{
    double lo = x1 <= x2 ? x1 : x2, hi = x1 <= x2 ? x2 : x1;
    return cubic(x1, f1, g1, x2, f2, g2, lo, hi);
}

/* A work vector that none of the two in use is. */
static double *spare(sh_lbfgs *L, const double *a, const double *b)
{
    for (int k = 0; k < NWORK; k++)
        if (L->work[k] != a && L->work[k] != b) return L->work[k];
    return NULL; /* three work vectors and two in use: unreachable */
}

/* One trial point: f and g at x + t d, and g.d. */
static shoal_result trial(sh_lbfgs *L, const sh_lbfgs_fn *fn, double t, double *g, double *f, double *gtd, int *evals)
{
    SH_TRY(fn->eval(fn->ctx, L->d, t, f, g));
    L->func_evals++;
    ++*evals;
    *gtd = dot(g, L->d, L->n);
    return SHOAL_OK;
}

/* The bracket the line search refines: two ends (or one point that already satisfies the
 * strong Wolfe conditions, done). */
typedef struct {
    double t[2], f[2], gtd[2];
    double *g[2];
    int low, high, done;
} bracket;

static void set_ends(bracket *b, double t0, double f0, double *g0, double gtd0, double t1, double f1, double *g1,
                     double gtd1)
{
    b->t[0] = t0, b->f[0] = f0, b->g[0] = g0, b->gtd[0] = gtd0;
    b->t[1] = t1, b->f[1] = f1, b->g[1] = g1, b->gtd[1] = gtd1;
}

/* Bracketing: from t, extrapolate until a point fails sufficient decrease, rises, or has a
 * non-negative slope (a bracket), or satisfies the strong Wolfe conditions (done). f, gtd: at
 * t = 0. *ls_iter counts the evaluations after the first. */
static shoal_result bracket_phase(sh_lbfgs *L, const sh_lbfgs_fn *fn, double t, double f, double gtd, bracket *b,
                                  int *ls_iter, int *evals)
{
    double f_new, gtd_new;
    double *g_new = L->work[0];
    SH_TRY(trial(L, fn, t, g_new, &f_new, &gtd_new, evals));
    double t_prev = 0, f_prev = f, gtd_prev = gtd;
    double *g_prev = L->g;
    *ls_iter = 0;
    memset(b, 0, sizeof *b);
    while (*ls_iter < L->o.max_ls) {
        if (f_new > (f + C1 * t * gtd) || (*ls_iter > 1 && f_new >= f_prev)) {
            set_ends(b, t_prev, f_prev, g_prev, gtd_prev, t, f_new, g_new, gtd_new);
            break;
        }
        if (fabs(gtd_new) <= -C2 * gtd) { /* one point: the Wolfe conditions hold */
            set_ends(b, t, f_new, g_new, gtd_new, t, f_new, g_new, gtd_new);
            b->done = 1;
            break;
        }
        if (gtd_new >= 0) {
            set_ends(b, t_prev, f_prev, g_prev, gtd_prev, t, f_new, g_new, gtd_new);
            break;
        }
        double min_step = t + 0.01 * (t - t_prev), max_step = t * 10, tmp = t;
        t = cubic(t_prev, f_prev, gtd_prev, t, f_new, gtd_new, min_step, max_step);
        t_prev = tmp;
        f_prev = f_new;
        g_prev = g_new;
        gtd_prev = gtd_new;
        g_new = spare(L, g_prev, g_prev);
        SH_TRY(trial(L, fn, t, g_new, &f_new, &gtd_new, evals));
        ++*ls_iter;
    }
    if (*ls_iter == L->o.max_ls) set_ends(b, 0, f, L->g, gtd, t, f_new, g_new, gtd_new);
    /* low holds the lower f; PyTorch compares the first and the last entry (one point: itself) */
    b->low = b->f[0] <= b->f[1] ? 0 : 1;
    b->high = 1 - b->low;
    return SHOAL_OK;
}

/* Zoom: interpolate inside the bracket until a trial satisfies the strong Wolfe conditions,
 * the bracket is narrower than tolerance_change along d, or max_ls evaluations are spent. */
static shoal_result zoom_phase(sh_lbfgs *L, const sh_lbfgs_fn *fn, double f, double gtd, bracket *b, int ls_iter,
                               int *evals)
{
    int insuf_progress = 0;
    double d_norm = abs_max(L->d, L->n);
    while (!b->done && ls_iter < L->o.max_ls) {
        if (fabs(b->t[1] - b->t[0]) * d_norm < L->o.tolerance_change) break;
        double t = cubic_between(b->t[0], b->f[0], b->gtd[0], b->t[1], b->f[1], b->gtd[1]);
        double hi = py_max(b->t[0], b->t[1]), lo = py_min(b->t[0], b->t[1]);
        double eps = 0.1 * (hi - lo);
        if (py_min(hi - t, t - lo) < eps) { /* close to an end */
            if (insuf_progress || t >= hi || t <= lo) {
                t = fabs(t - hi) < fabs(t - lo) ? hi - eps : lo + eps; /* a tenth inside */
                insuf_progress = 0;
            } else {
                insuf_progress = 1;
            }
        } else {
            insuf_progress = 0;
        }
        double f_new, gtd_new;
        double *g_new = spare(L, b->g[0], b->g[1]);
        SH_TRY(trial(L, fn, t, g_new, &f_new, &gtd_new, evals));
        ls_iter++;
        int lo_i = b->low, hi_i = b->high;
        if (f_new > (f + C1 * t * gtd) || f_new >= b->f[lo_i]) { /* the new high end */
            b->t[hi_i] = t, b->f[hi_i] = f_new, b->g[hi_i] = g_new, b->gtd[hi_i] = gtd_new;
            b->low = b->f[0] <= b->f[1] ? 0 : 1;
            b->high = 1 - b->low;
            continue;
        }
        if (fabs(gtd_new) <= -C2 * gtd) b->done = 1;
        else if (gtd_new * (b->t[hi_i] - b->t[lo_i]) >= 0) { /* the old low becomes the high */
            b->t[hi_i] = b->t[lo_i], b->f[hi_i] = b->f[lo_i], b->g[hi_i] = b->g[lo_i], b->gtd[hi_i] = b->gtd[lo_i];
        }
        b->t[lo_i] = t, b->f[lo_i] = f_new, b->g[lo_i] = g_new, b->gtd[lo_i] = gtd_new;
    }
    return SHOAL_OK;
}

/* The two-loop recursion: d = -H g from the kept pairs (oldest first in the ring). */
static void two_loop(sh_lbfgs *L)
{
    size_t n = L->n;
    int M = L->o.history;
    double *q = L->d;
    for (size_t i = 0; i < n; i++) q[i] = -L->g[i];
    for (int i = L->num_old - 1; i >= 0; i--) {
        int k = (L->first + i) % M;
        L->al[i] = dot(L->s[k], q, n) * L->ro[k];
        const double *y = L->y[k];
        double a = -L->al[i];
        for (size_t j = 0; j < n; j++) q[j] += a * y[j];
    }
    for (size_t j = 0; j < n; j++) q[j] *= L->h_diag;
    for (int i = 0; i < L->num_old; i++) {
        int k = (L->first + i) % M;
        double be = dot(L->y[k], q, n) * L->ro[k];
        const double *s = L->s[k];
        double a = L->al[i] - be;
        for (size_t j = 0; j < n; j++) q[j] += a * s[j];
    }
}

/* The pair (y, s) from the last step; kept when y.s > YS_MIN, the oldest dropped at M. */
static void update_history(sh_lbfgs *L)
{
    size_t n = L->n;
    int M = L->o.history;
    for (size_t i = 0; i < n; i++) {
        L->tmp_y[i] = L->g[i] - L->prev_g[i];
        L->tmp_s[i] = L->d[i] * L->t;
    }
    double ys = dot(L->tmp_y, L->tmp_s, n);
    if (!(ys > YS_MIN)) return;
    int k;
    if (L->num_old == M) { /* the oldest slot takes the new pair */
        k = L->first;
        L->first = (L->first + 1) % M;
    } else {
        k = (L->first + L->num_old++) % M;
    }
    double *sw = L->y[k];
    L->y[k] = L->tmp_y, L->tmp_y = sw;
    sw = L->s[k];
    L->s[k] = L->tmp_s, L->tmp_s = sw;
    L->ro[k] = 1. / ys;
    L->h_diag = ys / dot(L->y[k], L->y[k], n);
}

shoal_result sh_lbfgs_iterate(sh_lbfgs *L, const sh_lbfgs_fn *fn, sh_lbfgs_result *r)
{
    size_t n = L->n;
    memset(r, 0, sizeof *r);
    if (!L->has_g) {
        SH_TRY(fn->eval(fn->ctx, NULL, 0, &L->loss, L->g));
        L->func_evals++;
        r->evals = 1;
        L->has_g = 1;
    }
    r->f = L->loss;
    r->g_max = abs_max(L->g, n);
    if (r->g_max <= L->o.tolerance_grad) {
        r->outcome = SH_LBFGS_CONVERGED;
        return SHOAL_OK;
    }
    L->n_iter++;
    if (L->n_iter == 1) {
        for (size_t i = 0; i < n; i++) L->d[i] = -L->g[i];
        L->num_old = L->first = 0;
        L->h_diag = 1;
    } else {
        update_history(L);
        two_loop(L);
    }
    memcpy(L->prev_g, L->g, n * sizeof *L->g);
    L->has_prev = 1;
    L->prev_loss = L->loss;
    double g_l1 = 0;
    for (size_t i = 0; i < n && L->n_iter == 1; i++) g_l1 += fabs(L->g[i]);
    L->t = L->n_iter == 1 ? py_min(1., 1. / g_l1) * L->o.lr : L->o.lr;
    double gtd = dot(L->g, L->d, n);
    if (gtd > -L->o.tolerance_change) {
        r->outcome = SH_LBFGS_STILL;
        return SHOAL_OK;
    }
    if (fn->direction) SH_TRY(fn->direction(fn->ctx, L->d));
    bracket b;
    int ls_iter = 0;
    SH_TRY(bracket_phase(L, fn, L->t, L->loss, gtd, &b, &ls_iter, &r->evals));
    SH_TRY(zoom_phase(L, fn, L->loss, gtd, &b, ls_iter, &r->evals));
    L->t = b.t[b.low];
    L->loss = b.f[b.low];
    if (b.g[b.low] != L->g) memcpy(L->g, b.g[b.low], n * sizeof *L->g);
    r->outcome = SH_LBFGS_MOVED;
    r->t = L->t;
    r->f = L->loss;
    r->g_max = abs_max(L->g, n);
    return SHOAL_OK;
}

/* ---- the state as bytes: a header, the scalars, g, prev_g, d, then the pairs oldest first ---- */

enum { H_MAGIC, H_N, H_M, H_ITER, H_EVALS, H_NUM_OLD, H_HAS_G, H_HAS_PREV, H_SLOTS };
#define STATE_MAGIC 0x3153474642464c53ull /* "SLBFGBS1", little-endian */
enum { S_HDIAG, S_T, S_LOSS, S_PREV_LOSS, S_SLOTS };

size_t sh_lbfgs_state_nbytes(const sh_lbfgs *L)
{
    size_t nv = 3 + 2 * (size_t)L->num_old;
    return H_SLOTS * sizeof(uint64_t) + (S_SLOTS + (size_t)L->num_old + nv * L->n) * sizeof(double);
}

void sh_lbfgs_state_get(const sh_lbfgs *L, void *out)
{
    uint64_t h[H_SLOTS] = {STATE_MAGIC, L->n, (uint64_t)L->o.history, (uint64_t)L->n_iter, (uint64_t)L->func_evals,
                           (uint64_t)L->num_old, (uint64_t)L->has_g, (uint64_t)L->has_prev};
    double sc[S_SLOTS] = {L->h_diag, L->t, L->loss, L->prev_loss};
    char *p = out;
    size_t vb = L->n * sizeof(double);
    memcpy(p, h, sizeof h), p += sizeof h;
    memcpy(p, sc, sizeof sc), p += sizeof sc;
    memcpy(p, L->g, vb), p += vb;
    memcpy(p, L->prev_g, vb), p += vb;
    memcpy(p, L->d, vb), p += vb;
    for (int i = 0; i < L->num_old; i++) {
        int k = (L->first + i) % L->o.history;
        memcpy(p, L->y[k], vb), p += vb;
        memcpy(p, L->s[k], vb), p += vb;
        memcpy(p, &L->ro[k], sizeof(double)), p += sizeof(double);
    }
}

shoal_result sh_lbfgs_state_set(sh_lbfgs *L, const void *in, size_t nbytes)
{
    uint64_t h[H_SLOTS];
    double sc[S_SLOTS];
    const char *p = in;
    if (nbytes < sizeof h + sizeof sc)
        return SH_FAIL(SHOAL_ERR_FORMAT, "L-BFGS state: %zu bytes, too short for its header", nbytes);
    memcpy(h, p, sizeof h), p += sizeof h;
    memcpy(sc, p, sizeof sc), p += sizeof sc;
    if (h[H_MAGIC] != STATE_MAGIC) return SH_FAIL(SHOAL_ERR_FORMAT, "L-BFGS state: not an L-BFGS state (bad magic)");
    if (h[H_N] != L->n)
        return SH_FAIL(SHOAL_ERR_FORMAT, "L-BFGS state: saved for %llu parameters, this model has %zu",
                       (unsigned long long)h[H_N], L->n);
    if (h[H_M] != (uint64_t)L->o.history)
        return SH_FAIL(SHOAL_ERR_FORMAT, "L-BFGS state: saved with --history %llu, this run has %d; resume with "
                       "--history %llu", (unsigned long long)h[H_M], L->o.history, (unsigned long long)h[H_M]);
    if (h[H_NUM_OLD] > h[H_M]) return SH_FAIL(SHOAL_ERR_FORMAT, "L-BFGS state: more pairs than its history holds");
    int num_old = (int)h[H_NUM_OLD];
    size_t vb = L->n * sizeof(double);
    size_t want = sizeof h + sizeof sc + (3 + 2 * (size_t)num_old) * vb + (size_t)num_old * sizeof(double);
    if (nbytes != want)
        return SH_FAIL(SHOAL_ERR_FORMAT, "L-BFGS state: %zu bytes where %d pairs of %zu values take %zu", nbytes,
                       num_old, L->n, want);
    L->n_iter = (int64_t)h[H_ITER];
    L->func_evals = (int64_t)h[H_EVALS];
    L->num_old = num_old;
    L->first = 0;
    L->has_g = h[H_HAS_G] != 0;
    L->has_prev = h[H_HAS_PREV] != 0;
    L->h_diag = sc[S_HDIAG], L->t = sc[S_T], L->loss = sc[S_LOSS], L->prev_loss = sc[S_PREV_LOSS];
    memcpy(L->g, p, vb), p += vb;
    memcpy(L->prev_g, p, vb), p += vb;
    memcpy(L->d, p, vb), p += vb;
    for (int i = 0; i < num_old; i++) {
        memcpy(L->y[i], p, vb), p += vb;
        memcpy(L->s[i], p, vb), p += vb;
        memcpy(&L->ro[i], p, sizeof(double)), p += sizeof(double);
    }
    return SHOAL_OK;
}
