/* plot_data.c — timeline breakdowns and benchmark curves for `shoal plot` (plot_data.h).
 * Not here: TensorBoard files (tb_read.c), drawing (svg_plot.c).
 * Proved by tests/cli/test_plot.c. */
#include "io/plot_data.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "io/json.h"

const char *const sh_stage_names[SH_STAGES] = {"data", "forward", "backward", "wait", "optimizer"};

/* The step-level events, and a pipeline stage's micro-batches: their forward and backward,
 * and their idle time counted as waiting. */
static int stage_of(const char *cat, const char *name)
{
    for (int k = 0; k < SH_STAGES; k++)
        if (!strcmp(cat, sh_stage_names[k]) && !strcmp(name, sh_stage_names[k])) return k;
    if (strcmp(cat, "pipeline")) return -1;
    return !strcmp(name, "forward") ? 1 : !strcmp(name, "backward") ? 2 : !strcmp(name, "idle") ? 3 : -1;
}

/* Member key as an integer in [lo, hi] (absent: dflt) into *out; 0 when it is a number
 * outside, which C's conversion to an integer would make undefined (scripts/fuzz.sh found
 * a step of 1.8e65 so converted, UBSan). */
static int json_int_in(const sh_json *v, const char *key, double lo, double hi, double dflt,
                       int64_t *out)
{
    double x = sh_json_num(v, key, dflt);
    if (!(x >= lo && x <= hi)) return 0; /* NaN too */
    *out = (int64_t)x;
    return 1;
}

/* Steps and pids as a trace holds them: within these, a double is exact. */
#define STEP_MAX 9007199254740992.0 /* 2^53 */
#define PID_MAX 2147483647.0

