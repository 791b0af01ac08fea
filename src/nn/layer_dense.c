/* layer_dense.c — [connected]: output (K, default 1), activation (Darknet default logistic),
 * batch_normalize. Y (N, K) = X (N, I) W^T + b, with W stored (K, I) as Darknet; forward and
 * dX go by chunks of images, dW by rows (outputs) over the whole batch. A pipeline stage may
 * defer dW and the bias gradients (the weights hook) to one product over all its micro-batches.
 * Weights: uniform(-1, 1) * sqrt(2 / I) as Darknet.
 * A whole layer of few enough weights (by the machine: pick_rules) packs them itself (into its
 * cache, once per pass, gemm_packed.c) when a pass has sh_dense_self_pack_min_rows rows or
 * more: forward, dX and dW (X packed too) then run on the packed kernels, faster than
 * OpenBLAS's on the few hundred columns of a character model's output layer; the pipeline's
 * packed weights (sh_net_keep_packed) come first.
 * A whole layer, or a column or row share, of 64 outputs or more runs a pass of few rows
 * (the machine's windows, or sh_dense_small_fwd_rows / sh_dense_small_dx_rows, per product)
 * through gemm_small.c's turned-around products, faster there than OpenBLAS's (bench/
 * README.md, 2026-11-25); a whole layer's own packed path comes first.
 * Tensor-parallel shares (tp_role): a column share keeps K/T outputs and sums dX over the
 * ranks after backward; a row share keeps I/T inputs and sums Y over the ranks before the
 * bias and activation (the exec's sum hook). A gather share (hybrid parallelism) keeps
 * outputs [r K/T, (r+1) K/T) but a whole (N, K) output, zero but for its columns, summed over
 * the ranks after its activation; its input's gradient is summed as a column share's. Its
 * forward, the whole batch by a slice of W, uses gemm_small.c GATHER_ROWS rows at a time; its
 * input gradient OpenBLAS's (turned around it ran half OpenBLAS's speed at 32-128 rows). Its
 * gradients are final as computed, and so are a column or row share's under tensor parallelism
 * with one replica: with the net's update hook (hybrid's broadcast, tensor's) dW runs in
 * blocks of FUSE_ROWS rows on the packed kernel (X packed once, in its cache) into scratch,
 * each block stepped by the optimizer while in cache; dW is never written whole.
 * With sh_net_set_grad_rows (data parallelism across hosts) dW goes first, in blocks of
 * rows each offered to the exchange as it is done, then dX: the same bits, sooner.
 * Not here: batch norm (layer_batchnorm.c), the GEMM (gemm.c), which layers are split
 * (src/train/mp/tensor.c).
 * Proved by tests/nn/test_layer_dense.c (every path), tests/nn/test_grad_rows.c (blocks),
 * tests/train/test_tensor.c (shares) and tests/train/test_hybrid.c (gather shares, the fused
 * update). */
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#include "base/err.h"
#include "nn/gemm.h"
#include "nn/gemm_packed.h"
#include "nn/gemm_small.h"
#include "nn/layer.h"

/* A layer packs its own weights when they are at most this many (and the machine's rule below
 * agrees) and a pass this tall: W^T and W packed take twice the weights' floats, and packing
 * is paid back over the rows. */
enum { SELF_PACK_MAX = 1 << 20 };
int sh_dense_self_pack_min_rows = 64; /* layer.h */
/* Rows per product [lo, hi] that run on gemm_small.c (layer.h), and the fewest outputs. */
int sh_dense_small_fwd_rows[2] = {-1, -1}, sh_dense_small_dx_rows[2] = {-1, -1}; /* -1: the machine's */
/* The product rules by the machine (bench/README.md, 2026-11-25 and 2026-11-29). The older
 * set was chosen on Intel VMs with 1 MiB of L2 a core (Cooper Lake, Skylake-class) and is kept
 * on Intel CPUs whose L2 is smaller than 2 MiB, and where nothing is known: forward on
 * gemm_small.c at 4-96 rows (4096 x 6272 at 32 rows 99 -> 160 GFLOPS), dX at 12-48 (99 ->
 * 147), a layer's own packing up to 1M weights (W^T and W packed take twice the weights'
 * floats, paid back over the rows). The newer set was chosen on a Sapphire Rapids-class VM
 * (2 MiB, one core, ms): the turned-around dX lost at every row count (2048 x 6272 at 64 rows
 * 35.9 against OpenBLAS's 18.6); the forward won up to 128 rows (1024 x 1360 2.80 -> 2.31,
 * 2560 x 3072 16.4 -> 13.7) while the rows' packed copy fits in L2 (2048 x 6272 at 128 rows,
 * 3.2 MB: 25.8 -> 27.4); and a layer's own packing, in one product of 64-128 rows, lost on 1M
 * weights (1024 x 1024 at 128 rows, a pass 6.34 against 5.79: forward turned around, dX and
 * dW OpenBLAS's), broke even at 256K (512 x 512) and won below (384 x 384 at 64 rows 0.40
 * against 0.43), but paid where the pass runs in products of 32 rows or fewer (two threads:
 * the pack shared by four products; 1024 x 1024 at 4 x 32 rows 6.48 against 6.86, LeNet's
 * 500 x 800 at 4 x 16 rows, forward and dX ~0.96 against ~1.6): there it packs for any
 * product while its two packed copies fit in L2, and up to SELF_PACK_MAX for products of at
 * most 32 rows. An AMD Zen 5 VM (1 MiB of L2, AVX-512 on full-width units) took the newer set
 * as a whole, each model's one-thread training interleaved with the older set's, medians of
 * 5: mlp-wide 2069 -> 2291 images/s, LeNet 6963 -> 7489, balanced.cfg 5576 -> 6034, mlp-wide
 * on 2 ranks 4095 -> 4502 (unbounded sizes on top of it: within noise); so AMD's AVX-512
 * CPUs take it too, sized by their own L2, with a dX window of their own: turned around at
 * 16-128 rows (bench/dense_paths.c, ms: 2560 x 3072 at 64 rows 7.21 against OpenBLAS's 8.56,
 * 1024 x 1024 0.81 against 0.91; 500 x 800 lost under 16 rows), mlp-wide one thread 2273 ->
 * 2554, two threads 2570 -> 3065, two ranks 4612 -> 4939; balanced.cfg, LeNet within noise. */
