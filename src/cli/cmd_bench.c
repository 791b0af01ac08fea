/* cmd_bench.c — `shoal bench COLLECTIVE`: nccl-tests' measurement and columns for shoal's
 * collectives (size, count, type, redop, root; time, algbw, busbw, #wrong out of place and
 * in place; the average bus bandwidth line), or the same rows as JSON. -n N starts N ranks
 * here (as shoal train -n N); under `shoal launch`, mpirun or srun the job's ranks run it. Rank
 * 0's table or JSON is the job's stdout, without the launcher's "[rank k] ".
 * Not here: the collectives (src/comm/), starting ranks (launch.c).
 * Proved by tests/cli/test_bench_cli.c. */
#include <limits.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/err.h"
#include "base/util.h"
#include "cli/cli.h"
#include "cli/flags.h"
#include "cli/launch.h"
#include "comm/reduce.h"
#include "io/svg_plot.h"
#include "shoal/comm.h"

typedef enum { B_ALLREDUCE, B_BROADCAST, B_REDUCE, B_ALLGATHER, B_REDUCE_SCATTER, B_ALLTOALL, B_SENDRECV, B_COUNT } bench_kind;
static const char *const kind_names[B_COUNT] = {"allreduce", "broadcast", "reduce", "allgather",
                                                "reduce_scatter", "alltoall", "sendrecv"};

static const char usage_text[] =
    "usage: shoal bench allreduce|broadcast|reduce|allgather|reduce_scatter|alltoall|sendrecv\n"
    "                   [-n RANKS] [-b MIN] [-e MAX] [-f FACTOR] [-d DTYPE] [-o OP] [-r ROOT]\n"
    "                   [--iters ITERS] [-w WARMUP] [-c 0|1] [--json] [--plot FILE.svg]\n\n"
    "Times a collective over every rank of the job (-n N starts N ranks here; or start it\n"
    "with shoal launch, mpirun or srun) for sizes MIN, MIN*FACTOR, ... MAX bytes, as\n"
    "nccl-tests does: time is the mean over ITERS of the slowest rank; algbw = size / time;\n"
    "busbw = algbw x the collective's bus factor (allreduce 2(n-1)/n; reduce_scatter,\n"
    "allgather, alltoall (n-1)/n; others 1); #wrong counts wrong elements. nccl-tests' -n\n"
    "(iterations) is --iters here: -n is the ranks, as in shoal train and shoal launch.\n";

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

typedef struct {
    bench_cfg b;
    int nranks;                 /* -n: ranks to start here; 0: the job's */
    const char *collective;
    size_t min_nbytes, max_nbytes;
    double factor;
    int iters, warmup, do_check, json;
    const char *plot_path;
} bench_opts;

static int set_size(void *dst, const sh_flag *f, const char *spelled, const char *v, const char *cmd)
{
    if (parse_size(v, (size_t *)((char *)dst + f->offset)))
        return sh_cli_usage_error(cmd, "%s: bad size \"%s\"", spelled, v);
    return 0;
}

static int set_factor(void *dst, const sh_flag *f, const char *spelled, const char *v, const char *cmd)
{
    bench_opts *o = dst;
    char *end = NULL;
    o->factor = strtod(v, &end);
    if (!end || *end || !(o->factor > 1)) return sh_cli_usage_error(cmd, "%s takes a factor > 1, not \"%s\"", spelled, v);
    return 0;
}

static int set_dtype(void *dst, const sh_flag *f, const char *spelled, const char *v, const char *cmd)
{
    bench_opts *o = dst;
    if (shoal_dtype_parse(v, &o->b.dt) != SHOAL_OK) return sh_cli_usage_error(cmd, "%s", shoal_last_error_message());
    return 0;
}

static int set_op(void *dst, const sh_flag *f, const char *spelled, const char *v, const char *cmd)
{
    bench_opts *o = dst;
    if (shoal_op_parse(v, &o->b.op) != SHOAL_OK) return sh_cli_usage_error(cmd, "%s", shoal_last_error_message());
    return 0;
}

static int set_plot(void *dst, const sh_flag *f, const char *spelled, const char *v, const char *cmd)
{
    bench_opts *o = dst;
    if (!sh_svg_path_ok(v))
        return sh_cli_usage_error(cmd, "%s %s: charts are written as SVG; name the file *.svg", spelled, v);
    o->plot_path = v;
    return 0;
}