/* An event's step (args.step) and rank (pid): 0 when either is missing or out of range. */
static int event_step_pid(const sh_json *e, int64_t *step, int64_t *pid)
{
    return json_int_in(sh_json_get(e, "args"), "step", 0, STEP_MAX, -1, step) &&
           json_int_in(e, "pid", 0, PID_MAX, -1, pid);
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

static int cmp_int(const void *a, const void *b)
{
    int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}

/* (step, pid) pairs, by step then pid. */
static int cmp_pair(const void *a, const void *b)
{
    int c = cmp_i64(a, b);
    return c ? c : cmp_i64((const int64_t *)a + 1, (const int64_t *)b + 1);
}


void sh_breakdown_fini(sh_breakdown *b)
{
    free(b->rank);
    free(b->step);
    free(b->ms);
    memset(b, 0, sizeof *b);
}

shoal_result sh_breakdown_read(const char *path, int64_t step_lo, int64_t step_hi, sh_breakdown *out)
{
    memset(out, 0, sizeof *out);
    char err[160] = "";
    sh_json *doc = sh_json_parse_file(path, err, sizeof err);
    if (!doc) {
        if (!strncmp(err, "cannot", 6)) return SH_FAIL(SHOAL_ERR_IO, "%s: %s", path, err);
        return SH_FAIL(SHOAL_ERR_FORMAT, "--timeline %s: not JSON (%s); give a file written by shoal train "
                       "--timeline", path, err);
    }
    shoal_result rc = SHOAL_OK;
    const sh_json *ev = sh_json_get(doc, "traceEvents");
    if (!ev || ev->kind != SH_JSON_ARR) {
        rc = SH_FAIL(SHOAL_ERR_FORMAT, "--timeline %s: no \"traceEvents\" array; give a file written by shoal "
                     "train --timeline", path);
        goto done;
    }
    /* the (step, rank) pairs that have a step event in the window, then the distinct steps
     * and ranks; the grid is bounded by what the file holds (16 cells a pair), so a crafted
     * trace cannot claim steps x ranks cells it does not have */
    int64_t *pairs = calloc(2 * ev->n + 2, sizeof *pairs);
    int64_t *steps = calloc(ev->n + 1, sizeof *steps);
    int *ranks = calloc(ev->n + 1, sizeof *ranks);
    double *ms = NULL;
    size_t npairs = 0, nsteps = 0, nranks = 0;
    if (!pairs || !steps || !ranks) {
        rc = SH_FAIL(SHOAL_ERR_NOMEM, "out of memory reading %s", path);
        goto fail;
    }
    for (size_t i = 0; i < ev->n; i++) {
        const sh_json *e = &ev->items[i];
        const char *cat = sh_json_str(e, "cat"), *ph = sh_json_str(e, "ph");
        if (!cat || !ph || strcmp(ph, "X") || strcmp(cat, "step")) continue;
        int64_t s, pid; /* an event without them, or with others, is not a step of a rank */
        if (!event_step_pid(e, &s, &pid)) continue;
        if (s < step_lo || (step_hi >= 0 && s >= step_hi)) continue;
        pairs[2 * npairs] = s;
        pairs[2 * npairs + 1] = pid;
        npairs++;
    }
    qsort(pairs, npairs, 2 * sizeof *pairs, cmp_pair);
    size_t ndistinct = 0;
    for (size_t i = 0; i < npairs; i++) {
        if (i == 0 || pairs[2 * i] != pairs[2 * i - 2]) steps[nsteps++] = pairs[2 * i];
        if (i == 0 || cmp_pair(&pairs[2 * i], &pairs[2 * i - 2])) ndistinct++;
        ranks[nranks++] = (int)pairs[2 * i + 1];
    }
    qsort(ranks, nranks, sizeof *ranks, cmp_int);
    size_t nr = 0;
    for (size_t i = 0; i < nranks; i++)
        if (i == 0 || ranks[i] != ranks[nr - 1]) ranks[nr++] = ranks[i];
    nranks = nr;
    if (!nsteps) {
        rc = SH_FAIL(SHOAL_ERR_FORMAT, "--timeline %s: no step events%s; record steps with shoal train --timeline "
                     "(and --timeline-steps covering them)", path, step_lo > 0 || step_hi >= 0 ? " in the window" : "");
        goto fail;
    }
    if ((double)nsteps * (double)nranks > 16.0 * (double)ndistinct + 4096.0) {
        rc = SH_FAIL(SHOAL_ERR_FORMAT, "--timeline %s: %zu step events spread over %zu steps and %zu ranks; "
                     "a shoal trace has every rank at (nearly) every step: give a file written by shoal "
                     "train --timeline, or narrow it with --steps A:B", path, ndistinct, nsteps, nranks);
        goto fail;
    }
    ms = malloc(nsteps * nranks * SH_STAGES * sizeof *ms);
    if (!ms) {
        rc = SH_FAIL(SHOAL_ERR_NOMEM, "out of memory reading %s", path);
        goto fail;
    }
    for (size_t i = 0; i < nsteps * nranks * SH_STAGES; i++) ms[i] = NAN;
    for (size_t i = 0; i < ev->n; i++) {
        const sh_json *e = &ev->items[i];
        const char *cat = sh_json_str(e, "cat"), *name = sh_json_str(e, "name"), *ph = sh_json_str(e, "ph");
        if (!cat || !name || !ph || strcmp(ph, "X")) continue;
        int k = stage_of(cat, name);
        if (k < 0) continue;
        int64_t s, pid;
        if (!event_step_pid(e, &s, &pid)) continue;
        const int64_t *sp = bsearch(&s, steps, nsteps, sizeof *steps, cmp_i64);
        int p32 = (int)pid;
        const int *rp = bsearch(&p32, ranks, nranks, sizeof *ranks, cmp_int);
        if (!sp || !rp) continue;
        size_t si = (size_t)(sp - steps), ri = (size_t)(rp - ranks);
        double *slot = &ms[(si * nranks + ri) * SH_STAGES + (size_t)k];
        double d = sh_json_num(e, "dur", 0) * 1e-3; /* µs -> ms */
        *slot = isnan(*slot) ? d : *slot + d;
    }
    free(pairs);
    out->nsteps = (int)nsteps;
    out->nranks = (int)nranks;
    out->step = steps;
    out->rank = ranks;
    out->ms = ms;
done:
    sh_json_free(doc);
    return rc;
fail:
    free(pairs);
    free(steps);
    free(ranks);
    free(ms);
    goto done;
}

void sh_bench_curve_fini(sh_bench_curve *c)
{
    free(c->nbytes);
    free(c->busbw_gb_s);
    memset(c, 0, sizeof *c);
}

static shoal_result add_row(sh_bench_curve *c, double nbytes, double busbw)
{
    if (!isfinite(nbytes) || !isfinite(busbw) || nbytes <= 0) return SHOAL_OK;
    double *a = realloc(c->nbytes, (c->n + 1) * sizeof *a);
    if (a) c->nbytes = a;
    double *b = realloc(c->busbw_gb_s, (c->n + 1) * sizeof *b);
    if (b) c->busbw_gb_s = b;
    if (!a || !b) return SH_FAIL(SHOAL_ERR_NOMEM, "out of memory reading benchmark rows");
    c->nbytes[c->n] = nbytes;
    c->busbw_gb_s[c->n] = busbw;
    c->n++;
    return SHOAL_OK;
}

/* A row of any measure: {"x": .., "y": .., "x_label": .., "y_label": .., "label": ..}. */
static shoal_result add_xy_row(sh_bench_curve *c, const sh_json *row)
{
    const char *xl = sh_json_str(row, "x_label"), *yl = sh_json_str(row, "y_label"), *l = sh_json_str(row, "label");
    c->generic = 1;
    if (xl) snprintf(c->xlabel, sizeof c->xlabel, "%s", xl);
    if (yl) snprintf(c->ylabel, sizeof c->ylabel, "%s", yl);
    if (l) snprintf(c->label, sizeof c->label, "%s", l);
    return add_row(c, sh_json_num(row, "x", NAN), sh_json_num(row, "y", NAN));
}

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 1 << 16, n = 0;
    char *b = malloc(cap);
    while (b) {
        size_t got = fread(b + n, 1, cap - n - 1, f);
        n += got;
        if (got == 0) break;
        if (cap - n < 2) {
            char *g = realloc(b, cap *= 2);
            if (!g) {
                free(b);
                b = NULL;
                break;
            }
            b = g;
        }
    }
    fclose(f);
    if (b) b[n] = 0;
    return b;
}