static struct {
    int fwd[2], dx[2];         /* rows per product on gemm_small.c ([1, 0]: none) */
    size_t fwd_max_floats;     /* the forward's rows x inputs at most (its packed rows in L2) */
    size_t self_pack_max;      /* weights a whole layer packs itself at most for any product, */
    int self_pack_rows;        /* and for products of at most this many rows up to SELF_PACK_MAX */
    int newer;                 /* the newer set: also a stage's packed copies by it, and a whole
                                  layer past SELF_PACK_MAX packing X for dW */
} machine;
/* 1 on an AMD CPU with AVX-512 (the Zen 5 VM's rules). */
static int amd_avx512(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
    return __builtin_cpu_is("amd") && __builtin_cpu_supports("avx512f");
#else
    return 0;
#endif
}
static void pick_rules(void)
{
    long l2 = sysconf(_SC_LEVEL2_CACHE_SIZE);
    int amd = amd_avx512() && l2 > 0;
    if (l2 < (2L << 20) && !amd) { /* the older set, also where L2 is unknown (0, -1) */
        machine.fwd[0] = 4, machine.fwd[1] = 96, machine.dx[0] = 12, machine.dx[1] = 48;
        machine.fwd_max_floats = SIZE_MAX, machine.self_pack_max = SELF_PACK_MAX;
        return;
    }
    machine.fwd[0] = 4, machine.fwd[1] = 128, machine.dx[0] = 1, machine.dx[1] = 0;
    if (amd) /* the AMD VM: its turned-around dX won from 16 rows to 128 */
        machine.dx[0] = 16, machine.dx[1] = 128;
    machine.fwd_max_floats = (size_t)l2 / sizeof(float);
    machine.self_pack_max = (size_t)l2 / (2 * sizeof(float));
    machine.self_pack_rows = 32;
    /* dW = dY^T X on the packed kernel with X packed (its A^T B copy in tiles) against
     * OpenBLAS's, one core, ms, packing included: 2560 x 3072 over 32 / 64 / 128 rows 3.59 /
     * 6.67 / 13.4 against 4.86 / 7.90 / 14.5; 3072 x 784 1.15 / 2.01 / 5.57 against 1.54 /
     * 2.51 / 5.99 (OpenBLAS's beta = 0 clears dW first). On the Zen 5 VM 3.78 / 5.92 / 11.2
     * against 6.09 / 8.87 / 13.8 and 0.86 / 1.55 / 2.97 against 1.35 / 2.15 / 3.66
     * (bench/dense_paths.c). Not measured on the older set's machines. */
    machine.newer = 1;
}
static void machine_rules(void)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, pick_rules);
}
static int newer_rules(void)
{
    machine_rules();
    return machine.newer;
}
/* layer.h */
int sh_dense_self_packs(size_t weights, int rows, int product_rows)
{
    machine_rules();
    return rows >= sh_dense_self_pack_min_rows && weights <= SELF_PACK_MAX &&
           (weights <= machine.self_pack_max || product_rows <= machine.self_pack_rows);
}
/* net.h. Under the older rules a stage's weights packed by its update lost to the few-row
 * products at 24-48 rows (balanced.cfg, M=4: 7883 against 8734 images/s) and paid at 64 and
 * 128 (+14%, +8%). Under the newer (measured at 2 MiB of L2), with the forward turned around
 * to 128 rows, both copies lost at 64 and
 * 128 rows (M=2 6966 against 7450, M=1 5020 against 5656, medians of 3), but W alone, for dX,
 * pays from 16 rows: the forward is as fast turned around as packed without the pack, while
 * dX on the packed W beats OpenBLAS's (1024 x 1024 at 32 rows 0.45 against 0.80 ms);
 * balanced.cfg, W alone against none: M=2 8014 against 7361, M=4 8464 against 7098, M=8
 * (16 rows, against both) 7530 against 7157, M=1 a tie; at 8 rows both copies won (M=16
 * 6254 against 5356). The Zen 5 VM agreed under the newer rules (bench/mp/pipe_ab.sh, W alone
 * against this rule, medians of 3: M=1 7538 / 7602, M=2 9044 / 9087, M=4 9152 / 8865, M=8
 * 8069 / 8241, M=16 5900 / 7158). */
