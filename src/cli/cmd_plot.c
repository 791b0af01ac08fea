/* cmd_plot.c — `shoal plot`: learning curves of runs (their --logdir), the per-step
 * breakdown of a --timeline trace, and bus bandwidth against size of benchmark outputs,
 * drawn as SVG.
 * Not here: reading the files (src/io/tb_read.c, plot_data.c), drawing (src/io/svg_plot.c).
 * Proved by tests/cli/test_plot.c. */
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "cli/cli.h"
#include "cli/flags.h"
#include "io/plot_data.h"
#include "io/svg_plot.h"
#include "io/tb_read.h"

static const char usage_text[] =
    "usage: shoal plot RUN... [-o FILE.svg] [--x step|epoch|time] [--tag TAG]... [--smooth A]\n"
    "       shoal plot --timeline TRACE.json [-o FILE.svg] [--steps A:B]\n"
    "       shoal plot --bench OUTPUT... [-o FILE.svg]\n"
    "\n"
    "Draw an SVG chart (a browser or an image viewer opens it) with axes, ticks, a legend\n"
    "and units. RUN... are runs' --logdir directories (or event files), or saved shoal\n"
    "train --json outputs (RUN.json: one point per evaluation): the loss and the accuracy,\n"
    "train and test, of every run side by side.\n";

#define MAX_INPUTS 32
#define MAX_TAGS 8

typedef enum { X_STEP, X_EPOCH, X_TIME } x_axis;

static const char *run_name(const char *path, char *buf, size_t n)
{
    snprintf(buf, n, "%s", path);
    size_t len = strlen(buf);
    while (len > 1 && buf[len - 1] == '/') buf[--len] = 0;
    const char *s = strrchr(buf, '/');
    return s ? s + 1 : buf;
}

/* x of every point of series s in run r, by the chosen axis; NaN where it cannot be told. */
static shoal_result x_values(const sh_tb_run *r, const sh_tb_series *s, x_axis xa, const char *path, double *x)
{
    const sh_tb_series *ep = xa == X_EPOCH ? sh_tb_run_find(r, "train/epoch") : NULL;
    if (xa == X_EPOCH && !ep)
        return SH_FAIL(SHOAL_ERR_FORMAT, "%s has no train/epoch values to place points by epoch; use --x step "
                       "or --x time", path);
    double steps_per_epoch = 0;
    for (size_t i = 0; ep && i < ep->n && !(steps_per_epoch > 0); i++)
        if (ep->value[i] > 0) steps_per_epoch = (double)ep->step[i] / ep->value[i];
    for (size_t i = 0; i < s->n; i++) {
        if (xa == X_STEP) x[i] = (double)s->step[i];
        else if (xa == X_TIME) x[i] = s->wall_time[i] - r->first_wall_time;
        else x[i] = steps_per_epoch > 0 ? (double)s->step[i] / steps_per_epoch : NAN;
    }
    return SHOAL_OK;
}

static void smooth(double *y, size_t n, double a)
{
    /* TensorBoard's: an EMA debiased by the weight of its start */
    double ema = 0, w = 0;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(y[i])) continue;
        ema = a * ema + (1 - a) * y[i];
        w = a * w + (1 - a);
        y[i] = ema / w;
    }
}

static const char *unit_label(const char *tag)
{
    static const struct {
        const char *tag, *label;
    } known[] = {{"loss", "loss (cross-entropy)"},        {"accuracy", "accuracy (fraction)"},
                 {"train/images_per_s", "images/s"},    {"train/learning_rate", "learning rate"},
                 {"train/gradient_norm", "gradient L2 norm"}, {"comm/wait_ms", "wait (ms)"},
                 {"comm/time_ms", "communication (ms)"}, {"comm/hidden_fraction", "hidden behind backward (fraction)"},
                 {"comm/bytes_sent", "bytes sent per step (B)"}, {"comm/busbw_gb_s", "bus bandwidth (GB/s)"},
                 {"ps/clock_spread", "clock spread (clocks)"}};
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++)
        if (!strcmp(tag, known[i].tag)) return known[i].label;
    if (strstr(tag, "_ms")) return "milliseconds";
    return tag;
}