/* "[rank 0] " as `shoal launch` prefixes lines */
static char *skip_rank_prefix(char *line)
{
    if (!strncmp(line, "[rank ", 6)) {
        char *close = strchr(line, ']');
        if (close) line = close + 1;
    }
    while (*line == ' ' || *line == '\t') line++;
    return line;
}

static const char *base_name(const char *path)
{
    const char *s = strrchr(path, '/');
    return s ? s + 1 : path;
}

/* The lines of text without launcher prefixes, into *clean; those that can belong to a JSON
 * document (a log line on stderr mixed into the output must not spoil it) into *json_part.
 * Every line is copied with a '\n' after it, the last one too when the file ends without
 * one (scripts/fuzz.sh found the byte past the end written): + 2, not + 1. */
static shoal_result split_lines(char *text, const char *path, char **clean, char **json_part)
{
    size_t text_len = strlen(text);
    *clean = malloc(text_len + 2);
    *json_part = malloc(text_len + 2);
    if (!*clean || !*json_part) {
        free(*clean);
        free(*json_part);
        *clean = *json_part = NULL;
        return SH_FAIL(SHOAL_ERR_NOMEM, "out of memory reading %s", path);
    }
    size_t cn = 0, jn = 0;
    for (char *line = text; line && *line;) {
        char *nl = strchr(line, '\n');
        if (nl) *nl = 0;
        char *l = skip_rank_prefix(line);
        size_t len = strlen(l);
        memcpy(*clean + cn, l, len);
        cn += len;
        (*clean)[cn++] = '\n';
        if (strchr("{}[]", l[0]) && l[0]) {
            memcpy(*json_part + jn, l, len);
            jn += len;
            (*json_part)[jn++] = '\n';
        }
        line = nl ? nl + 1 : NULL;
    }
    (*clean)[cn] = 0;
    (*json_part)[jn] = 0;
    return SHOAL_OK;
}