/* The collective: the one argument that is not a flag. */
static int set_collective(void *dst, const char *arg, const char *cmd)
{
    bench_opts *o = dst;
    if (o->collective) return sh_cli_usage_error(cmd, "unexpected argument \"%s\"", arg);
    o->collective = arg;
    for (int k = 0; k < B_COUNT; k++)
        if (!strcmp(arg, kind_names[k])) o->b.kind = (bench_kind)k;
    if (!strcmp(arg, "all_reduce")) o->b.kind = B_ALLREDUCE;
    if (o->b.kind == B_COUNT) return sh_cli_usage_error(cmd, "unknown collective \"%s\"", arg);
    return 0;
}

#define AT(field) offsetof(bench_opts, field)

static const sh_flag flags[] = {
    {"nranks", 'n', "RANKS", SH_FLAG_INT, AT(nranks), 1, 4096, "Ranks",
     "start RANKS ranks on this machine (as shoal train -n); under shoal launch, mpirun or srun the job's ranks "
     "run it", NULL, "takes a rank count from 1 to 4096", NULL},
    {"minbytes", 'b', "MIN", SH_FLAG_CALL, AT(min_nbytes), 0, 0, "Sizes",
     "the smallest message in bytes, suffixes K, M, G (default 8)", "a value", NULL, set_size},
    {"maxbytes", 'e', "MAX", SH_FLAG_CALL, AT(max_nbytes), 0, 0, "Sizes", "the largest (default 64M)", "a value",
     NULL, set_size},
    {"stepfactor", 'f', "FACTOR", SH_FLAG_CALL, 0, 0, 0, "Sizes", "each size is the last times FACTOR (default 2)",
     "a value", NULL, set_factor},
    {"datatype", 'd', "DTYPE", SH_FLAG_CALL, 0, 0, 0, "The collective",
     "int8 uint8 int32 int64 float16 bfloat16 float32 float64 (default float32)", "a value", NULL, set_dtype},
    {"op", 'o', "OP", SH_FLAG_CALL, 0, 0, 0, "The collective", "sum prod min max avg (default sum)", "a value",
     NULL, set_op},
    {"root", 'r', "ROOT", SH_FLAG_INT, AT(b.root), 0, INT_MAX, "The collective",
     "the root rank of broadcast and reduce (default 0)", NULL, "takes a rank", NULL},
    {"iters", 0, "ITERS", SH_FLAG_INT, AT(iters), 1, INT_MAX, "Measuring",
     "timed calls per size (default 20; nccl-tests' -n)", NULL, "takes a count >= 1", NULL},
    {"warmup_iters", 'w', "WARMUP", SH_FLAG_INT, AT(warmup), 0, INT_MAX, "Measuring",
     "untimed calls before them (default 5)", NULL, "takes a count >= 0", NULL},
    {"check", 'c', "0|1", SH_FLAG_INT, AT(do_check), 0, 1, "Measuring",
     "1 (default): count the wrong elements of one more call per size", NULL, "takes 0 or 1", NULL},
    {"json", 0, NULL, SH_FLAG_SWITCH, AT(json), 0, 0, "Output", "print the rows as one JSON object", NULL, NULL,
     NULL},
    {"plot", 0, "FILE.svg", SH_FLAG_CALL, 0, 0, 0, "Output",
     "draw busbw against size (out-of-place and in-place); `shoal plot --bench OUT...` draws several saved "
     "outputs (shoal's, the peers') on one chart", "a value", NULL, set_plot},
};

static const sh_flag_table table = {
    .cmd = "bench", .usage = usage_text, .flags = flags, .nflags = sizeof flags / sizeof flags[0],
    .bare_unknown = 1, .positional = set_collective,
};

/* The job's buffers and where this rank stands. */
typedef struct {
    shoal_comm *c;
    int rank, world;
    size_t es;                  /* bytes per element */
    unsigned char *send, *recv; /* max_nbytes and a block per rank, 64 bytes spare */
} bench_job;

/* One size: nccl-tests' columns, out of place [0] and in place [1]. */
typedef struct {
    size_t nbytes, count;       /* the whole buffer; elements per rank block */
    double t_us[2], algbw[2], busbw[2];
    long wrong[2];
} bench_row;