enum { STAGE_SMALL_LO = 24, STAGE_SMALL_HI = 48, STAGE_FWD_PACK_BELOW = 16 };
int sh_dense_stage_packs(int rows)
{
    int both = SH_PACK_FORWARD | SH_PACK_BACKWARD;
    if (!newer_rules()) return rows >= STAGE_SMALL_LO && rows <= STAGE_SMALL_HI ? 0 : both;
    return rows < STAGE_FWD_PACK_BELOW ? both : SH_PACK_BACKWARD;
}
/* The forward's (dx 0) or the input gradient's (dx 1) window: a test's, or the machine's. */
static const int *small_window(int dx)
{
    const int *set = dx ? sh_dense_small_dx_rows : sh_dense_small_fwd_rows;
    if (set[0] >= 0) return set;
    machine_rules();
    return dx ? machine.dx : machine.fwd;
}
enum { SMALL_MIN_OUTPUTS = 64 };
/* Rows of dW a gather share computes and steps at once (32 x 6272 floats: 800 KB, in L2). */
enum { FUSE_ROWS = 32 };
/* Rows of a gather share's forward per turned-around product: 32 x 6272 inputs packed is
 * 800 KB, in L2; the whole batch of 128 (3.2 MB) is not, and ran 29 -> 22 ms a step on
 * fc4096's 2048 x 6272 share (bench/README.md, 2026-11-25 13:20). */
enum { GATHER_ROWS = 32 };

static int min_int(int a, int b) { return a < b ? a : b; }

/* Room for the fused update (dense_update): X packed (cache), FUSE_ROWS rows of dW (scratch). */
static void fuse_room(sh_layer *l, int batch)
{
    if (l->ws_count < (size_t)FUSE_ROWS * l->inputs) l->ws_count = (size_t)FUSE_ROWS * l->inputs;
    l->cache_count = sh_packed_count(batch, (int)l->inputs) + SH_PACKED_NR;
}

static shoal_result dense_parse(sh_layer *l, sh_cfg_section *s, const sh_parse_ctx *ctx)
{
    int k = 1;
    (void)ctx;
    SH_TRY(sh_cfg_int(s, "output", 1, 1, 1 << 24, &k));
    if (ctx->out_div > 1) k /= ctx->out_div; /* a column-split share (the caller checked) */
    SH_TRY(sh_cfg_int(s, "batch_normalize", 0, 0, 1, &l->batch_normalize));
    SH_TRY(sh_act_parse(s, "logistic", &l->act));
    l->out_shape = (sh_shape){k, 1, 1};
    if (ctx->share_ranks > 1) { /* a gather share: its outputs, the output buffer whole */
        int r = ctx->share_rank, R = ctx->share_ranks;
        k = (int)(((long long)(r + 1) * k) / R - ((long long)r * k) / R);
        /* its forward runs the whole batch by half the weights or less: gemm_small.c's,
         * GATHER_ROWS at a time (dense_forward_images); its input gradient OpenBLAS's */
        l->ws_count = sh_small_ws_count(min_int(ctx->batch, GATHER_ROWS), (int)l->inputs, k);
        if (!l->batch_normalize) fuse_room(l, ctx->batch);
    }
    l->w_off = 0;
    l->w_count = (size_t)k * l->inputs;
    l->b_off = l->w_count;
    l->b_count = (size_t)k;
    l->s_off = l->b_off + l->b_count;
    l->s_count = l->batch_normalize ? (size_t)k : 0;
    l->param_count = l->w_count + l->b_count + l->s_count;
    l->reduce_off = 0;
    l->reduce_count = 0; /* gradients are split by outputs, not by images: no partials */
    l->stat_count = l->batch_normalize ? 2 * (size_t)k : 0;
    l->keep_count = l->batch_normalize ? (size_t)k : 0;
    l->keep_fixed = l->batch_normalize ? 2 * (size_t)k : 0;
    l->flops = (double)k * (double)l->inputs;
    if (ctx->share_ranks <= 1 && k >= SMALL_MIN_OUTPUTS) { /* few rows (whole, column or row share) */
        int in = (int)l->inputs, mf = min_int(ctx->batch, small_window(0)[1]);
        int mb = min_int(ctx->batch, small_window(1)[1]);
        size_t fwd = sh_small_ws_count(mf, in, k), bwd = sh_small_ws_count(mb, k, in);
        l->ws_count = fwd > bwd ? fwd : bwd;
    }
    if (ctx->tp_role == SH_TP_NONE && l->w_count <= SELF_PACK_MAX) { /* self_packs: whole layers */
        int in = (int)l->inputs;
        l->cache_count = sh_packed_count(in, k) + sh_packed_count(k, in) +
                         sh_packed_count(ctx->batch, in) + 3 * SH_PACKED_NR;
    } else if (ctx->tp_role == SH_TP_NONE && ctx->share_ranks <= 1 && newer_rules()) { /* X alone */
        l->cache_count = sh_packed_count(ctx->batch, (int)l->inputs) + SH_PACKED_NR;
    }
    /* tensor parallelism with one replica: a column or row share's gradients are final too */
    if ((ctx->tp_role == SH_TP_COLUMN || ctx->tp_role == SH_TP_ROW) && !l->batch_normalize) fuse_room(l, ctx->batch);
    if (ctx->tp_role != SH_TP_NONE) l->caps &= ~(unsigned)SH_LAYER_PACKED_WEIGHTS; /* the net packs whole layers */
    if (ctx->tp_role != SH_TP_NONE && !l->batch_normalize && l->cache_count) l->caps |= SH_LAYER_FUSES_UPDATE;
    return SHOAL_OK;
}