/* A table's header line ("# size ... busbw ..."): where its columns are. */
static void header_columns(char *line, int *size_col, int *bw_col)
{
    int col = 0, sc = -1, bc = -1;
    for (char *tok = strtok(line + 1, " \t"); tok; tok = strtok(NULL, " \t"), col++) {
        if (!strcmp(tok, "size") && sc < 0) sc = col;
        if (!strcmp(tok, "busbw") && bc < 0) bc = col;
    }
    if (sc >= 0 && bc >= 0) *size_col = sc, *bw_col = bc;
}

/* Line by line: JSON rows, or a table under a header naming its columns. */
static shoal_result rows_from_lines(char *clean, const char *path, sh_bench_curve *out)
{
    shoal_result rc = SHOAL_OK;
    char err[160] = "";
    int size_col = -1, bw_col = -1, lineno = 0;
    for (char *line = clean; line && *line && rc == SHOAL_OK;) {
        char *nl = strchr(line, '\n');
        if (nl) *nl = 0;
        lineno++;
        if (line[0] == '{') {
            sh_json *row = sh_json_parse(line, err, sizeof err);
            if (!row) rc = SH_FAIL(SHOAL_ERR_FORMAT, "--bench %s:%d: not a JSON row (%s)", path, lineno, err);
            else if (sh_json_get(row, "x")) rc = add_xy_row(out, row);
            else rc = add_row(out, sh_json_num(row, "size", NAN), sh_json_num(row, "busbw_gb_s", NAN));
            sh_json_free(row);
        } else if (line[0] == '#') {
            header_columns(line, &size_col, &bw_col);
        } else if (size_col >= 0 && isdigit((unsigned char)line[0])) {
            double v[64];
            int col = 0;
            for (char *tok = strtok(line, " \t"); tok && col < 64; tok = strtok(NULL, " \t")) v[col++] = strtod(tok, NULL);
            if (col > bw_col && col > size_col) rc = add_row(out, v[size_col], v[bw_col]);
        }
        line = nl ? nl + 1 : NULL;
    }
    return rc;
}

shoal_result sh_bench_curve_read(const char *path, sh_bench_curve *out)
{
    memset(out, 0, sizeof *out);
    char *text = slurp(path);
    if (!text) return SH_FAIL(SHOAL_ERR_IO, "--bench %s: cannot read: %s", path, strerror(errno));
    snprintf(out->label, sizeof out->label, "%s", base_name(path));
    char *clean = NULL, *json_part = NULL, err[160] = "";
    shoal_result rc = split_lines(text, path, &clean, &json_part);
    free(text);
    if (rc != SHOAL_OK) return rc;
    /* a whole shoal bench --json object (possibly with [rank 0] prefixes, stripped above) */
    sh_json *doc = json_part[0] == '{' ? sh_json_parse(json_part, err, sizeof err) : NULL;
    free(json_part);
    const sh_json *rows = doc ? sh_json_get(doc, "rows") : NULL;
    if (rows && rows->kind == SH_JSON_ARR) {
        const char *coll = sh_json_str(doc, "collective");
        double ranks = sh_json_num(doc, "ranks", 0);
        if (coll) snprintf(out->label, sizeof out->label, "shoal %s, %g ranks", coll, ranks);
        for (size_t i = 0; i < rows->n && rc == SHOAL_OK; i++)
            rc = add_row(out, sh_json_num(&rows->items[i], "size", NAN),
                         sh_json_num(&rows->items[i], "busbw_gb_s", NAN));
    } else {
        rc = rows_from_lines(clean, path, out);
    }
    sh_json_free(doc);
    free(clean);
    if (rc == SHOAL_OK && out->n == 0)
        rc = SH_FAIL(SHOAL_ERR_FORMAT, "--bench %s: no benchmark rows found; give the output of shoal bench (--json or "
                     "its table), JSON lines with \"size\" and \"busbw_gb_s\", or an nccl-tests table", path);
    if (rc != SHOAL_OK) sh_bench_curve_fini(out);
    return rc;
}