static int plot_runs(char **runs, int nruns, const char **tags, int ntags, x_axis xa, double smooth_a,
                     const char *out, const char *title)
{
    static const char *const default_panels[2][2] = {{"train/loss", "test/loss"}, {"train/accuracy", "test/accuracy"}};
    sh_tb_run rr[MAX_INPUTS];
    memset(rr, 0, sizeof rr);
    int npanels = ntags ? ntags : 2, code = SH_EXIT_FAIL;
    size_t cap = (size_t)nruns * 2 * (size_t)npanels;
    sh_plot_series *series = calloc(cap, sizeof *series);
    char (*labels)[200] = calloc(cap, sizeof *labels);
    double **bufs = calloc(cap * 2, sizeof *bufs);
    sh_plot_panel panels[MAX_TAGS];
    memset(panels, 0, sizeof panels);
    size_t ns = 0, nb = 0;
    shoal_result rc = series && labels && bufs ? SHOAL_OK : SH_FAIL(SHOAL_ERR_NOMEM, "out of memory");
    for (int i = 0; i < nruns && rc == SHOAL_OK; i++) {
        size_t len = strlen(runs[i]);
        rc = len > 5 && !strcmp(runs[i] + len - 5, ".json") ? sh_train_json_read(runs[i], &rr[i])
                                                            : sh_tb_run_read(runs[i], &rr[i]);
    }
    for (int p = 0; p < npanels && rc == SHOAL_OK; p++) {
        const char *const *want = ntags ? &tags[p] : default_panels[p];
        int nwant = ntags ? 1 : 2;
        panels[p].series = &series[ns];
        panels[p].title = ntags ? tags[p] : p == 0 ? "loss" : "accuracy";
        panels[p].ylabel = unit_label(ntags ? tags[p] : p == 0 ? "loss" : "accuracy");
        panels[p].xlabel = xa == X_STEP ? "step" : xa == X_EPOCH ? "epoch" : "wall time (s)";
        for (int r = 0; r < nruns && rc == SHOAL_OK; r++)
            for (int k = 0; k < nwant && rc == SHOAL_OK; k++) {
                const sh_tb_series *s = sh_tb_run_find(&rr[r], want[k]);
                if (!s || !s->n) continue;
                double *x = malloc(s->n * sizeof *x), *y = malloc(s->n * sizeof *y);
                bufs[nb++] = x;
                bufs[nb++] = y;
                if (!x || !y) {
                    rc = SH_FAIL(SHOAL_ERR_NOMEM, "out of memory");
                    break;
                }
                rc = x_values(&rr[r], s, xa, runs[r], x);
                memcpy(y, s->value, s->n * sizeof *y);
                if (smooth_a > 0 && s->n > 2) smooth(y, s->n, smooth_a);
                char nb_[256];
                if (nruns > 1) snprintf(labels[ns], sizeof labels[ns], "%.96s: %.96s", run_name(runs[r], nb_, sizeof nb_), want[k]);
                else snprintf(labels[ns], sizeof labels[ns], "%.190s", want[k]);
                series[ns] = (sh_plot_series){labels[ns], x, y, s->n};
                ns++;
                panels[p].nseries++;
            }
        if (rc == SHOAL_OK && !panels[p].nseries)
            rc = SH_FAIL(SHOAL_ERR_FORMAT, "no run has %s%s%s; the runs' tags: see shoal plot --help (--tag)",
                         want[0], nwant > 1 ? " or " : "", nwant > 1 ? want[1] : "");
    }
    if (rc == SHOAL_OK) rc = sh_svg_line_chart(out, title, panels, npanels);
    if (rc == SHOAL_OK) {
        printf("wrote %s: %d panel%s, %zu curve%s\n", out, npanels, npanels > 1 ? "s" : "", ns, ns > 1 ? "s" : "");
        code = SH_EXIT_OK;
    } else {
        code = sh_cli_fail(rc);
    }
    for (int i = 0; i < nruns; i++) sh_tb_run_fini(&rr[i]);
    for (size_t i = 0; bufs && i < nb; i++) free(bufs[i]);
    free(bufs);
    free(labels);
    free(series);
    return code;
}