/* The layer's own packed operands in its cache, 64-byte aligned: W^T (I, K), W (K, I), X
 * (rows, I). */
static float *align64(float *p) { return (float *)(((uintptr_t)p + 63) & ~(uintptr_t)63); }
static float *self_fwd(const sh_layer *l) { return align64(l->cache); }
static float *self_bwd(const sh_layer *l)
{
    return align64(self_fwd(l) + sh_packed_count((int)l->inputs, l->out_shape.c));
}
static float *self_x(const sh_layer *l)
{
    return align64(self_bwd(l) + sh_packed_count(l->out_shape.c, (int)l->inputs));
}
/* Rows per product: the whole batch on one thread, else two chunks per thread (fixed for a
 * thread count, so results are too). */
static int dense_chunk(const sh_exec *x)
{
    int parts = x->nthreads == 1 ? 1 : 2 * x->nthreads;
    return (x->nimg + parts - 1) / parts;
}

/* 1 when this pass runs on the layer's own packed operands (forward and backward of a
 * batch see the same rows, so both decide alike). */
static int self_packs(const sh_layer *l, const sh_exec *x)
{
    return l->cache_count && !l->packed_fwd && l->tp_role == SH_TP_NONE &&
           sh_dense_self_packs(l->w_count, x->nimg, dense_chunk(x));
}
/* Rows of X the cache holds packed. */
static int self_x_fits(const sh_layer *l, const sh_exec *x)
{
    int in = (int)l->inputs;
    size_t used = (size_t)(self_x(l) - l->cache);
    return used + sh_packed_count(x->nimg, in) <= l->cache_count;
}
/* A whole layer too large to pack its weights whose cache holds X alone (parse): dW on the
 * packed kernel all the same, where the machine says it wins (pick_rules). */
static int big_x_packs(const sh_layer *l, const sh_exec *x)
{
    return l->tp_role == SH_TP_NONE && l->w_count > SELF_PACK_MAX && l->cache_count && newer_rules() &&
           sh_packed_count(x->nimg, (int)l->inputs) + SH_PACKED_NR <= l->cache_count;
}
/* 1 when this pass's dW runs on X packed (pack_x), and where it is. */
static int dw_packs_x(const sh_layer *l, const sh_exec *x)
{
    return (self_packs(l, x) && self_x_fits(l, x)) || big_x_packs(l, x);
}
static float *dw_x(const sh_layer *l) { return l->w_count > SELF_PACK_MAX ? align64(l->cache) : self_x(l); }

/* 1 when the forward (dx 0) or input gradient (dx 1) of this pass runs on gemm_small.c: a
 * whole layer or a column or row share (a gather share always does), few rows per product,
 * outputs enough, its scratch sized for them (parse). */
static int small_rows(const sh_layer *l, const sh_exec *x, int dx)
{
    if (l->tp_role == SH_TP_GATHER || l->out_shape.c < SMALL_MIN_OUTPUTS || self_packs(l, x)) return 0;
    const int *lim = small_window(dx);
    int m = dense_chunk(x), k = l->out_shape.c, in = (int)l->inputs;
    if (!dx && sh_dense_small_fwd_rows[0] < 0 && (size_t)m * in > machine.fwd_max_floats) return 0;
    return m >= lim[0] && m <= lim[1] &&
           (dx ? sh_small_ws_count(m, k, in) : sh_small_ws_count(m, in, k)) <= l->ws_count;
}