shoal_result sh_train_json_read(const char *path, sh_tb_run *out)
{
    memset(out, 0, sizeof *out);
    char *text = slurp(path);
    if (!text) return SH_FAIL(SHOAL_ERR_IO, "%s: cannot read: %s", path, strerror(errno));
    shoal_result rc = SHOAL_OK;
    char err[160];
    sh_json *doc = sh_json_parse(text, err, sizeof err); /* the whole file one document? */
    if (doc && !sh_json_get(doc, "history")) {
        if (sh_json_get(doc, "traceEvents"))
            rc = SH_FAIL(SHOAL_ERR_FORMAT, "%s is a timeline; draw it with shoal plot --timeline %s", path, path);
        else if (sh_json_get(doc, "rows"))
            rc = SH_FAIL(SHOAL_ERR_FORMAT, "%s holds benchmark rows; draw it with shoal plot --bench %s", path, path);
        sh_json_free(doc);
        doc = NULL;
    }
    /* else the last line that is a JSON object with a history: the report of shoal train
     * --json, perhaps behind a launcher's "[rank 0] " */
    char bad[240] = ""; /* the last object line that did not parse, and why */
    int lineno = 0;
    for (char *line = doc || rc != SHOAL_OK ? NULL : text; line && *line;) {
        char *nl = strchr(line, '\n');
        if (nl) *nl = 0;
        char *l = skip_rank_prefix(line);
        lineno++;
        if (l[0] == '{') {
            sh_json *v = sh_json_parse(l, err, sizeof err);
            if (!v) snprintf(bad, sizeof bad, "; its line %d does not parse (%.160s): cut short?", lineno, err);
            if (v && sh_json_get(v, "history")) {
                sh_json_free(doc);
                doc = v;
            } else {
                if (v && sh_json_get(v, "traceEvents"))
                    rc = SH_FAIL(SHOAL_ERR_FORMAT, "%s is a timeline; draw it with shoal plot --timeline %s", path, path);
                else if (v && sh_json_get(v, "rows"))
                    rc = SH_FAIL(SHOAL_ERR_FORMAT, "%s holds benchmark rows; draw it with shoal plot --bench %s", path, path);
                sh_json_free(v);
            }
        }
        line = nl ? nl + 1 : NULL;
    }
    free(text);
    const sh_json *h = doc ? sh_json_get(doc, "history") : NULL;
    if (rc == SHOAL_OK && (!h || h->kind != SH_JSON_ARR))
        rc = SH_FAIL(SHOAL_ERR_FORMAT, "%s: no shoal train --json report with a \"history\" in it%s; give that "
                     "output or the run's --logdir", path, bad);
    for (size_t i = 0; rc == SHOAL_OK && i < h->n; i++) {
        const sh_json *e = &h->items[i];
        int64_t step;
        if (!json_int_in(e, "step", -STEP_MAX, STEP_MAX, 0, &step)) {
            rc = SH_FAIL(SHOAL_ERR_FORMAT, "%s: history entry %zu has step %g, not a step number; the "
                         "file is damaged (give the shoal train --json output as written)", path, i,
                         sh_json_num(e, "step", 0));
            break;
        }
        double wall = sh_json_num(e, "seconds", NAN);
        static const char *const keys[3][2] = {
            {"train_loss", "train/loss"}, {"test_loss", "test/loss"}, {"test_accuracy", "test/accuracy"}};
        for (int k = 0; k < 3 && rc == SHOAL_OK; k++)
            rc = sh_tb_run_add(out, keys[k][1], step, wall, sh_json_num(e, keys[k][0], NAN));
        if (rc == SHOAL_OK) rc = sh_tb_run_add(out, "train/epoch", step, wall, sh_json_num(e, "epoch", NAN));
    }
    sh_json_free(doc);
    return rc;
}
