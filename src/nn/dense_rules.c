/* dense_rules.c — which path a [connected] layer's products take, by the machine: the few-row
 * windows, a layer's own packing, a pipeline stage's packed copies; picked once per process.
 * Not here: the products (dense_gemm.c), the measurements (bench/dense_paths.c).
 * Proved by tests/nn/test_layer_dense.c (each rule against the CPU's L2 and maker). */
#include <pthread.h>
#include <stdint.h>
#include <unistd.h>

#include "nn/dense.h"

int sh_dense_self_pack_min_rows = 64; /* layer.h */
/* layer.h; -1: the machine's */
int sh_dense_small_fwd_rows[2] = {-1, -1}, sh_dense_small_dx_rows[2] = {-1, -1};

/* Two rule sets, each chosen where it won (bench/dense_paths.c).
 * The older set (Intel CPUs under 2 MiB of L2 a core, and wherever L2 is unknown; chosen on
 * 1 MiB Cooper Lake and Skylake-class VMs): forward on gemm_small.c at 4-96 rows, dX at
 * 12-48, a layer's own packing for any product up to SH_DENSE_SELF_PACK_MAX weights.
 * The newer set (from 2 MiB, chosen on a Sapphire Rapids-class VM; AMD's AVX-512 CPUs take
 * it too, sized by their own L2, as measured on a Zen 5 VM): the forward turned around at
 * 4-128 rows while the rows' packed copy (rows x inputs floats) fits in L2; dX on OpenBLAS
 * (it lost turned around at every row count), except on AMD, where it won at 16-128 rows; a
 * layer's own packing for any product only while both packed copies fit in L2, and up to
 * SH_DENSE_SELF_PACK_MAX for products of at most 32 rows (the pack then serves several
 * products); and a layer too large to pack its weights packs X for dW (the packed kernel beat
 * OpenBLAS's there on both machines; not measured under the older set). */
static struct {
    int fwd[2], dx[2];         /* rows per product on gemm_small.c ([1, 0]: none) */
    size_t fwd_max_floats;     /* the forward's rows x inputs at most (its packed rows in L2) */
    size_t self_pack_max;      /* weights a whole layer packs itself at most for any product, */
    int self_pack_rows;        /* and for products of at most this many rows up to the max */
    int newer;                 /* the newer set: also a stage's packed copies by it, and a whole
                                  layer past SH_DENSE_SELF_PACK_MAX packing X for dW */
} machine;

/* 1 on an AMD CPU with AVX-512. */
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
        machine.fwd_max_floats = SIZE_MAX, machine.self_pack_max = SH_DENSE_SELF_PACK_MAX;
        return;
    }
    machine.fwd[0] = 4, machine.fwd[1] = 128, machine.dx[0] = 1, machine.dx[1] = 0;
    if (amd) machine.dx[0] = 16, machine.dx[1] = 128;
    machine.fwd_max_floats = (size_t)l2 / sizeof(float);
    machine.self_pack_max = (size_t)l2 / (2 * sizeof(float));
    machine.self_pack_rows = 32;
    machine.newer = 1;
}

static void machine_rules(void)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, pick_rules);
}

int sh_dense_rules_newer(void)
{
    machine_rules();
    return machine.newer;
}

/* layer.h */
int sh_dense_self_packs(size_t weights, int rows, int product_rows)
{
    machine_rules();
    return rows >= sh_dense_self_pack_min_rows && weights <= SH_DENSE_SELF_PACK_MAX &&
           (weights <= machine.self_pack_max || product_rows <= machine.self_pack_rows);
}

/* net.h. Under the older rules the few-row products beat a stage's packed copies at 24-48
 * rows and lost to them elsewhere. Under the newer, with the forward turned around, W alone
 * (for dX, whose packed product beats OpenBLAS's) pays from 16 rows, both copies below
 * (bench/mp/pipe_ab.sh on both machines). */
enum { STAGE_SMALL_LO = 24, STAGE_SMALL_HI = 48, STAGE_FWD_PACK_BELOW = 16 };
int sh_dense_stage_packs(int rows)
{
    int both = SH_PACK_FORWARD | SH_PACK_BACKWARD;
    if (!sh_dense_rules_newer()) return rows >= STAGE_SMALL_LO && rows <= STAGE_SMALL_HI ? 0 : both;
    return rows < STAGE_FWD_PACK_BELOW ? both : SH_PACK_BACKWARD;
}

const int *sh_dense_rules_window(int dx)
{
    const int *set = dx ? sh_dense_small_dx_rows : sh_dense_small_fwd_rows;
    if (set[0] >= 0) return set;
    machine_rules();
    return dx ? machine.dx : machine.fwd;
}

int sh_dense_rules_fwd_fits(int rows, int inputs)
{
    if (sh_dense_small_fwd_rows[0] >= 0) return 1;
    machine_rules();
    return (size_t)rows * (size_t)inputs <= machine.fwd_max_floats;
}