/* This layer's outputs [k0, k0 + ks) of the ld columns of its output and delta buffers: all
 * of them, except for a gather share (its columns of the whole output). */
static void share_cols(const sh_layer *l, int *k0, int *ks, int *ld)
{
    int K = l->out_shape.c;
    *k0 = 0;
    *ks = *ld = K;
    if (l->tp_role != SH_TP_GATHER) return;
    long long r = l->tp_rank, R = l->tp_ranks;
    *k0 = (int)(r * K / R);
    *ks = (int)((r + 1) * K / R) - *k0;
}

/* A tensor-parallel share draws the whole layer's weights, in the whole layer's order, and
 * keeps its rows (column split, gather share) or columns (row split): the same values as one
 * process. */
static void dense_init_share(sh_layer *l, float *params, sh_rng *rng)
{
    int gk0, gks, gld;
    share_cols(l, &gk0, &gks, &gld);
    size_t k = (size_t)gks, in = l->inputs;
    size_t whole_k = l->tp_role == SH_TP_COLUMN ? l->tp_whole : (size_t)gld;
    size_t whole_in = l->tp_role == SH_TP_ROW ? l->tp_whole : in;
    float scale = sqrtf(2.0f / (float)whole_in);
    size_t k0 = l->tp_role == SH_TP_COLUMN ? (size_t)l->tp_rank * k : (size_t)gk0;
    size_t i0 = l->tp_role == SH_TP_ROW ? (size_t)l->tp_rank * in : 0;
    for (size_t r = 0; r < whole_k; r++)
        for (size_t c = 0; c < whole_in; c++) {
            float v = scale * (2.0f * sh_rng_float(rng) - 1.0f);
            if (r >= k0 && r < k0 + k && c >= i0 && c < i0 + in) params[l->w_off + (r - k0) * in + (c - i0)] = v;
        }
    for (size_t i = 0; i < l->b_count; i++) params[l->b_off + i] = 0.0f;
}

static void dense_init(sh_layer *l, float *params, float *stats, sh_rng *rng)
{
    if (l->tp_role != SH_TP_NONE) {
        dense_init_share(l, params, rng);
        return;
    }
    float scale = sqrtf(2.0f / (float)l->inputs);
    for (size_t i = 0; i < l->w_count; i++)
        params[l->w_off + i] = scale * (2.0f * sh_rng_float(rng) - 1.0f);
    for (size_t i = 0; i < l->b_count; i++) params[l->b_off + i] = 0.0f;
    for (size_t i = 0; i < l->s_count; i++) params[l->s_off + i] = 1.0f;
    for (size_t i = 0; i < l->stat_count / 2; i++) {
        stats[l->stat_off + i] = 0.0f;
        stats[l->stat_off + l->stat_count / 2 + i] = 1.0f;
    }
}

static void dense_forward_images(sh_layer *l, sh_exec *x, int tid, int n0, int n1)
{
    int k0, k, ld, in = (int)l->inputs, nn = n1 - n0;
    share_cols(l, &k0, &k, &ld);
    if (nn <= 0) return;
    const float *w = x->params + l->w_off;
    const float *b = x->params + l->b_off;
    float *y = l->out + (size_t)n0 * ld;
    if (ld != k) memset(y, 0, (size_t)nn * ld * sizeof *y); /* the others' columns: summed in */
    if (l->packed_fwd && !(x->unpacked & SH_PACK_FORWARD)) /* a whole layer: net_part.c packs no share */
        sh_packed_gemm(nn, 0, k, in, l->in[0] + (size_t)n0 * in, in, l->packed_fwd, 0, y, ld);
    else if (l->tp_role == SH_TP_GATHER) /* GATHER_ROWS at a time: packed A stays in L2 */
        for (int r0 = 0; r0 < nn; r0 += GATHER_ROWS)
            sh_small_gemm_nt(min_int(GATHER_ROWS, nn - r0), k, in, l->in[0] + (size_t)(n0 + r0) * in, in, w, in,
                             y + (size_t)r0 * ld + k0, ld, x->work[tid]);
    else if (small_rows(l, x, 0))
        sh_small_gemm_nt(nn, k, in, l->in[0] + (size_t)n0 * in, in, w, in, y + k0, ld, x->work[tid]);
    else if (self_packs(l, x))
        sh_packed_gemm(nn, 0, k, in, l->in[0] + (size_t)n0 * in, in, self_fwd(l), 0, y, ld);
    else
        sh_gemm(0, 1, nn, k, in, 1.0f, l->in[0] + (size_t)n0 * in, in, w, in, 0.0f, y + k0, ld);
    if (l->batch_normalize || l->tp_role == SH_TP_ROW) return; /* row split: bias after the sum */
    for (int n = 0; n < nn; n++) {
        float *row = y + (size_t)n * ld + k0;
        for (int j = 0; j < k; j++) row[j] += b[j];
        sh_act_forward(l->act, row, (size_t)k);
    }
}