static shoal_result measure_one(const bench_opts *o, const bench_job *j, size_t nbytes, int inplace,
                                size_t count, bench_row *row)
{
    const bench_cfg *b = &o->b;
    size_t send_n = b->kind == B_REDUCE_SCATTER || b->kind == B_ALLTOALL ? count * (size_t)j->world : count;
    unsigned char *own = b->kind == B_ALLGATHER ? j->recv + (size_t)j->rank * count * j->es : j->recv;
    const void *sp = inplace ? own : j->send;
    void *rp = j->recv;
    shoal_result rc = SHOAL_OK;
    for (int w = 0; w < o->warmup && rc == SHOAL_OK; w++) rc = call(j->c, b, sp, rp, count);
    if (rc == SHOAL_OK) rc = shoal_barrier(j->c);
    uint64_t t0 = sh_now_ns();
    for (int it = 0; it < o->iters && rc == SHOAL_OK; it++) rc = call(j->c, b, sp, rp, count);
    double us = (double)(sh_now_ns() - t0) / 1e3 / (double)o->iters;
    if (rc == SHOAL_OK) rc = shoal_allreduce(j->c, &us, &row->t_us[inplace], 1, SHOAL_FLOAT64, SHOAL_MAX);
    if (rc != SHOAL_OK || !o->do_check) return rc;
    size_t salt = nbytes % 3;
    fill(inplace ? own : j->send, send_n, b->dt, j->rank, salt);
    rc = call(j->c, b, sp, rp, count);
    long wr = rc == SHOAL_OK ? check(j->c, b, sp, rp, count, salt) : 0;
    if (rc == SHOAL_OK) rc = shoal_allreduce(j->c, &wr, &row->wrong[inplace], 1, SHOAL_INT64, SHOAL_SUM);
    return rc;
}

static shoal_result measure(const bench_opts *o, const bench_job *j, size_t nbytes, bench_row *row)
{
    bench_kind k = o->b.kind;
    int blocked = k == B_ALLGATHER || k == B_REDUCE_SCATTER || k == B_ALLTOALL;
    size_t total = nbytes / j->es; /* nccl-tests: size is the whole buffer */
    memset(row, 0, sizeof *row);
    row->count = blocked ? total / (size_t)j->world : total;
    size_t shown = blocked ? row->count * (size_t)j->world : row->count; /* the count column is per rank */
    for (int inplace = 0; inplace < 2; inplace++)
        SH_TRY(measure_one(o, j, nbytes, inplace, row->count, row));
    row->nbytes = shown * j->es;
    for (int p = 0; p < 2; p++) {
        row->algbw[p] = row->t_us[p] > 0 ? (double)row->nbytes / (row->t_us[p] * 1e-6) / 1e9 : 0;
        row->busbw[p] = row->algbw[p] * bus_factor(k, j->world);
    }
    return SHOAL_OK;
}

static int reduces(bench_kind k) { return k == B_ALLREDUCE || k == B_REDUCE || k == B_REDUCE_SCATTER; }
static int rooted(bench_kind k) { return k == B_BROADCAST || k == B_REDUCE; }

static void print_header(const bench_opts *o, const bench_job *j)
{
    const bench_cfg *b = &o->b;
    if (o->json) {
        printf("{\"collective\": \"%s\", \"ranks\": %d, \"type\": \"%s\", \"redop\": \"%s\", \"rows\": [",
               kind_names[b->kind], j->world, shoal_dtype_name(b->dt), reduces(b->kind) ? shoal_op_name(b->op) : "none");
    } else {
        printf("# shoal bench %s: %d ranks, %d hosts; iters %d, warmup %d, check %d\n", kind_names[b->kind],
               j->world, shoal_comm_nhosts(j->c), o->iters, o->warmup, o->do_check);
        printf("#\n#                                                              out-of-place                       in-place          \n");
        printf("#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong\n");
        printf("#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)       \n");
    }
    fflush(stdout);
}

