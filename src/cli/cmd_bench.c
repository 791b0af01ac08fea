/* cmd_bench.c — `shoal bench COLLECTIVE`: nccl-tests' measurement and columns for shoal's
 * collectives (size, count, type, redop, root; time, algbw, busbw, #wrong out of place and
 * in place; the average bus bandwidth line), or the same rows as JSON. Run under
 * `shoal launch -n N`, mpirun or srun.
 * Not here: the collectives (src/comm/).
 * Proved by tests/cli/test_bench_cli.c. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "cli/cli.h"
#include "comm/reduce.h"
#include "io/svg_plot.h"
#include "shoal/comm.h"

typedef enum { B_ALLREDUCE, B_BROADCAST, B_REDUCE, B_ALLGATHER, B_REDUCE_SCATTER, B_ALLTOALL, B_SENDRECV, B_COUNT } bench_kind;
static const char *const kind_names[B_COUNT] = {"allreduce", "broadcast", "reduce", "allgather",
                                                "reduce_scatter", "alltoall", "sendrecv"};

static void usage(FILE *f)
{
    fprintf(f,
            "usage: shoal bench allreduce|broadcast|reduce|allgather|reduce_scatter|alltoall|sendrecv\n"
            "                   [-b MIN] [-e MAX] [-f FACTOR] [-d DTYPE] [-o OP] [-r ROOT]\n"
            "                   [-n ITERS] [-w WARMUP] [-c 0|1] [--json] [--plot FILE.svg]\n\n"
            "Times a collective over every rank of the job (start it with `shoal launch -n N`,\n"
            "mpirun or srun) for sizes MIN, MIN*FACTOR, ... MAX bytes (suffixes K, M, G;\n"
            "defaults 8 to 64M, factor 2), as nccl-tests does: time is the mean over ITERS\n"
            "(default 20, after WARMUP=5) of the slowest rank; algbw = size / time; busbw =\n"
            "algbw x the collective's bus factor (allreduce 2(n-1)/n; reduce_scatter, allgather,\n"
            "alltoall (n-1)/n; others 1); #wrong counts wrong elements with -c 1 (default).\n"
            "DTYPE: int8 uint8 int32 int64 float16 bfloat16 float32 float64 (default float32);\n"
            "OP: sum prod min max avg (default sum). --json prints the rows as one JSON object.\n"
            "--plot FILE.svg draws busbw against size (out-of-place and in-place); `shoal plot\n"
            "--bench OUT...` draws several saved outputs (shoal's, the peers') on one chart.\n");
}

/* --plot: busbw by size, out-of-place [0] and in-place [1], kept by rank 0. */
typedef struct {
    size_t n, cap;
    double *nbytes, *busbw[2];
} plot_points;

static shoal_result keep_row(plot_points *p, double nbytes, const double busbw[2])
{
    if (p->n == p->cap) {
        size_t cap = p->cap ? 2 * p->cap : 64;
        double *a = realloc(p->nbytes, cap * sizeof *a);
        if (a) p->nbytes = a;
        double *b = realloc(p->busbw[0], cap * sizeof *b);
        if (b) p->busbw[0] = b;
        double *c = realloc(p->busbw[1], cap * sizeof *c);
        if (c) p->busbw[1] = c;
        if (!a || !b || !c) {
            fprintf(stderr, "shoal bench: out of memory for --plot; no chart\n");
            return SHOAL_ERR_NOMEM;
        }
        p->cap = cap;
    }
    p->nbytes[p->n] = nbytes;
    p->busbw[0][p->n] = busbw[0];
    p->busbw[1][p->n] = busbw[1];
    p->n++;
    return SHOAL_OK;
}

static void plot_points_fini(plot_points *p)
{
    free(p->nbytes);
    free(p->busbw[0]);
    free(p->busbw[1]);
}