/* Row split, after the sum over the ranks: bias and activation. */
static void dense_finish_images(sh_layer *l, sh_exec *x, int tid, int n0, int n1)
{
    (void)tid;
    int k = l->out_shape.c;
    const float *b = x->params + l->b_off;
    for (int n = n0; n < n1; n++) {
        float *row = l->out + (size_t)n * k;
        for (int j = 0; j < k; j++) row[j] += b[j];
        sh_act_forward(l->act, row, (size_t)k);
    }
}

/* Panels [p0, p1) of the layer's own packed operands: W^T (forward) or W and X (backward). */
static void pack_fwd_panels(sh_layer *l, sh_exec *x, int tid, int p0, int p1)
{
    (void)tid;
    int k = l->out_shape.c, in = (int)l->inputs;
    sh_packed_pack(1, in, k, x->params + l->w_off, in, p0, p1, self_fwd(l));
}
static void pack_bwd_panels(sh_layer *l, sh_exec *x, int tid, int p0, int p1)
{
    (void)tid;
    int k = l->out_shape.c, in = (int)l->inputs;
    sh_packed_pack(0, k, in, x->params + l->w_off, in, p0, p1, self_bwd(l));
}
static void pack_x_panels(sh_layer *l, sh_exec *x, int tid, int p0, int p1)
{
    (void)tid;
    int in = (int)l->inputs;
    sh_packed_pack(0, x->nimg, in, l->in[0], in, p0, p1, dw_x(l));
}
/* dW's right operand X packed, when this pass's dW runs on the packed kernel: 1 if so. */
static int pack_x(sh_layer *l, sh_exec *x)
{
    if (!dw_packs_x(l, x)) return 0;
    sh_exec_split(l, x, sh_packed_npanels((int)l->inputs), pack_x_panels);
    return 1;
}

static void dense_forward(sh_layer *l, sh_exec *x)
{
    if (self_packs(l, x)) sh_exec_split(l, x, sh_packed_npanels(l->out_shape.c), pack_fwd_panels);
    sh_exec_chunks(l, x, dense_chunk(x), dense_forward_images);
    if (l->tp_role == SH_TP_ROW) { /* each rank's product covers its share of the inputs */
        if (x->sum_rc == SHOAL_OK) x->sum_rc = x->sum(x->sum_ctx, l->out, (size_t)x->nimg * l->out_shape.c);
        sh_exec_chunks(l, x, dense_chunk(x), dense_finish_images);
    }
    /* a gather share's columns are final: with the others' (zero here) the whole output */
    if (l->tp_role == SH_TP_GATHER && x->sum_rc == SHOAL_OK)
        x->sum_rc = x->sum(x->sum_ctx, l->out, (size_t)x->nimg * l->out_shape.c);
    if (l->batch_normalize) sh_bn_forward(l, x, l->out);
}

/* Phase 1, split by images: activation gradient of this share's rows (act_images), then
 * their input delta dX (n, I) = dY (n, K) W (K, I) (dx_images). */
static void act_images(sh_layer *l, sh_exec *x, int tid, int n0, int n1)
{
    (void)x;
    (void)tid;
    int k0, k, ld, nn = n1 - n0;
    share_cols(l, &k0, &k, &ld);
    if (nn <= 0 || l->batch_normalize) return;
    float *dy = l->delta + (size_t)n0 * ld + k0;
    if (ld == k) sh_act_backward(l->act, l->out + (size_t)n0 * k, dy, (size_t)nn * k);
    else
        for (int n = 0; n < nn; n++)
            sh_act_backward(l->act, l->out + (size_t)(n0 + n) * ld + k0, dy + (size_t)n * ld, (size_t)k);
}

static void dx_images(sh_layer *l, sh_exec *x, int tid, int n0, int n1)
{
    int k0, k, ld, in = (int)l->inputs, nn = n1 - n0;
    share_cols(l, &k0, &k, &ld);
    if (nn <= 0) return;
    float *dy = l->delta + (size_t)n0 * ld + k0;
    if (l->in_delta[0] && l->packed_bwd && !(x->unpacked & SH_PACK_BACKWARD))
        sh_packed_gemm(nn, 0, in, k, dy, ld, l->packed_bwd, l->accum[0], l->in_delta[0] + (size_t)n0 * in, in);
    else if (l->in_delta[0] && small_rows(l, x, 1)) /* a gather share's: OpenBLAS's, below */
        sh_small_gemm_nn(nn, in, k, dy, ld, x->params + l->w_off, in, l->accum[0], l->in_delta[0] + (size_t)n0 * in, in,
                         x->work[tid]);
    else if (l->in_delta[0] && self_packs(l, x))
        sh_packed_gemm(nn, 0, in, k, dy, ld, self_bwd(l), l->accum[0], l->in_delta[0] + (size_t)n0 * in, in);
    else if (l->in_delta[0])
        sh_gemm(0, 0, nn, in, k, 1.0f, dy, ld, x->params + l->w_off, in,
                l->accum[0] ? 1.0f : 0.0f, l->in_delta[0] + (size_t)n0 * in, in);
}