static void print_row(const bench_opts *o, const bench_row *r, int nrow)
{
    const bench_cfg *b = &o->b;
    const char *redop = reduces(b->kind) ? shoal_op_name(b->op) : "none";
    int root = rooted(b->kind) ? b->root : -1;
    if (o->json) {
        printf("%s\n  {\"size\": %zu, \"count\": %zu, \"type\": \"%s\", \"redop\": \"%s\", \"root\": %d, "
               "\"time_us\": %.3f, \"algbw_gb_s\": %.4f, \"busbw_gb_s\": %.4f, \"wrong\": %ld, "
               "\"inplace_time_us\": %.3f, \"inplace_algbw_gb_s\": %.4f, \"inplace_busbw_gb_s\": %.4f, "
               "\"inplace_wrong\": %ld}",
               nrow > 1 ? "," : "", r->nbytes, r->count, shoal_dtype_name(b->dt), redop, root, r->t_us[0],
               r->algbw[0], r->busbw[0], o->do_check ? r->wrong[0] : -1L, r->t_us[1], r->algbw[1], r->busbw[1],
               o->do_check ? r->wrong[1] : -1L);
    } else {
        char w[2][16] = {"N/A", "N/A"}, ts[2][32];
        for (int p = 0; p < 2; p++) {
            if (o->do_check) snprintf(w[p], sizeof w[p], "%ld", r->wrong[p]);
            time_str(ts[p], sizeof ts[p], r->t_us[p]);
        }
        printf("%12zu  %12zu  %8s  %6s  %6d  %7s  %6.2f  %6.2f  %5s  %7s  %6.2f  %6.2f  %5s\n", r->nbytes, r->count,
               nccl_type(b->dt), redop, root, ts[0], r->algbw[0], r->busbw[0], w[0], ts[1], r->algbw[1], r->busbw[1],
               w[1]);
    }
    fflush(stdout);
}

static void draw_plot(const bench_opts *o, const bench_job *j, const plot_points *pts)
{
    char title[128];
    snprintf(title, sizeof title, "shoal bench %s: %d ranks, %s %s", kind_names[o->b.kind], j->world,
             shoal_dtype_name(o->b.dt), reduces(o->b.kind) ? shoal_op_name(o->b.op) : "");
    sh_plot_series se[2] = {{"out-of-place", pts->nbytes, pts->busbw[0], pts->n},
                            {"in-place", pts->nbytes, pts->busbw[1], pts->n}};
    sh_plot_panel p = {title, "message size", "busbw (GB/s)", se, 2, 1, 1};
    shoal_result prc = sh_svg_line_chart(o->plot_path, NULL, &p, 1);
    if (prc != SHOAL_OK) fprintf(stderr, "shoal bench: %s\n", shoal_last_error_message());
    else fprintf(stderr, "shoal bench: wrote %s\n", o->plot_path);
}

/* Every size from min to max; rank 0 prints. Returns the exit code. */
static int run_sizes(const bench_opts *o, const bench_job *j)
{
    double busbw_sum = 0;
    int rows = 0, plotting = o->plot_path && j->rank == 0;
    long total_wrong = 0;
    plot_points pts = {0};
    shoal_result rc = SHOAL_OK;
    if (j->rank == 0) {
        sh_cli_stdout_is_result(); /* the table or document as written, also under shoal launch */
        print_header(o, j);
    }
    for (size_t nbytes = o->min_nbytes;;) {
        bench_row row;
        rc = measure(o, j, nbytes, &row);
        if (rc != SHOAL_OK) break;
        total_wrong += row.wrong[0] + row.wrong[1];
        busbw_sum += row.busbw[0] + row.busbw[1]; /* nccl-tests averages both placements */
        if (plotting && keep_row(&pts, (double)row.nbytes, row.busbw) != SHOAL_OK) plotting = 0;
        rows++;
        if (j->rank == 0) print_row(o, &row, rows);
        if (nbytes >= o->max_nbytes) break;
        size_t next = (size_t)((double)nbytes * o->factor);
        nbytes = next > nbytes ? next : nbytes + 1;
        if (nbytes > o->max_nbytes) nbytes = o->max_nbytes;
    }
    if (rc != SHOAL_OK) { /* a failed collective's message already starts "rank R: " */
        const char *m = shoal_last_error_message();
        char pre[32];
        int pn = snprintf(pre, sizeof pre, "rank %d: ", j->rank);
        fprintf(stderr, "shoal bench: %s%s\n", strncmp(m, pre, (size_t)pn) ? pre : "", m);
        plot_points_fini(&pts);
        return SH_EXIT_FAIL;
    }
    if (plotting) draw_plot(o, j, &pts);
    plot_points_fini(&pts);
    double avg = rows ? busbw_sum / (2.0 * rows) : 0;
    if (j->rank == 0 && o->json) {
        printf("\n], \"wrong\": %ld, \"avg_busbw_gb_s\": %.4f}\n", total_wrong, avg);
    } else if (j->rank == 0) {
        printf("# Out of bounds values : %ld %s\n", total_wrong, total_wrong ? "FAILED" : "OK");
        printf("# Avg bus bandwidth    : %g \n#\n", avg);
    }
    return total_wrong ? SH_EXIT_FAIL : SH_EXIT_OK;
}

