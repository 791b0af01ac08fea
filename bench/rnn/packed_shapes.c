/* packed_shapes.c — the recurrent layers' products at a char-level net's shapes (2 x 256,
 * 64 streams x 32 steps): shoal's packed kernels (gemm_packed.c) against OpenBLAS's sgemm on
 * the same operands, one thread, median GFLOP/s of 7 runs of at least 50 ms.
 * Not here: whole training steps (bench/rnn/run.sh); square and conv shapes (bench/gemm_peak.c).
 *   make build/libshoal.a && cc -O2 -std=c11 -Isrc -Iinclude bench/rnn/packed_shapes.c \
 *       build/libshoal.a -ldl -lm -lpthread -o packed_shapes && ./packed_shapes */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

#include "base/util.h"
#include "nn/gemm_packed.h"

typedef void (*sgemm_fn)(int, int, int, int, int, int, float, const float *, int, const float *,
                         int, float, float *, int);
static sgemm_fn sgemm;
static float *A, *B, *P, *C;

/* C (m, n) = A (m, k) B (k, n), or with tn A stored (k, m): C = A^T B (the weight gradients) */
static void product(int ours, int tn, int m, int n, int k)
{
    if (ours && !tn) sh_packed_gemm(m, 0, n, k, A, k, P, 0, C, n);
    else if (ours) sh_packed_gemm_tn(m, 0, n, k, A, m, P, k, 0, C, n);
    else sgemm(101, tn ? 112 : 111, 111, m, n, k, 1.0f, A, tn ? m : k, B, n, 0.0f, C, n);
}

/* The median of 7 timed runs, each repeating the product for at least 50 ms. */
static double gflops(int ours, int tn, int m, int n, int k)
{
    double rates[7];
    int reps = 1;
    product(ours, tn, m, n, k);
    for (double took = 0.0; took < 0.05; reps *= 2) { /* reps doubled until a run takes 50 ms */
        double t0 = sh_now_s();
        for (int r = 0; r < reps; r++) product(ours, tn, m, n, k);
        took = sh_now_s() - t0;
    }
    for (int i = 0; i < 7; i++) {
        double t0 = sh_now_s();
        for (int r = 0; r < reps; r++) product(ours, tn, m, n, k);
        double rate = 2.0 * m * n * k * reps / (sh_now_s() - t0) * 1e-9;
        int j = i; /* kept in order as they come */
        for (; j > 0 && rates[j - 1] > rate; j--) rates[j] = rates[j - 1];
        rates[j] = rate;
    }
    return rates[3];
}

/* One product: B packed once (as the layers pack it once per pass), both kernels timed. */
static void row(const char *kind, const char *what, int tn, int m, int n, int k)
{
    sh_packed_pack(0, k, n, B, n, 0, sh_packed_npanels(n), P);
    double ours = gflops(1, tn, m, n, k), theirs = gflops(0, tn, m, n, k);
    char name[64];
    snprintf(name, sizeof name, "%s %s (%d,%d,%d)", kind, what, m, n, k);
    printf("%-44s %8.1f %8.1f  (%.2fx)\n", name, ours, theirs, ours / theirs);
}

int main(void)
{
    setenv("OPENBLAS_CORETYPE", "SkylakeX", 0); /* bench/peers.sh's choice on AVX-512 */
    void *h = dlopen("libopenblas.so.0", RTLD_NOW);
    if (!h || !(sgemm = (sgemm_fn)dlsym(h, "cblas_sgemm"))) {
        fprintf(stderr, "packed_shapes: no libopenblas.so.0\n");
        return 1;
    }
    void (*threads)(int) = (void (*)(int))dlsym(h, "openblas_set_num_threads");
    if (threads) threads(1);
    size_t count = (size_t)4096 * 2048;
    A = aligned_alloc(64, count * 4);
    B = aligned_alloc(64, count * 4);
    P = aligned_alloc(64, count * 4 + 65536);
    C = aligned_alloc(64, count * 4);
    for (size_t i = 0; i < count; i++) {
        A[i] = (float)(i % 7) * 0.1f;
        B[i] = (float)(i % 5) * 0.1f;
        C[i] = 0.0f;
    }
    enum { H = 256, STREAMS = 64, ROWS = 2048 }; /* 64 streams x 32 steps */
    static const struct {
        const char *kind;
        int gates;
    } kinds[] = {{"lstm", 4}, {"gru", 3}, {"rnn", 1}}; /* [rnn]: each H x H sublayer */
    printf("%-44s %8s %8s  GFLOP/s, 1 thread; (m,n,k)\n", "product", "shoal", "OpenBLAS");
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++) {
        int g = kinds[i].gates * H;
        row(kinds[i].kind, "step h Wh^T", 0, STREAMS, g, H);
        row(kinds[i].kind, "carry dG Wh", 0, STREAMS, H, g);
        row(kinds[i].kind, "input grad dG Wx", 0, ROWS, H, g);
        row(kinds[i].kind, "gW dG^T h", 1, g, H, ROWS);
    }
    row("connected", "fwd", 0, ROWS, H, H);
    return 0;
}
