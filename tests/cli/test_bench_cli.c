/* test_bench_cli.c — proves `shoal bench`'s figures (src/cli/cmd_bench.c) under `shoal launch`
 * with real ranks: the size sequence and counts, the type/redop/root columns, algbw = size /
 * time and busbw = algbw x nccl-tests' bus factor per collective, the average line, that
 * only rank 0 prints, and that the text rows carry the same columns; rank 0's table and JSON
 * come untagged (json.load reads the document) and -n N starts its own ranks.
 * Not here: launch itself and usage errors (test_launch.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "check.h"
#include "lib/run.h"

static char out[1 << 18];

static const char *bin(void) { return sh_test_shoal_bin(); }

static int run(const char *fmt, const char *a, const char *b)
{
    char args[1024], cmd[2048];
    snprintf(args, sizeof args, fmt, a, b);
    snprintf(cmd, sizeof cmd, "%s launch -n 3 %s bench %s 2>&1", bin(), bin(), args);
    return sh_test_run(cmd, out, sizeof out);
}

/* The number after "key": in a JSON row, or -1e300 when absent. */
static double field(const char *row, const char *key)
{
    char k[64];
    snprintf(k, sizeof k, "\"%s\": ", key);
    const char *p = strstr(row, k);
    return p ? strtod(p + strlen(k), NULL) : -1e300;
}

static const char *sfield(const char *row, const char *key, char *buf, size_t cap)
{
    char k[64];
    snprintf(k, sizeof k, "\"%s\": \"", key);
    const char *p = strstr(row, k);
    buf[0] = 0;
    if (p) {
        p += strlen(k);
        size_t i = 0;
        while (p[i] && p[i] != '"' && i + 1 < cap) buf[i] = p[i], i++;
        buf[i] = 0;
    }
    return buf;
}

struct coll {
    const char *name;
    double factor; /* nccl-tests' bus factor at 3 ranks */
    int rooted, reduces, per_rank; /* per_rank: count is a multiple of the world size */
};

static void json_rows_follow_nccl_tests(void)
{
    const struct coll cs[] = {
        {"allreduce", 4.0 / 3, 0, 1, 0},      {"broadcast", 1, 1, 0, 0},      {"reduce", 1, 1, 1, 0},
        {"allgather", 2.0 / 3, 0, 0, 1},      {"reduce_scatter", 2.0 / 3, 0, 1, 1},
        {"alltoall", 2.0 / 3, 0, 0, 1},       {"sendrecv", 1, 0, 0, 0},
    };
    for (size_t c = 0; c < sizeof cs / sizeof cs[0]; c++) {
        int rc = run("%s -b 4K -e 4M -f 32 --iters 3 -w 1 -c 1 -d int32 -o max -r 2 --json%s", cs[c].name, "");
        CHECK(rc == 0, "%s: exit %d: %s", cs[c].name, rc, out);
        CHECK(strstr(out, "[rank 1]") == NULL && strstr(out, "[rank 2]") == NULL, "%s: other ranks printed: %s",
              cs[c].name, out);
        /* sizes 4K, 128K, 4M, each rounded down to whole elements (per rank where the count is split) */
        const size_t want[] = {4096, 131072, 4194304};
        int rows = 0;
        double sum = 0;
        const char *avg = strstr(out, "\"avg_busbw_gb_s\""); /* before the rows are cut apart */
        for (char *l = strstr(out, "{\"size\""); l && rows < 4; l = strstr(l + 1, "{\"size\"")) {
            char *end = strchr(l, '}');
            if (!end) break;
            *end = 0;
            double size = field(l, "size"), count = field(l, "count");
            size_t unit = cs[c].per_rank ? 4 * 3 : 4;
            if (rows < 3) {
                size_t w = want[rows] / unit * unit;
                CHECK(size == (double)w, "%s row %d: size %.0f, want %zu", cs[c].name, rows, size, w);
            }
            /* nccl-tests' count column: elements per rank where the buffer is split across ranks */
            CHECK(count * (double)unit == size, "%s: count %.0f for %.0f bytes of int32", cs[c].name, count, size);
            char buf[32];
            CHECK(!strcmp(sfield(l, "type", buf, sizeof buf), "int32"), "%s: type %s", cs[c].name, buf);
            CHECK(!strcmp(sfield(l, "redop", buf, sizeof buf), cs[c].reduces ? "max" : "none"), "%s: redop %s",
                  cs[c].name, buf);
            CHECK(field(l, "root") == (cs[c].rooted ? 2 : -1), "%s: root %g", cs[c].name, field(l, "root"));
            CHECK(field(l, "wrong") == 0 && field(l, "inplace_wrong") == 0, "%s: wrong elements", cs[c].name);
            const char *pre[2] = {"", "inplace_"};
            for (int k = 0; k < 2; k++) {
                char kt[32], ka[32], kb[32];
                snprintf(kt, sizeof kt, "%stime_us", pre[k]);
                snprintf(ka, sizeof ka, "%salgbw_gb_s", pre[k]);
                snprintf(kb, sizeof kb, "%sbusbw_gb_s", pre[k]);
                double t = field(l, kt), alg = field(l, ka), bus = field(l, kb);
                CHECK(t > 0, "%s: time %g", cs[c].name, t);
                /* printed to 4 decimals: allow the rounding of both figures */
                CHECK_NEAR(alg, size / (t * 1e3), 1e-4 + 1e-3 * alg);
                CHECK_NEAR(bus, alg * cs[c].factor, 2e-4 + 1e-3 * bus);
                sum += bus;
            }
            rows++;
            l = end;
        }
        CHECK(rows == 3, "%s: %d rows: %s", cs[c].name, rows, out);
        CHECK(avg != NULL, "%s: no average: %s", cs[c].name, out);
        if (avg && rows) CHECK_NEAR(strtod(avg + strlen("\"avg_busbw_gb_s\": "), NULL), sum / (2 * rows), 3e-4);
    }
}