static void dense_backward_images(sh_layer *l, sh_exec *x, int tid, int n0, int n1)
{
    act_images(l, x, tid, n0, n1);
    dx_images(l, x, tid, n0, n1);
}

/* Bias gradients of outputs [k0, k1): dY's columns summed over the batch, in image order. */
static void bias_grads(sh_layer *l, sh_exec *x, int k0, int k1)
{
    int c0, kc, k;
    share_cols(l, &c0, &kc, &k);
    float *gb = x->grad[0] + l->b_off;
    if (!x->weights_add)
        for (int j = k0; j < k1; j++) gb[j] = 0.0f;
    for (int i = 0; i < x->nimg; i++) {
        const float *row = l->delta + (size_t)i * k + c0;
        for (int j = k0; j < k1; j++) gb[j] += row[j];
    }
}

/* Phase 2, split by outputs: rows [k0, k1) of dW (K, I) = dY^T (K, N) X (N, I) over the whole
 * batch, and those outputs' bias gradients. Each gradient is written by one thread with the
 * full batch depth: no partial blocks, no reduction. On the packed kernel that is the same
 * result for any thread count; OpenBLAS's product may round a block of fewer outputs
 * differently (its Haswell kernels do: 2 rows against 4), so there the bits follow the
 * thread count as well. */
static void dense_backward_outputs(sh_layer *l, sh_exec *x, int tid, int k0, int k1)
{
    (void)tid;
    int c0, kc, k, in = (int)l->inputs, n = x->nimg, nk = k1 - k0;
    share_cols(l, &c0, &kc, &k); /* k: the delta's row length; c0: our first column there */
    if (nk <= 0) return;
    float *gw = x->grad[0] + l->w_off + (size_t)k0 * in;
    if (dw_packs_x(l, x)) /* X packed (pack_x) */
        sh_packed_gemm_tn(nk, 0, in, n, l->delta + c0 + k0, k, dw_x(l), n, x->weights_add, gw, in);
    else
        sh_gemm(1, 0, nk, in, n, 1.0f, l->delta + c0 + k0, k, l->in[0], in, x->weights_add ? 1.0f : 0.0f, gw, in);
    if (!l->batch_normalize) bias_grads(l, x, k0, k1);
}

/* ---- a share's fused update (x->update) ---- */

static float *share_x(const sh_layer *l) { return align64(l->cache); }
static void pack_share_x_panels(sh_layer *l, sh_exec *x, int tid, int p0, int p1)
{
    (void)tid;
    int in = (int)l->inputs;
    sh_packed_pack(0, x->nimg, in, l->in[0], in, p0, p1, share_x(l));
}

/* Rows [k0, k1) of the share's dW, FUSE_ROWS at a time into this thread's scratch, each block
 * stepped at once; then those outputs' bias gradients (written, as unfused) stepped too. */
static void dense_update_rows(sh_layer *l, sh_exec *x, int tid, int k0, int k1)
{
    int c0, kc, k, in = (int)l->inputs, n = x->nimg;
    share_cols(l, &c0, &kc, &k);
    if (k1 <= k0) return;
    float *gw = x->work[tid];
    for (int r0 = k0; r0 < k1; r0 += FUSE_ROWS) {
        int nr = min_int(FUSE_ROWS, k1 - r0);
        sh_packed_gemm_tn(nr, 0, in, n, l->delta + c0 + r0, k, share_x(l), n, 0, gw, in);
        x->update(x->update_ctx, l->w_off + (size_t)r0 * in, gw, (size_t)nr * in);
    }
    bias_grads(l, x, k0, k1); /* x->weights_add is 0 here */
    x->update(x->update_ctx, l->b_off + (size_t)k0, x->grad[0] + l->b_off + k0, (size_t)(k1 - k0));
}

static void dense_update(sh_layer *l, sh_exec *x)
{
    SH_ASSERT(!x->weights_add && sh_packed_count(x->nimg, (int)l->inputs) + SH_PACKED_NR <= l->cache_count);
    sh_exec_split(l, x, sh_packed_npanels((int)l->inputs), pack_share_x_panels);
    int k0, ks, ld;
    share_cols(l, &k0, &ks, &ld);
    sh_exec_split(l, x, ks, dense_update_rows);
}

