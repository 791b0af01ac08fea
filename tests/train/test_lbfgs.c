/* test_lbfgs.c — proves src/train/solver/lbfgs.c: on the extended Rosenbrock function, every
 * iterate and every iteration's count of line-search evaluations equal PyTorch's
 * torch.optim.LBFGS(line_search_fn="strong_wolfe") (tests/train/lbfgs_torch.py, double
 * precision, one iteration per step) within 1e-9 (1e-6 on ten variables, where the valley
 * amplifies last-bit differences), at a step size that extrapolates, one that zooms and one
 * that converges, with a history short enough to drop pairs; a quadratic is solved, after
 * which the iterate stays; g.d above -tolerance_change stays
 * put; the state saved after 7 iterations and restored into a fresh solver continues bit for
 * bit; bad state bytes and an evaluation's error are refused. Without torch the comparison
 * says so in one line and the rest runs. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "lib/run.h"
#include "train/solver/lbfgs.h"

enum { NMAX = 16 };

/* The problem and the caller's iterate x: f(x + t d). */
typedef struct {
    int kind; /* 0: Rosenbrock; 1: quadratic sum of (i + 1) (x_i - 1)^2 / 2 */
    size_t n;
    double x[NMAX];
    int fail_at, evals; /* fail_at > 0: that evaluation returns an error */
} problem;

static double value_grad(const problem *p, const double *v, double *g)
{
    double f = 0;
    if (p->kind == 1) {
        for (size_t i = 0; i < p->n; i++) {
            f += 0.5 * (double)(i + 1) * (v[i] - 1) * (v[i] - 1);
            g[i] = (double)(i + 1) * (v[i] - 1);
        }
        return f;
    }
    for (size_t i = 0; i + 1 < p->n; i += 2) {
        double a = v[i + 1] - v[i] * v[i], b = 1 - v[i];
        f += 100 * a * a + b * b;
        g[i] = -400 * v[i] * a - 2 * b;
        g[i + 1] = 200 * a;
    }
    return f;
}

static shoal_result eval(void *ctx, const double *d, double t, double *f, double *g)
{
    problem *p = ctx;
    if (++p->evals == p->fail_at) return SHOAL_ERR_PEER;
    double v[NMAX];
    for (size_t i = 0; i < p->n; i++) v[i] = d ? p->x[i] + t * d[i] : p->x[i];
    *f = value_grad(p, v, g);
    return SHOAL_OK;
}

static void start(problem *p, int kind, size_t n)
{
    memset(p, 0, sizeof *p);
    p->kind = kind;
    p->n = n;
    for (size_t i = 0; i < n; i++) p->x[i] = kind == 1 ? 0 : i % 2 == 0 ? -1.2 : 1.0;
}

/* One iteration and the move it asks for. */
static void step(sh_lbfgs *L, problem *p, sh_lbfgs_result *r)
{
    sh_lbfgs_fn fn = {eval, NULL, p};
    CHECK_OK(sh_lbfgs_iterate(L, &fn, r));
    const double *d = sh_lbfgs_direction(L);
    if (r->outcome == SH_LBFGS_MOVED)
        for (size_t i = 0; i < p->n; i++) p->x[i] += r->t * d[i];
}

static int have_torch(void)
{
    char out[256];
    return sh_test_run("/usr/bin/python3 -c 'import torch' 2>/dev/null && echo yes", out, sizeof out) == 0 &&
           strncmp(out, "yes", 3) == 0;
}

/* PyTorch's iterates against ours, for n variables, history M, lr: the same number of
 * evaluations every iteration, the iterates within tol (relative, 1 at least in the divisor;
 * their rounding differs in the last bit and Rosenbrock's valley doubles that every few
 * iterations). */