static int parse_size(const char *s, size_t *out)
{
    char *end = NULL;
    double v = strtod(s, &end);
    if (!end || end == s || v < 0) return -1;
    double mult = 1;
    if (*end == 'K' || *end == 'k') mult = 1024, end++;
    else if (*end == 'M' || *end == 'm') mult = 1024.0 * 1024, end++;
    else if (*end == 'G' || *end == 'g') mult = 1024.0 * 1024 * 1024, end++;
    if (*end == 'B' || *end == 'b') end++;
    if (*end || !(v * mult < 1e15)) return -1; /* NaN, inf and sizes past a petabyte */
    *out = (size_t)(v * mult);
    return 0;
}

static const char *nccl_type(shoal_dtype dt)
{
    static const char *names[] = {"int8", "uint8", "int32", "int64", "half", "bfloat16", "float", "double"};
    return (unsigned)dt < SHOAL_DTYPE_COUNT ? names[dt] : "?";
}

static double bus_factor(bench_kind k, int n)
{
    switch (k) {
    case B_ALLREDUCE: return n > 1 ? 2.0 * (n - 1) / n : 0;
    case B_ALLGATHER:
    case B_REDUCE_SCATTER:
    case B_ALLTOALL: return n > 1 ? (double)(n - 1) / n : 0;
    default: return 1;
    }
}

/* nccl-tests' time column: fewer decimals as the time grows, so it keeps 7 characters. */
static void time_str(char *buf, size_t cap, double us)
{
    snprintf(buf, cap, us >= 10000 ? "%7.0f" : us >= 100 ? "%7.1f" : "%7.2f", us);
}

static double val(size_t i, int rank, size_t salt);

static void fill(void *buf, size_t count, shoal_dtype dt, int rank, size_t salt)
{
    for (size_t i = 0; i < count; i++) sh_reduce_elem_put(buf, i, dt, val(i, rank, salt));
}

static double val(size_t i, int rank, size_t salt) { return (double)((i * 7 + (size_t)rank * 3 + salt) % 3) + 1; }

static double expect_reduce(size_t i, int n, shoal_op op, shoal_dtype dt, size_t salt)
{
    double acc = val(i, 0, salt);
    for (int r = 1; r < n; r++) {
        double v = val(i, r, salt);
        if (op == SHOAL_PROD) acc *= v;
        else if (op == SHOAL_MIN) acc = v < acc ? v : acc;
        else if (op == SHOAL_MAX) acc = v > acc ? v : acc;
        else acc += v;
    }
    if (op == SHOAL_AVG) {
        int is_int = dt <= SHOAL_INT64;
        acc = is_int ? (double)((int64_t)acc / n) : acc / n;
        if (dt == SHOAL_FLOAT16) acc = sh_f16_to_f32(sh_f32_to_f16((float)acc));
        if (dt == SHOAL_BFLOAT16) acc = sh_bf16_to_f32(sh_f32_to_bf16((float)acc));
        if (dt == SHOAL_FLOAT32) acc = (float)acc;
    }
    if (dt == SHOAL_INT8) acc = (double)(int8_t)(int64_t)acc;
    if (dt == SHOAL_UINT8) acc = (double)(uint8_t)(int64_t)acc;
    if (dt == SHOAL_FLOAT16) acc = sh_f16_to_f32(sh_f32_to_f16((float)acc));
    if (dt == SHOAL_BFLOAT16) acc = sh_bf16_to_f32(sh_f32_to_bf16((float)acc));
    return acc;
}

typedef struct {
    bench_kind kind;
    shoal_dtype dt;
    shoal_op op;
    int root;
} bench_cfg;