/* -n N outside a job: N ranks of this same command without -n, through the launcher. */
static int relaunch(int argc, char **argv, int nranks)
{
    char self[4096];
    ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
    char **args = calloc((size_t)argc + 2, sizeof *args);
    if (len <= 0 || !args) {
        free(args);
        fprintf(stderr, "shoal bench: cannot find its own executable to start the ranks\n");
        return SH_EXIT_FAIL;
    }
    self[len] = 0;
    int k = 0;
    args[k++] = self;
    args[k++] = "bench";
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-n") || !strcmp(argv[i], "--nranks")) {
            i++;
            continue;
        }
        if (strncmp(argv[i], "-n=", 3) && strncmp(argv[i], "--nranks=", 9)) args[k++] = argv[i];
    }
    sh_launch_opts lo = {.nranks = nranks, .grace_ms = 5000, .tag = "bench"};
    int code = sh_launch_run(&lo, args);
    free(args);
    return code;
}

int sh_cmd_bench(int argc, char **argv)
{
    if (argc < 2) {
        sh_flags_help(&table, stderr);
        return SH_EXIT_USAGE;
    }
    bench_opts o = {.b = {B_COUNT, SHOAL_FLOAT32, SHOAL_SUM, 0}, .min_nbytes = 8, .max_nbytes = 64u << 20,
                    .factor = 2, .iters = 20, .warmup = 5, .do_check = 1};
    int code = sh_flags_parse(&table, argc, argv, 1, &o, NULL);
    if (code) return code == SH_FLAGS_HELP ? SH_EXIT_OK : code;
    if (!o.collective) return sh_cli_usage_error("bench", "name the collective: allreduce, broadcast, ...");
    if (o.min_nbytes > o.max_nbytes) return sh_cli_usage_error("bench", "-b is larger than -e");
    shoal_job_env e;
    int in_job = shoal_job_env_read(&e) == SHOAL_OK && e.world > 1;
    if (o.nranks && !in_job) return relaunch(argc, argv, o.nranks);
    if (o.nranks && o.nranks != e.world)
        return sh_cli_usage_error("bench", "-n %d asks for %d ranks but the job has %d; -n is the ranks (as in shoal "
                                  "train), the timed calls per size are --iters (nccl-tests' -n)", o.nranks, o.nranks,
                                  e.world);
    shoal_comm_opts co;
    shoal_comm_opts_default(&co);
    bench_job j = {0};
    shoal_result rc = shoal_comm_create(&co, &j.c);
    if (rc != SHOAL_OK) return sh_cli_fail(rc);
    j.rank = shoal_comm_rank(j.c);
    j.world = shoal_comm_world(j.c);
    j.es = shoal_dtype_nbytes(o.b.dt);
    if (o.b.root >= j.world) {
        shoal_comm_destroy(j.c);
        return sh_cli_usage_error("bench", "-r %d: the job has only %d ranks", o.b.root, j.world);
    }
    size_t max_elems = o.max_nbytes / j.es + (size_t)j.world;
    if (sh_alloc_aligned(max_elems * j.es + 64, (void **)&j.send) != SHOAL_OK ||
        sh_alloc_aligned(max_elems * j.es + 64, (void **)&j.recv) != SHOAL_OK)
        code = sh_cli_fail(SHOAL_ERR_NOMEM);
    else {
        /* Written once before any timing: pages never written read as the kernel's shared
         * zero page, which stays in cache and would flatter every size (with or without -c). */
        fill(j.send, max_elems, o.b.dt, j.rank, 0);
        fill(j.recv, max_elems, o.b.dt, j.rank, 1);
        code = run_sizes(&o, &j);
    }
    shoal_comm_destroy(j.c);
    sh_free_aligned(j.send);
    sh_free_aligned(j.recv);
    return code;
}