static void matches_torch(int n, int iters, int M, double lr, double tol)
{
    char out[512], cmd[2048], path[] = "/tmp/shoal_lbfgs_XXXXXX";
    int fd = mkstemp(path);
    if (fd < 0) {
        CHECK(0, "mkstemp");
        return;
    }
    close(fd);
    snprintf(cmd, sizeof cmd, "/usr/bin/python3 tests/train/lbfgs_torch.py rosen %d %d %d %.17g %s 2>&1", n, iters, M, lr, path);
    int rc = sh_test_run(cmd, out, sizeof out);
    CHECK(rc == 0, "lbfgs_torch.py rosen: exit %d: %s", rc, out);
    FILE *f = fopen(path, "r");
    sh_lbfgs_opts o;
    sh_lbfgs_opts_default(&o);
    o.history = M;
    o.lr = lr;
    sh_lbfgs *L = NULL;
    CHECK_OK(sh_lbfgs_create(&o, (size_t)n, &L));
    problem p;
    start(&p, 0, (size_t)n);
    double worst = 0;
    int evals_differ = 0, rows = 0;
    for (int it = 0; f && L && it < iters; it++) {
        int ref_evals = 0;
        double ref_f = 0, ref_x[NMAX];
        if (fscanf(f, "%d %lf", &ref_evals, &ref_f) != 2) break;
        for (int i = 0; i < n; i++) CHECK(fscanf(f, "%lf", &ref_x[i]) == 1, "short row %d", it);
        sh_lbfgs_result r;
        step(L, &p, &r);
        int ls_evals = r.evals - (it == 0); /* PyTorch's count leaves out the step's first */
        evals_differ += ls_evals != ref_evals;
        CHECK(ls_evals == ref_evals, "n %d lr %g iteration %d: %d line-search evaluations, PyTorch %d", n, lr, it + 1,
              ls_evals, ref_evals);
        for (int i = 0; i < n; i++) worst = fmax(worst, fabs(p.x[i] - ref_x[i]) / fmax(1, fabs(ref_x[i])));
        rows++;
    }
    CHECK(rows == iters, "n %d lr %g: %d of %d iterations compared", n, lr, rows, iters);
    CHECK(worst < tol, "n %d lr %g M %d: iterates differ from PyTorch's by %g", n, lr, M, worst);
    if (f) fclose(f);
    unlink(path);
    sh_lbfgs_destroy(L);
}

static void iterates_equal_pytorch_on_rosenbrock(void)
{
    if (!have_torch()) {
        printf("test_lbfgs: no torch under /usr/bin/python3: the comparison with PyTorch is skipped\n");
        return;
    }
    matches_torch(4, 30, 3, 1.0, 1e-9);  /* a history of 3: pairs dropped */
    matches_torch(4, 30, 3, 1e-3, 1e-9); /* every line search extrapolates */
    matches_torch(4, 30, 3, 50, 1e-9);   /* every line search zooms; converged from 21 on */
    matches_torch(10, 20, 10, 1.0, 1e-6);
}

/* A quadratic: solved, then held where the slope along d falls to -tolerance_change (the
 * iterate stays and nothing is evaluated again); with a looser tolerance_grad, converged. */
static void a_quadratic_is_solved_and_then_the_iterate_stays(void)
{
    for (int loose = 0; loose < 2; loose++) {
        sh_lbfgs_opts o;
        sh_lbfgs_opts_default(&o);
        if (loose) o.tolerance_grad = 1e-3;
        sh_lbfgs *L = NULL;
        CHECK_OK(sh_lbfgs_create(&o, 8, &L));
        problem p;
        start(&p, 1, 8);
        sh_lbfgs_result r = {0};
        for (int it = 0; it < 30; it++) step(L, &p, &r);
        CHECK(r.outcome == (loose ? SH_LBFGS_CONVERGED : SH_LBFGS_STILL), "loose %d: outcome %d", loose,
              (int)r.outcome);
        CHECK(r.f < (loose ? 1e-6 : 1e-8) && r.g_max < (loose ? 1e-3 : 1e-4), "loose %d: f %g, max |g| %g", loose,
              r.f, r.g_max);
        for (size_t i = 0; i < 8; i++) CHECK(fabs(p.x[i] - 1) < 1e-3, "loose %d: x%zu %g", loose, i, p.x[i]);
        double x[NMAX];
        memcpy(x, p.x, sizeof x);
        int evals = p.evals;
        step(L, &p, &r);
        CHECK(r.evals == 0 && p.evals == evals && !memcmp(x, p.x, sizeof x),
              "loose %d: a settled solver moved or evaluated (%d evaluations)", loose, r.evals);
        sh_lbfgs_destroy(L);
    }
}

static void a_slope_above_minus_tolerance_change_stays_put(void)
{
    sh_lbfgs_opts o;
    sh_lbfgs_opts_default(&o);
    o.tolerance_change = 1e30;
    sh_lbfgs *L = NULL;
    CHECK_OK(sh_lbfgs_create(&o, 4, &L));
    problem p;
    start(&p, 0, 4);
    sh_lbfgs_result r;
    step(L, &p, &r);
    CHECK(r.outcome == SH_LBFGS_STILL && r.evals == 1 && p.x[0] == -1.2, "outcome %d, %d evaluations, x0 %g",
          (int)r.outcome, r.evals, p.x[0]);
    CHECK(sh_lbfgs_iterations(L) == 1, "iterations %lld", (long long)sh_lbfgs_iterations(L));
    sh_lbfgs_destroy(L);
}