/* The text table: nccl-tests' header and 13 columns per row, the average over both placements. */
static void text_rows_have_nccl_tests_columns(void)
{
    int rc = run("%s -b 8 -e 64K -f 8 --iters 2 -w 1 -c 1%s", "allreduce", "");
    CHECK(rc == 0, "exit %d: %s", rc, out);
    CHECK(strstr(out, "out-of-place") && strstr(out, "in-place") && strstr(out, "#wrong"), "header: %s", out);
    int rows = 0;
    double sum = 0, avg = -1;
    for (char *l = strtok(out, "\n"); l; l = strtok(NULL, "\n")) {
        if (!strncmp(l, "[rank ", 6)) continue; /* rank 0's table comes untagged; any other line is not it */
        if (sscanf(l, "# Avg bus bandwidth : %lf", &avg) == 1) continue;
        size_t size, count;
        char type[16], redop[16];
        int root, w0, w1;
        double t0, a0, b0, t1, a1, b1;
        if (sscanf(l, "%zu %zu %15s %15s %d %lf %lf %lf %d %lf %lf %lf %d", &size, &count, type, redop, &root, &t0,
                   &a0, &b0, &w0, &t1, &a1, &b1, &w1) != 13)
            continue;
        size_t want = 8;
        for (int i = 0; i < rows; i++) want *= 8;
        if (want > 65536) want = 65536; /* the last step stops at MAX */
        CHECK(size == want && count == want / 4, "row %d: %zu bytes, %zu elements", rows, size, count);
        CHECK(!strcmp(type, "float") && !strcmp(redop, "sum") && root == -1, "%s %s %d", type, redop, root);
        CHECK(w0 == 0 && w1 == 0, "wrong %d %d", w0, w1);
        sum += b0 + b1;
        rows++;
    }
    CHECK(rows == 6, "%d rows", rows);
    /* the per-row figures are printed to 2 decimals, the average in full */
    if (rows) CHECK_NEAR(avg, sum / (2 * rows), 0.006);
}

/* Under shoal launch rank 0's stdout is the job's: the table without "[rank 0] ", the --json
 * document one that Python's json.load reads; -n 3 starts its own 3 ranks, as train -n does. */
static void output_is_clean_and_n_starts_ranks(void)
{
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "%s launch -n 3 %s bench allreduce -b 8 -e 1K -f 4 --iters 2 -w 1 --json 2>/dev/null | "
             "python3 -c 'import json,sys; d=json.load(sys.stdin); print(\"rows\", len(d[\"rows\"]), d[\"ranks\"])'",
             bin(), bin());
    int rc = sh_test_run(cmd, out, sizeof out);
    CHECK(rc == 0 && !strcmp(out, "rows 5 3\n"), "json.load of --json under shoal launch: exit %d: %s", rc, out);
    snprintf(cmd, sizeof cmd, "%s bench allreduce -n 3 -b 8 -e 1K -f 4 --iters 2 -w 1 2>/dev/null", bin());
    rc = sh_test_run(cmd, out, sizeof out);
    CHECK(rc == 0 && !strncmp(out, "# shoal bench allreduce: 3 ranks", 32) && !strstr(out, "[rank"),
          "-n 3: a clean table of 3 ranks: exit %d: %s", rc, out);
    snprintf(cmd, sizeof cmd, "%s launch -n 2 %s bench allreduce -n 3 --iters 2 2>&1", bin(), bin());
    rc = sh_test_run(cmd, out, sizeof out);
    CHECK(rc == 2 && strstr(out, "--iters"), "-n that is not the job's ranks points at --iters: %s", out);
}

int main(void)
{
    check_begin("test_bench_cli", 240);
    RUN(output_is_clean_and_n_starts_ranks);
    RUN(json_rows_follow_nccl_tests);
    RUN(text_rows_have_nccl_tests_columns);
    return check_end();
}