static int plot_timeline(const char *trace, int64_t lo, int64_t hi, const char *out, const char *title)
{
    sh_breakdown b;
    shoal_result rc = sh_breakdown_read(trace, lo, hi, &b);
    if (rc != SHOAL_OK) return sh_cli_fail(rc);
    char (*glabels)[24] = calloc((size_t)b.nsteps, sizeof *glabels);
    char (*blabels)[24] = calloc((size_t)b.nranks, sizeof *blabels);
    const char **gl = calloc((size_t)b.nsteps, sizeof *gl), **bl = calloc((size_t)b.nranks, sizeof *bl);
    if (!glabels || !blabels || !gl || !bl) rc = SH_FAIL(SHOAL_ERR_NOMEM, "out of memory");
    for (int g = 0; rc == SHOAL_OK && g < b.nsteps; g++) {
        snprintf(glabels[g], sizeof glabels[g], "%lld", (long long)b.step[g]);
        gl[g] = glabels[g];
    }
    for (int r = 0; rc == SHOAL_OK && r < b.nranks; r++) {
        snprintf(blabels[r], sizeof blabels[r], "r%d", b.rank[r]);
        bl[r] = blabels[r];
    }
    char t[256];
    snprintf(t, sizeof t, "%s", title ? title : "");
    if (!title) snprintf(t, sizeof t, "time per step by stage, %d rank%s (bars left to right: rank 0, 1, ...)",
                         b.nranks, b.nranks > 1 ? "s" : "");
    static const char *const parts[SH_STAGES] = {"data loading", "forward", "backward", "waiting for communication",
                                                 "optimizer"};
    sh_plot_stacked c = {t, "step", "time (ms)", b.nsteps, b.nranks, SH_STAGES, gl, bl, parts, b.ms};
    if (rc == SHOAL_OK) rc = sh_svg_stacked_bars(out, &c);
    if (rc == SHOAL_OK) printf("wrote %s: %d steps x %d ranks\n", out, b.nsteps, b.nranks);
    free(gl);
    free(bl);
    free(glabels);
    free(blabels);
    sh_breakdown_fini(&b);
    return rc == SHOAL_OK ? SH_EXIT_OK : sh_cli_fail(rc);
}

static int plot_bench(char **files, int n, const char *out, const char *title)
{
    sh_bench_curve cv[MAX_INPUTS];
    sh_plot_series se[MAX_INPUTS];
    memset(cv, 0, sizeof cv);
    shoal_result rc = SHOAL_OK;
    for (int i = 0; i < n && rc == SHOAL_OK; i++) {
        rc = sh_bench_curve_read(files[i], &cv[i]);
        se[i] = (sh_plot_series){cv[i].label, cv[i].nbytes, cv[i].busbw_gb_s, cv[i].n};
    }
    sh_plot_panel p = {"bus bandwidth against message size", "message size", "busbw (GB/s)", se, n, 1, 1};
    char ptitle[200];
    if (rc == SHOAL_OK && cv[0].generic) { /* x/y rows: their own axes, linear */
        p.xlabel = cv[0].xlabel[0] ? cv[0].xlabel : "x";
        p.ylabel = cv[0].ylabel[0] ? cv[0].ylabel : "y";
        snprintf(ptitle, sizeof ptitle, "%s against %s", p.ylabel, p.xlabel);
        p.title = ptitle;
        p.x_bytes_log2 = 0;
    }
    if (rc == SHOAL_OK) rc = sh_svg_line_chart(out, title, &p, 1);
    if (rc == SHOAL_OK) printf("wrote %s: %d curve%s\n", out, n, n > 1 ? "s" : "");
    for (int i = 0; i < n; i++) sh_bench_curve_fini(&cv[i]);
    return rc == SHOAL_OK ? SH_EXIT_OK : sh_cli_fail(rc);
}

/* "A:B" -> [A, B); "A:" -> [A, end) */
static int parse_steps(const char *v, int64_t *lo, int64_t *hi)
{
    char *end = NULL;
    long long a = strtoll(v, &end, 10);
    if (end == v || *end != ':' || a < 0) return 0;
    if (!end[1]) {
        *lo = a;
        *hi = -1;
        return 1;
    }
    char *e2 = NULL;
    long long b = strtoll(end + 1, &e2, 10);
    if (e2 == end + 1 || *e2 || b <= a) return 0;
    *lo = a;
    *hi = b;
    return 1;
}

typedef struct {
    const char *out, *timeline, *title, *tags[MAX_TAGS];
    char *inputs[MAX_INPUTS];
    int ninputs, ntags, bench, steps_given;
    x_axis xa;
    double smooth_a;
    int64_t lo, hi;
} plot_opts;

static int set_x(void *dst, const sh_flag *f, const char *spelled, const char *v, const char *cmd)
{
    plot_opts *o = dst;
    if (!strcmp(v, "step")) o->xa = X_STEP;
    else if (!strcmp(v, "epoch")) o->xa = X_EPOCH;
    else if (!strcmp(v, "time")) o->xa = X_TIME;
    else return sh_cli_usage_error(cmd, "%s \"%s\": use step, epoch or time", spelled, v);
    return 0;
}

static int add_tag(void *dst, const sh_flag *f, const char *spelled, const char *v, const char *cmd)
{
    plot_opts *o = dst;
    if (o->ntags == MAX_TAGS) return sh_cli_usage_error(cmd, "at most %d --tag panels", MAX_TAGS);
    o->tags[o->ntags++] = v;
    return 0;
}