/* Rows [grad_row0 + c0, grad_row0 + c1) of dW: a thread's share of the current block. */
static void block_outputs(sh_layer *l, sh_exec *x, int tid, int c0, int c1)
{
    dense_backward_outputs(l, x, tid, x->grad_row0 + c0, x->grad_row0 + c1);
}

/* Early readiness (x->grad_rows): dY first, then dW in blocks of rows, each offered as it is
 * done, then dX. Every value is computed as in the whole pass (the activation gradient is
 * elementwise; the packed kernel sums each element of dW in the same order whatever the
 * rows it is given), only sooner or later. Where X is not packed, dW is OpenBLAS's, whose
 * sums follow the shape, so it goes whole (still before dX). Taken only where dX reads the
 * layer's own packed copy of W, or there is no dX (dense_backward). */
static void dense_backward_blocks(sh_layer *l, sh_exec *x)
{
    int k = l->out_shape.c, in = (int)l->inputs;
    sh_exec_chunks(l, x, dense_chunk(x), act_images);
    /* W for dX is copied before the first offer: an offered block may be reduced and stepped
     * (the allreduce applies the update) while dX still needs the old weights */
    if (l->in_delta[0]) sh_exec_split(l, x, sh_packed_npanels(in), pack_bwd_panels);
    int rows = pack_x(l, x) ? x->grad_rows : k;
    for (int r0 = 0; r0 < k; r0 += rows) {
        int r1 = k - r0 < rows ? k : r0 + rows;
        x->grad_row0 = r0;
        sh_exec_split(l, x, r1 - r0, block_outputs);
        sh_exec_offer(x, l, (size_t)(r1 - r0) * in);
    }
    sh_exec_chunks(l, x, dense_chunk(x), dx_images);
}

static void dense_backward(sh_layer *l, sh_exec *x)
{
    if (l->batch_normalize) sh_bn_backward(l, x);
    /* blocks only where dX reads its own copy of W (or there is no dX): see dense_backward_blocks */
    if (x->grad_rows > 0 && l->tp_role == SH_TP_NONE && !x->defer_weights &&
        (!l->in_delta[0] || self_packs(l, x))) {
        dense_backward_blocks(l, x);
        return;
    }
    if (l->in_delta[0] && self_packs(l, x))
        sh_exec_split(l, x, sh_packed_npanels((int)l->inputs), pack_bwd_panels);
    sh_exec_chunks(l, x, dense_chunk(x), dense_backward_images);
    int k0, ks, ld;
    share_cols(l, &k0, &ks, &ld);
    if (x->update && sh_layer_can(l, SH_LAYER_FUSES_UPDATE)) {
        dense_update(l, x);
    } else if (!x->defer_weights || !sh_layer_defers_weights(l)) {
        pack_x(l, x);
        sh_exec_split(l, x, ks, dense_backward_outputs);
    }
    /* column split, gather share: each rank's dX covers its share of the outputs */
    if ((l->tp_role == SH_TP_COLUMN || l->tp_role == SH_TP_GATHER) && l->in_delta[0] && x->sum_rc == SHOAL_OK)
        x->sum_rc = x->sum(x->sum_ctx, l->in_delta[0], (size_t)x->nimg * l->inputs);
}

/* Deferred (x->defer_weights): phase 2 alone, over the nimg rows of the factors the caller
 * put in in[0] and delta. */
static void dense_weights(sh_layer *l, sh_exec *x)
{
    pack_x(l, x);
    sh_exec_split(l, x, l->out_shape.c, dense_backward_outputs);
}

/* Darknet: biases, weights (K, I), [scales, rolling mean, rolling variance]. */
static int dense_darknet_blobs(const sh_layer *l, sh_dn_blob *b, int max)
{
    (void)max;
    int k = 0;
    size_t nk = (size_t)l->out_shape.c;
    b[k++] = (sh_dn_blob){.off = l->b_off, .count = l->b_count};
    b[k++] = (sh_dn_blob){.off = l->w_off, .count = l->w_count, .rows = nk};
    if (l->batch_normalize) {
        b[k++] = (sh_dn_blob){.off = l->s_off, .count = l->s_count};
        b[k++] = (sh_dn_blob){.stats = 1, .off = l->stat_off, .count = nk};
        b[k++] = (sh_dn_blob){.stats = 1, .off = l->stat_off + nk, .count = nk};
    }
    return k;
}

const sh_layer_ops sh_dense_ops = {
    .cfg_name = "connected",
    .short_name = "connected",
    .caps = SH_LAYER_SPLIT_COLUMN | SH_LAYER_SPLIT_ROW | SH_LAYER_GATHER | SH_LAYER_PACKED_WEIGHTS | SH_LAYER_FACTORS,
    .parse = dense_parse,
    .init = dense_init,
    .forward = dense_forward,
    .backward = dense_backward,
    .weights = dense_weights,
    .darknet_blobs = dense_darknet_blobs,
};
