/* test_rbm_kernels.c — the vectorized loops of an [rbm]'s pass against libm in double: the
 * logistic function, the softplus differences, and the Bernoulli draws' frequencies and seeds.
 * Proves src/nn/rbm_kernels.c. */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "check.h"
#include "nn/rbm_kernels.h"

static double softplus(double x) { return x > 0 ? x + log1p(exp(-x)) : log1p(exp(x)); }

static void sigmoid_matches_libm(void)
{
    enum { N = 4001 }; /* not a multiple of 16: the tail too */
    static float x[N];
    for (int i = 0; i < N; i++) x[i] = -100.0f + 0.05f * (float)i;
    static float y[N];
    for (int i = 0; i < N; i++) y[i] = x[i];
    sh_rbm_kernels_sigmoid(y, N);
    double worst = 0, worst_abs = 0;
    int subnormal = 0;
    for (int i = 0; i < N; i++) {
        double want = 1.0 / (1.0 + exp(-(double)x[i])), err = fabs(y[i] - want) / want;
        if (x[i] >= -40.0f && err > worst) worst = err;
        if (x[i] < -40.0f && fabs(y[i] - want) > worst_abs) worst_abs = fabs(y[i] - want);
        subnormal += y[i] < FLT_MIN;
    }
    CHECK(worst < 1e-6, "sigmoid's worst relative error above -40: %g", worst);
    CHECK(worst_abs < 5e-18, "sigmoid's worst absolute error below -40: %g", worst_abs);
    CHECK(!subnormal, "%d results below FLT_MIN (subnormal or 0)", subnormal);
    float edge[3] = {-1e30f, 1e30f, 0.0f};
    sh_rbm_kernels_sigmoid(edge, 3);
    CHECK(edge[0] > 0.0f && edge[0] < 5e-18f && edge[1] == 1.0f && edge[2] == 0.5f, "sigmoid(-inf, inf, 0) = %g %g %g",
          edge[0], edge[1], edge[2]);
}

static void softplus_differences_match_libm(void)
{
    enum { K = 263 };
    float a[K], d[K];
    srand(5);
    for (int t = 0; t < 20; t++) {
        double want = 0;
        for (int j = 0; j < K; j++) {
            a[j] = (float)(rand() / (double)RAND_MAX * 40.0 - 20.0) * (float)(t + 1) / 10.0f;
            d[j] = (float)(rand() / (double)RAND_MAX * 2.0 - 1.0);
            want += softplus((double)a[j] + d[j]) - softplus(a[j]);
        }
        double got = sh_rbm_kernels_softplus_diff(a, d, K), scale = 0;
        for (int j = 0; j < K; j++) scale += fabs(d[j]);
        CHECK(fabs(got - want) < 1e-5 * scale, "case %d: %.9g, libm %.9g", t, got, want);
    }
}

static void draws_fall_below_p_at_rate_p(void)
{
    enum { N = 100003 };
    float *p = malloc(N * sizeof *p), *q = malloc(N * sizeof *q);
    if (!p || !q) {
        CHECK(0, "out of memory");
        free(p), free(q);
        return;
    }
    const float rates[4] = {0.0f, 0.1f, 0.7f, 1.0f};
    for (int i = 0; i < N; i++) p[i] = rates[i % 4];
    sh_rbm_kernels_sample(p, N, 42);
    int n[4] = {0}, ones[4] = {0}, binary = 1;
    for (int i = 0; i < N; i++) {
        binary &= p[i] == 0.0f || p[i] == 1.0f;
        n[i % 4]++;
        ones[i % 4] += p[i] == 1.0f;
    }
    CHECK(binary, "draws are 0 or 1");
    CHECK(ones[0] == 0 && ones[3] == n[3], "p = 0 never, p = 1 always: %d, %d of %d", ones[0], ones[3], n[3]);
    for (int r = 1; r < 3; r++) {
        double f = (double)ones[r] / n[r], sd = sqrt(rates[r] * (1 - rates[r]) / n[r]);
        CHECK(fabs(f - rates[r]) < 5 * sd, "p = %g drawn at %g", rates[r], f);
    }
    /* the tail (N % 16) draws too; the same seed draws alike, another seed not */
    for (int i = 0; i < N; i++) p[i] = q[i] = 0.5f;
    sh_rbm_kernels_sample(p, N, 7);
    sh_rbm_kernels_sample(q, N, 7);
    int same = !memcmp(p, q, N * sizeof *p), tail = 0;
    for (int i = N - N % 16; i < N; i++) tail += p[i] == 1.0f;
    CHECK(same, "seed 7 twice draws the same");
    CHECK(tail > 0 && tail < N % 16, "the tail's %d draws: %d ones", N % 16, tail);
    for (int i = 0; i < N; i++) q[i] = 0.5f;
    sh_rbm_kernels_sample(q, N, 8);
    int differ = 0;
    for (int i = 0; i < N; i++) differ += p[i] != q[i];
    CHECK(differ > N / 3 && differ < 2 * N / 3, "seeds 7 and 8 differ in %d of %d draws", differ, N);
    /* neighbouring units are independent: P(both) = P(one)^2 */
    int both = 0;
    for (int i = 0; i + 1 < N; i += 2) both += p[i] == 1.0f && p[i + 1] == 1.0f;
    double f = (double)both / (N / 2);
    CHECK(fabs(f - 0.25) < 0.01, "adjacent pairs both drawn at %g", f);
    free(p);
    free(q);
}

int main(void)
{
    check_begin("test_rbm_kernels", 60);
    RUN(sigmoid_matches_libm);
    RUN(softplus_differences_match_libm);
    RUN(draws_fall_below_p_at_rate_p);
    return check_end();
}