/* One call of the collective. count: elements per rank block (see sizes below). */
static shoal_result call(shoal_comm *c, const bench_cfg *b, const void *send, void *recv, size_t count)
{
    int r = shoal_comm_rank(c), n = shoal_comm_world(c);
    switch (b->kind) {
    case B_ALLREDUCE: return shoal_allreduce(c, send, recv, count, b->dt, b->op);
    case B_BROADCAST: return shoal_broadcast(c, send, recv, count, b->dt, b->root);
    case B_REDUCE: return shoal_reduce(c, send, recv, count, b->dt, b->op, b->root);
    case B_ALLGATHER: return shoal_allgather(c, send, recv, count, b->dt);
    case B_REDUCE_SCATTER: return shoal_reduce_scatter(c, send, recv, count, b->dt, b->op);
    case B_ALLTOALL: return shoal_alltoall(c, send, recv, count, b->dt);
    case B_SENDRECV: {
        if (n == 1) {
            if (send != recv) memcpy(recv, send, count * shoal_dtype_nbytes(b->dt));
            return SHOAL_OK;
        }
        /* the send copies its payload at start, so in place is safe when it goes first */
        shoal_request *s, *q;
        shoal_result rc = shoal_send_start(c, send, count, b->dt, (r + 1) % n, 1, &s);
        if (rc != SHOAL_OK) return rc;
        rc = shoal_recv_start(c, recv, count, b->dt, (r + n - 1) % n, 1, &q);
        if (rc != SHOAL_OK) {
            shoal_wait(s);
            return rc;
        }
        shoal_result a = shoal_wait(s), d = shoal_wait(q);
        return a != SHOAL_OK ? a : d;
    }
    default: return SHOAL_ERR_INVALID;
    }
}

/* Wrong elements after one checked call (data freshly filled). */
static long check(shoal_comm *c, const bench_cfg *b, const void *send, const void *recv, size_t count,
                  size_t salt)
{
    int r = shoal_comm_rank(c), n = shoal_comm_world(c);
    long wrong = 0;
    (void)send;
    switch (b->kind) {
    case B_ALLREDUCE:
        for (size_t i = 0; i < count; i++) wrong += sh_reduce_elem_get(recv, i, b->dt) != expect_reduce(i, n, b->op, b->dt, salt);
        break;
    case B_BROADCAST:
        for (size_t i = 0; i < count; i++) wrong += sh_reduce_elem_get(recv, i, b->dt) != val(i, b->root, salt);
        break;
    case B_REDUCE:
        if (r == b->root)
            for (size_t i = 0; i < count; i++) wrong += sh_reduce_elem_get(recv, i, b->dt) != expect_reduce(i, n, b->op, b->dt, salt);
        break;
    case B_ALLGATHER:
        for (size_t i = 0; i < count * (size_t)n; i++) wrong += sh_reduce_elem_get(recv, i, b->dt) != val(i % count, (int)(i / count), salt);
        break;
    case B_REDUCE_SCATTER:
        for (size_t i = 0; i < count; i++)
            wrong += sh_reduce_elem_get(recv, i, b->dt) != expect_reduce((size_t)r * count + i, n, b->op, b->dt, salt);
        break;
    case B_ALLTOALL:
        for (size_t i = 0; i < count * (size_t)n; i++) {
            size_t p = i / count, j = (size_t)r * count + i % count;
            wrong += sh_reduce_elem_get(recv, i, b->dt) != val(j, (int)p, salt);
        }
        break;
    case B_SENDRECV:
        for (size_t i = 0; i < count; i++) wrong += sh_reduce_elem_get(recv, i, b->dt) != val(i, (r + n - 1) % n, salt);
        break;
    default: break;
    }
    return wrong;
}