static int set_smooth(void *dst, const sh_flag *f, const char *spelled, const char *v, const char *cmd)
{
    plot_opts *o = dst;
    char *end = NULL;
    o->smooth_a = strtod(v, &end);
    if (!end || *end || !(o->smooth_a >= 0 && o->smooth_a < 1))
        return sh_cli_usage_error(cmd, "%s \"%s\": expected a number in [0, 1)", spelled, v);
    return 0;
}

static int set_steps(void *dst, const sh_flag *f, const char *spelled, const char *v, const char *cmd)
{
    plot_opts *o = dst;
    if (!parse_steps(v, &o->lo, &o->hi))
        return sh_cli_usage_error(cmd, "%s \"%s\": expected A:B with 0 <= A < B, or A:", spelled, v);
    o->steps_given = 1;
    return 0;
}

static int add_input(void *dst, const char *arg, const char *cmd)
{
    plot_opts *o = dst;
    if (o->ninputs == MAX_INPUTS) return sh_cli_usage_error(cmd, "at most %d inputs", MAX_INPUTS);
    o->inputs[o->ninputs++] = (char *)arg;
    return 0;
}

#define AT(field) offsetof(plot_opts, field)

static const sh_flag flags[] = {
    {"x", 0, "AXIS", SH_FLAG_CALL, 0, 0, 0, "Runs",
     "step (default), epoch, or time (seconds of wall time since the run's first record)",
     "step, epoch or time", NULL, set_x},
    {"tag", 0, "TAG", SH_FLAG_CALL, 0, 0, 0, "Runs",
     "draw these TensorBoard tags instead, one panel each (repeat): train/images_per_s, comm/wait_ms, "
     "comm/busbw_gb_s, ...", "a TensorBoard tag", NULL, add_tag},
    {"smooth", 0, "A", SH_FLAG_CALL, 0, 0, 0, "Runs",
     "exponential moving average of each curve, A in [0, 1) (0: raw)", "a value in [0, 1)", NULL, set_smooth},
    {"timeline", 0, "TRACE", SH_FLAG_STR, AT(timeline), 0, 0, "A timeline",
     "stacked bars per step and rank: data, forward, backward, waiting for communication, optimizer "
     "(a trace of shoal train --timeline)", "a trace file", NULL, NULL},
    {"steps", 0, "A:B", SH_FLAG_CALL, 0, 0, 0, "A timeline", "with --timeline: steps A..B-1 only",
     "A:B with 0 <= A < B, or A:", NULL, set_steps},
    {"bench", 0, NULL, SH_FLAG_SWITCH, AT(bench), 0, 0, "Benchmarks",
     "the inputs are benchmark outputs: bus bandwidth against message size, one curve per file: shoal "
     "bench output (--json or its table), the peers' JSON lines with size and busbw_gb_s, or an "
     "nccl-tests table; JSON lines with x and y (x_label, y_label, label name the axes and the curve) "
     "draw any measure (bench/scaling)", NULL, NULL, NULL},
    {"output", 'o', "FILE.svg", SH_FLAG_STR, AT(out), 0, 0, "The chart", "the chart (default plot.svg)",
     "a file name", NULL, NULL},
    {"title", 0, "TEXT", SH_FLAG_STR, AT(title), 0, 0, "The chart", "a title above the chart", NULL, NULL,
     NULL},
};

static const sh_flag_table table = {
    .cmd = "plot", .usage = usage_text, .flags = flags, .nflags = sizeof flags / sizeof flags[0],
    .positional = add_input,
};

int sh_cmd_plot(int argc, char **argv)
{
    plot_opts o = {.out = "plot.svg", .xa = X_STEP, .lo = 0, .hi = -1};
    int rc = sh_flags_parse(&table, argc, argv, 1, &o, NULL);
    if (rc) return rc == SH_FLAGS_HELP ? SH_EXIT_OK : rc;
    if (!sh_svg_path_ok(o.out))
        return sh_cli_usage_error("plot", "-o %s: charts are written as SVG; name the file *.svg", o.out);
    if (o.timeline) {
        if (o.ninputs || o.bench)
            return sh_cli_usage_error("plot", "--timeline draws one trace; give no runs or --bench");
        return plot_timeline(o.timeline, o.lo, o.hi, o.out, o.title);
    }
    if (o.steps_given) return sh_cli_usage_error("plot", "--steps goes with --timeline");
    if (!o.ninputs)
        return sh_cli_usage_error("plot", o.bench ? "--bench needs benchmark output files"
                                                  : "give runs' --logdir directories, --timeline TRACE or --bench FILES");
    if (o.bench) return plot_bench(o.inputs, o.ninputs, o.out, o.title);
    return plot_runs(o.inputs, o.ninputs, o.tags, o.ntags, o.xa, o.smooth_a, o.out, o.title);
}