static void the_state_restored_continues_bit_for_bit(void)
{
    sh_lbfgs_opts o;
    sh_lbfgs_opts_default(&o);
    o.history = 4;
    sh_lbfgs *A = NULL, *B = NULL;
    CHECK_OK(sh_lbfgs_create(&o, 6, &A));
    CHECK_OK(sh_lbfgs_create(&o, 6, &B));
    problem pa, pb;
    start(&pa, 0, 6);
    sh_lbfgs_result r;
    for (int i = 0; i < 7; i++) step(A, &pa, &r);
    size_t nb = sh_lbfgs_state_nbytes(A);
    void *buf = malloc(nb);
    sh_lbfgs_state_get(A, buf);
    pb = pa;
    CHECK_OK(sh_lbfgs_state_set(B, buf, nb));
    CHECK(sh_lbfgs_iterations(B) == 7 && sh_lbfgs_evaluations(B) == sh_lbfgs_evaluations(A), "counts not restored");
    for (int i = 0; i < 5; i++) {
        step(A, &pa, &r);
        step(B, &pb, &r);
    }
    CHECK(memcmp(pa.x, pb.x, sizeof pa.x) == 0, "restored run differs: %.17g vs %.17g", pa.x[0], pb.x[0]);
    /* what is refused: other sizes, another history, a bad magic, wrong length */
    sh_lbfgs *C = NULL;
    CHECK_OK(sh_lbfgs_create(&o, 5, &C));
    CHECK_RC(sh_lbfgs_state_set(C, buf, nb), SHOAL_ERR_FORMAT);
    CHECK(strstr(shoal_last_error_message(), "6 parameters"), "%s", shoal_last_error_message());
    sh_lbfgs_destroy(C);
    o.history = 5;
    CHECK_OK(sh_lbfgs_create(&o, 6, &C));
    CHECK_RC(sh_lbfgs_state_set(C, buf, nb), SHOAL_ERR_FORMAT);
    CHECK(strstr(shoal_last_error_message(), "--history 4"), "%s", shoal_last_error_message());
    sh_lbfgs_destroy(C);
    CHECK_RC(sh_lbfgs_state_set(B, buf, nb - 8), SHOAL_ERR_FORMAT);
    CHECK_RC(sh_lbfgs_state_set(B, buf, 16), SHOAL_ERR_FORMAT);
    ((unsigned char *)buf)[0] ^= 1;
    CHECK_RC(sh_lbfgs_state_set(B, buf, nb), SHOAL_ERR_FORMAT);
    free(buf);
    sh_lbfgs_destroy(A);
    sh_lbfgs_destroy(B);
}

static void an_evaluation_error_is_returned(void)
{
    sh_lbfgs_opts o;
    sh_lbfgs_opts_default(&o);
    sh_lbfgs *L = NULL;
    CHECK_OK(sh_lbfgs_create(&o, 4, &L));
    problem p;
    start(&p, 0, 4);
    p.fail_at = 3;
    sh_lbfgs_fn fn = {eval, NULL, &p};
    sh_lbfgs_result r;
    shoal_result rc = SHOAL_OK;
    for (int i = 0; i < 5 && rc == SHOAL_OK; i++) rc = sh_lbfgs_iterate(L, &fn, &r);
    CHECK(rc == SHOAL_ERR_PEER && p.evals == 3, "rc %d after %d evaluations", (int)rc, p.evals);
    sh_lbfgs_destroy(L);
    o.history = 0;
    CHECK_RC(sh_lbfgs_create(&o, 4, &L), SHOAL_ERR_INVALID);
    CHECK(L == NULL, "a refused create left a solver");
}

int main(void)
{
    check_begin("test_lbfgs", 120);
    RUN(iterates_equal_pytorch_on_rosenbrock);
    RUN(a_quadratic_is_solved_and_then_the_iterate_stays);
    RUN(a_slope_above_minus_tolerance_change_stays_put);
    RUN(the_state_restored_continues_bit_for_bit);
    RUN(an_evaluation_error_is_returned);
    return check_end();
}