int sh_cmd_bench(int argc, char **argv)
{
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? SH_EXIT_USAGE : SH_EXIT_OK;
    }
    bench_cfg b = {B_COUNT, SHOAL_FLOAT32, SHOAL_SUM, 0};
    for (int k = 0; k < B_COUNT; k++)
        if (!strcmp(argv[1], kind_names[k])) b.kind = (bench_kind)k;
    if (!strcmp(argv[1], "all_reduce")) b.kind = B_ALLREDUCE;
    if (b.kind == B_COUNT) return sh_cli_usage_error("bench", "unknown collective \"%s\"", argv[1]);
    size_t min_nbytes = 8, max_nbytes = 64u << 20;
    double factor = 2;
    long iters = 20, warmup = 5, do_check = 1;
    int json = 0;
    const char *plot_path = NULL;
    plot_points pts = {0};
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--json")) {
            json = 1;
            continue;
        }
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return SH_EXIT_OK;
        }
        if (i + 1 >= argc) return sh_cli_usage_error("bench", "%s needs a value", a);
        const char *v = argv[++i];
        char *end = NULL;
        if (!strcmp(a, "--plot")) {
            if (!sh_svg_path_ok(v)) return sh_cli_usage_error("bench", "--plot %s: charts are written as SVG; name the file *.svg", v);
            plot_path = v;
        } else if (!strcmp(a, "-b") || !strcmp(a, "--minbytes")) {
            if (parse_size(v, &min_nbytes)) return sh_cli_usage_error("bench", "-b: bad size \"%s\"", v);
        } else if (!strcmp(a, "-e") || !strcmp(a, "--maxbytes")) {
            if (parse_size(v, &max_nbytes)) return sh_cli_usage_error("bench", "-e: bad size \"%s\"", v);
        } else if (!strcmp(a, "-f") || !strcmp(a, "--stepfactor")) {
            factor = strtod(v, &end);
            if (!end || *end || factor <= 1) return sh_cli_usage_error("bench", "-f takes a factor > 1, not \"%s\"", v);
        } else if (!strcmp(a, "-d") || !strcmp(a, "--datatype")) {
            if (shoal_dtype_parse(v, &b.dt) != SHOAL_OK) return sh_cli_usage_error("bench", "%s", shoal_last_error_message());
        } else if (!strcmp(a, "-o") || !strcmp(a, "--op")) {
            if (shoal_op_parse(v, &b.op) != SHOAL_OK) return sh_cli_usage_error("bench", "%s", shoal_last_error_message());
        } else if (!strcmp(a, "-r") || !strcmp(a, "--root")) {
            b.root = (int)strtol(v, &end, 10);
            if (!end || *end || b.root < 0) return sh_cli_usage_error("bench", "-r takes a rank, not \"%s\"", v);
        } else if (!strcmp(a, "-n") || !strcmp(a, "--iters")) {
            iters = strtol(v, &end, 10);
            if (!end || *end || iters < 1) return sh_cli_usage_error("bench", "-n takes a count >= 1, not \"%s\"", v);
        } else if (!strcmp(a, "-w") || !strcmp(a, "--warmup_iters")) {
            warmup = strtol(v, &end, 10);
            if (!end || *end || warmup < 0) return sh_cli_usage_error("bench", "-w takes a count >= 0, not \"%s\"", v);
        } else if (!strcmp(a, "-c") || !strcmp(a, "--check")) {
            do_check = strtol(v, &end, 10);
            if (!end || *end) return sh_cli_usage_error("bench", "-c takes 0 or 1, not \"%s\"", v);
        } else {
            return sh_cli_usage_error("bench", "unknown option %s", a);
        }
    }
    if (min_nbytes > max_nbytes) return sh_cli_usage_error("bench", "-b is larger than -e");
    shoal_comm_opts co;
    shoal_comm_opts_default(&co);
    shoal_comm *c = NULL;
    shoal_result rc = shoal_comm_create(&co, &c);
    if (rc != SHOAL_OK) return sh_cli_fail(rc);
    int r = shoal_comm_rank(c), n = shoal_comm_world(c);
    if (b.root >= n) {
        shoal_comm_destroy(c);
        return sh_cli_usage_error("bench", "-r %d: the job has only %d ranks", b.root, n);
    }
    int rooted = b.kind == B_BROADCAST || b.kind == B_REDUCE;
    int reduces = b.kind == B_ALLREDUCE || b.kind == B_REDUCE || b.kind == B_REDUCE_SCATTER;
    int blocked = b.kind == B_ALLGATHER || b.kind == B_REDUCE_SCATTER || b.kind == B_ALLTOALL;
    size_t es = shoal_dtype_nbytes(b.dt);
    size_t max_elems = max_nbytes / es + (size_t)n;
    unsigned char *send = NULL, *recv = NULL;
    if (sh_alloc_aligned(max_elems * es + 64, (void **)&send) != SHOAL_OK ||
        sh_alloc_aligned(max_elems * es + 64, (void **)&recv) != SHOAL_OK) {
        shoal_comm_destroy(c);
        return sh_cli_fail(SHOAL_ERR_NOMEM);
    }
    if (r == 0) {
        if (json) {
            printf("{\"collective\": \"%s\", \"ranks\": %d, \"type\": \"%s\", \"redop\": \"%s\", \"rows\": [",
                   kind_names[b.kind], n, shoal_dtype_name(b.dt), reduces ? shoal_op_name(b.op) : "none");
        } else {
            printf("# shoal bench %s: %d ranks, %d hosts; iters %ld, warmup %ld, check %ld\n", kind_names[b.kind],
                   n, shoal_comm_nhosts(c), iters, warmup, do_check);
            printf("#\n#                                                              out-of-place                       in-place          \n");
            printf("#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong\n");
            printf("#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)       \n");
        }
        fflush(stdout);
    }
    double busbw_sum = 0;
    int rows = 0;
    long total_wrong = 0;
    for (size_t nbytes = min_nbytes;; ) {
        size_t total = nbytes / es;                 /* nccl-tests: size is the whole buffer */
        size_t count = blocked ? total / (size_t)n : total;
        size_t shown = blocked ? count * (size_t)n : count; /* the count column is per rank, as there */
        double t_us[2] = {0, 0};
        long wrong[2] = {0, 0};
        for (int inplace = 0; inplace < 2 && rc == SHOAL_OK; inplace++) {
            size_t send_n = b.kind == B_REDUCE_SCATTER || b.kind == B_ALLTOALL ? count * (size_t)n : count;
            const void *sp = send;
            void *rp = recv;
            if (inplace) {
                sp = b.kind == B_ALLGATHER ? recv + (size_t)r * count * es : recv;
                rp = recv;
            }
            for (long w = 0; w < warmup && rc == SHOAL_OK; w++) rc = call(c, &b, sp, rp, count);
            if (rc == SHOAL_OK) rc = shoal_barrier(c);
            uint64_t t0 = sh_now_ns();
            for (long it = 0; it < iters && rc == SHOAL_OK; it++) rc = call(c, &b, sp, rp, count);
            double us = (double)(sh_now_ns() - t0) / 1e3 / (double)iters;
            if (rc == SHOAL_OK) rc = shoal_allreduce(c, &us, &t_us[inplace], 1, SHOAL_FLOAT64, SHOAL_MAX);
            if (rc == SHOAL_OK && do_check) {
                size_t salt = nbytes % 3;
                unsigned char *fill_at = inplace ? (b.kind == B_ALLGATHER ? recv + (size_t)r * count * es : recv) : send;
                fill(fill_at, send_n, b.dt, r, salt);
                rc = call(c, &b, sp, rp, count);
                long wr = rc == SHOAL_OK ? check(c, &b, sp, rp, count, salt) : 0;
                if (rc == SHOAL_OK) rc = shoal_allreduce(c, &wr, &wrong[inplace], 1, SHOAL_INT64, SHOAL_SUM);
            }
        }
        if (rc != SHOAL_OK) break;
        total_wrong += wrong[0] + wrong[1];
        size_t row_nbytes = shown * es;
        double algbw[2], busbw[2];
        for (int k = 0; k < 2; k++) {
            algbw[k] = t_us[k] > 0 ? (double)row_nbytes / (t_us[k] * 1e-6) / 1e9 : 0;
            busbw[k] = algbw[k] * bus_factor(b.kind, n);
        }
        busbw_sum += busbw[0] + busbw[1]; /* nccl-tests averages both placements */
        if (plot_path && r == 0 && keep_row(&pts, (double)row_nbytes, busbw) != SHOAL_OK) plot_path = NULL;
        rows++;
        if (r == 0) {
            if (json) {
                printf("%s\n  {\"size\": %zu, \"count\": %zu, \"type\": \"%s\", \"redop\": \"%s\", \"root\": %d, "
                       "\"time_us\": %.3f, \"algbw_gb_s\": %.4f, \"busbw_gb_s\": %.4f, \"wrong\": %ld, "
                       "\"inplace_time_us\": %.3f, \"inplace_algbw_gb_s\": %.4f, \"inplace_busbw_gb_s\": %.4f, "
                       "\"inplace_wrong\": %ld}",
                       rows > 1 ? "," : "", row_nbytes, count, shoal_dtype_name(b.dt),
                       reduces ? shoal_op_name(b.op) : "none", rooted ? b.root : -1, t_us[0], algbw[0], busbw[0],
                       do_check ? wrong[0] : -1L, t_us[1], algbw[1], busbw[1], do_check ? wrong[1] : -1L);
            } else {
                char w0[16] = "N/A", w1[16] = "N/A";
                if (do_check) {
                    snprintf(w0, sizeof w0, "%ld", wrong[0]);
                    snprintf(w1, sizeof w1, "%ld", wrong[1]);
                }
                char ts[2][32];
                for (int k = 0; k < 2; k++) time_str(ts[k], sizeof ts[k], t_us[k]);
                printf("%12zu  %12zu  %8s  %6s  %6d  %7s  %6.2f  %6.2f  %5s  %7s  %6.2f  %6.2f  %5s\n",
                       row_nbytes, count, nccl_type(b.dt), reduces ? shoal_op_name(b.op) : "none",
                       rooted ? b.root : -1, ts[0], algbw[0], busbw[0], w0, ts[1], algbw[1], busbw[1], w1);
            }
            fflush(stdout);
        }
        if (nbytes >= max_nbytes) break;
        size_t next = (size_t)((double)nbytes * factor);
        nbytes = next > nbytes ? next : nbytes + 1;
        if (nbytes > max_nbytes) nbytes = max_nbytes;
    }
    if (rc != SHOAL_OK) {
        /* a failed collective's message already starts "rank R: " */
        const char *m = shoal_last_error_message();
        char pre[32];
        int pn = snprintf(pre, sizeof pre, "rank %d: ", r);
        fprintf(stderr, "shoal bench: %s%s\n", strncmp(m, pre, (size_t)pn) ? pre : "", m);
        plot_points_fini(&pts);
        shoal_comm_destroy(c);
        sh_free_aligned(send);
        sh_free_aligned(recv);
        return SH_EXIT_FAIL;
    }
    if (r == 0 && plot_path) {
        char title[128];
        snprintf(title, sizeof title, "shoal bench %s: %d ranks, %s %s", kind_names[b.kind], n,
                 shoal_dtype_name(b.dt), reduces ? shoal_op_name(b.op) : "");
        sh_plot_series se[2] = {{"out-of-place", pts.nbytes, pts.busbw[0], pts.n},
                                {"in-place", pts.nbytes, pts.busbw[1], pts.n}};
        sh_plot_panel p = {title, "message size", "busbw (GB/s)", se, 2, 1, 1};
        shoal_result prc = sh_svg_line_chart(plot_path, NULL, &p, 1);
        if (prc != SHOAL_OK) fprintf(stderr, "shoal bench: %s\n", shoal_last_error_message());
        else fprintf(stderr, "shoal bench: wrote %s\n", plot_path);
    }
    plot_points_fini(&pts);
    if (r == 0) {
        double avg = rows ? busbw_sum / (2.0 * rows) : 0;
        if (json) printf("\n], \"wrong\": %ld, \"avg_busbw_gb_s\": %.4f}\n", total_wrong, avg);
        else {
            printf("# Out of bounds values : %ld %s\n", total_wrong, total_wrong ? "FAILED" : "OK");
            printf("# Avg bus bandwidth    : %g \n#\n", avg);
        }
    }
    shoal_comm_destroy(c);
    sh_free_aligned(send);
    sh_free_aligned(recv);
    return total_wrong ? SH_EXIT_FAIL : SH_EXIT_OK;
}
