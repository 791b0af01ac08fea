/* tb_read.c — TensorBoard event files read back (tb_read.h): TFRecord framing with both
 * masked CRC-32Cs checked, then Event / Summary / Value protobuf fields (the layout is in
 * tb_events.c's head).
 * Not here: writing (tb_events.c). Proved by tests/cli/test_plot.c. */
#include "io/tb_read.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/err.h"
#include "io/tb_events.h"

static uint64_t le(const uint8_t *b, int n)
{
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--) v = v << 8 | b[i];
    return v;
}

static int varint(const uint8_t *b, size_t n, size_t *pos, uint64_t *out)
{
    uint64_t v = 0;
    for (int shift = 0; *pos < n && shift < 70; shift += 7) {
        uint8_t byte = b[(*pos)++];
        v |= (uint64_t)(byte & 0x7f) << shift;
        if (!(byte & 0x80)) {
            *out = v;
            return 1;
        }
    }
    return 0;
}

/* One protobuf field: key, and either a number (v) or a length-delimited slice (p, len). */
typedef struct {
    unsigned field, wire;
    uint64_t v;
    const uint8_t *p;
    size_t len;
} pb_field;

/* The next field of b[0..n) at *pos: 1, 0 at the end, -1 when malformed. */
static int next_field(const uint8_t *b, size_t n, size_t *pos, pb_field *f)
{
    if (*pos >= n) return 0;
    uint64_t key;
    if (!varint(b, n, pos, &key)) return -1;
    f->field = (unsigned)(key >> 3);
    f->wire = key & 7;
    f->p = NULL;
    f->len = 0;
    f->v = 0;
    if (f->wire == 0) return varint(b, n, pos, &f->v) ? 1 : -1;
    if (f->wire == 1 || f->wire == 5) {
        size_t w = f->wire == 1 ? 8 : 4;
        if (n - *pos < w) return -1;
        f->v = le(b + *pos, (int)w);
        *pos += w;
        return 1;
    }
    if (f->wire == 2) {
        if (!varint(b, n, pos, &f->v) || f->v > n - *pos) return -1;
        f->p = b + *pos;
        f->len = (size_t)f->v;
        *pos += f->len;
        return 1;
    }
    return -1;
}

/* FNV-1a of a tag as stored (cut to fit sh_tb_series.tag). */
static uint64_t tag_hash(const char *tag, size_t len)
{
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < len; i++) h = (h ^ (uint8_t)tag[i]) * 1099511628211ull;
    return h;
}

/* The length of a tag as a series holds it: up to a NUL byte, cut to fit sh_tb_series.tag. */
static size_t stored_len(const char *tag, size_t tag_len)
{
    size_t cap = sizeof(((sh_tb_series *)0)->tag) - 1;
    return strnlen(tag, tag_len < cap ? tag_len : cap);
}

/* The index slot of tag: its series or the empty slot where it would go. */
static size_t find_slot(const sh_tb_run *r, const char *tag, size_t len)
{
    size_t mask = r->nslots - 1, i = (size_t)tag_hash(tag, len) & mask;
    while (r->slots[i] >= 0) {
        const char *t = r->series[r->slots[i]].tag;
        if (strlen(t) == len && !memcmp(t, tag, len)) break;
        i = (i + 1) & mask;
    }
    return i;
}

static shoal_result grow_index(sh_tb_run *r)
{
    size_t n = r->nslots ? 2 * r->nslots : 64;
    int *slots = malloc(n * sizeof *slots);
    if (!slots) return SH_FAIL(SHOAL_ERR_NOMEM, "out of memory reading TensorBoard scalars");
    for (size_t i = 0; i < n; i++) slots[i] = -1;
    free(r->slots);
    r->slots = slots;
    r->nslots = n;
    for (int k = 0; k < r->nseries; k++) {
        const char *t = r->series[k].tag;
        r->slots[find_slot(r, t, strlen(t))] = k;
    }
    return SHOAL_OK;
}

/* The series of tag, made on first use; the index keeps many tags linear, not quadratic. */
static shoal_result series_of(sh_tb_run *r, const char *tag, size_t tag_len, sh_tb_series **out)
{
    size_t len = stored_len(tag, tag_len);
    if ((size_t)r->nseries * 2 >= r->nslots) SH_TRY(grow_index(r));
    size_t i = find_slot(r, tag, len);
    if (r->slots[i] >= 0) {
        *out = &r->series[r->slots[i]];
        return SHOAL_OK;
    }
    if (r->nseries == r->series_cap) {
        int cap = r->series_cap ? 2 * r->series_cap : 16;
        sh_tb_series *grown = realloc(r->series, (size_t)cap * sizeof *grown);
        if (!grown) return SH_FAIL(SHOAL_ERR_NOMEM, "out of memory reading TensorBoard scalars");
        r->series = grown;
        r->series_cap = cap;
    }
    sh_tb_series *s = &r->series[r->nseries];
    memset(s, 0, sizeof *s);
    memcpy(s->tag, tag, len);
    r->slots[i] = r->nseries++;
    *out = s;
    return SHOAL_OK;
}

static shoal_result add_point(sh_tb_run *r, const char *tag, size_t tag_len, int64_t step, double wall, double value)
{
    sh_tb_series *s = NULL;
    SH_TRY(series_of(r, tag, tag_len, &s));
    if (s->n == s->cap) {
        size_t cap = s->cap ? 2 * s->cap : 4;
        int64_t *st = realloc(s->step, cap * sizeof *st);
        if (st) s->step = st;
        double *wt = realloc(s->wall_time, cap * sizeof *wt);
        if (wt) s->wall_time = wt;
        double *v = realloc(s->value, cap * sizeof *v);
        if (v) s->value = v;
        if (!st || !wt || !v) return SH_FAIL(SHOAL_ERR_NOMEM, "out of memory reading TensorBoard scalars");
        s->cap = cap;
    }
    s->step[s->n] = step;
    s->wall_time[s->n] = wall;
    s->value[s->n] = value;
    s->n++;
    return SHOAL_OK;
}

/* One Event: its wall time and step, then each Summary.Value with a simple_value. */
static shoal_result take_event(sh_tb_run *r, const uint8_t *b, size_t n, const char *path, size_t at)
{
    double wall = 0;
    int64_t step = 0;
    const uint8_t *summary = NULL;
    size_t summary_len = 0, pos = 0;
    pb_field f;
    int k;
    while ((k = next_field(b, n, &pos, &f)) > 0) {
        if (f.field == 1 && f.wire == 1) memcpy(&wall, &f.v, sizeof wall);
        if (f.field == 2 && f.wire == 0) step = (int64_t)f.v;
        if (f.field == 5 && f.wire == 2) summary = f.p, summary_len = f.len;
    }
    if (k < 0) goto bad;
    if (wall > 0 && (r->first_wall_time == 0 || wall < r->first_wall_time)) r->first_wall_time = wall;
    pos = 0;
    while (summary && (k = next_field(summary, summary_len, &pos, &f)) > 0) {
        if (f.field != 1 || f.wire != 2) continue;
        const char *tag = NULL;
        size_t tag_len = 0, vpos = 0;
        int has = 0, kv;
        float value = 0;
        pb_field g;
        while ((kv = next_field(f.p, f.len, &vpos, &g)) > 0) {
            if (g.field == 1 && g.wire == 2) tag = (const char *)g.p, tag_len = g.len;
            if (g.field == 2 && g.wire == 5) {
                uint32_t bits = (uint32_t)g.v;
                memcpy(&value, &bits, sizeof value);
                has = 1;
            }
        }
        if (kv < 0) goto bad;
        if (has && tag && tag_len) SH_TRY(add_point(r, tag, tag_len, step, wall, value));
    }
    if (summary && k < 0) goto bad;
    return SHOAL_OK;
bad:
    return SH_FAIL(SHOAL_ERR_FORMAT, "%s: the Event record at byte %zu is malformed; the file is damaged or "
                   "not a TensorBoard event file", path, at);
}

static shoal_result read_file(sh_tb_run *r, const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) return SH_FAIL(SHOAL_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    shoal_result rc = SHOAL_OK;
    uint8_t head[12], tail[4];
    uint8_t *data = NULL;
    size_t at = 0;
    for (;;) {
        size_t got = fread(head, 1, sizeof head, f);
        if (got == 0) break;
        uint64_t len = le(head, 8);
        /* A record cut short is what a running writer leaves at the end: keep what is whole. */
        if (got < sizeof head) break;
        if (sh_tb_masked_crc(head, 8) != (uint32_t)le(head + 8, 4)) {
            rc = SH_FAIL(SHOAL_ERR_FORMAT, "%s: byte %zu: record length fails its CRC; the file is damaged or not "
                         "a TensorBoard event file", path, at);
            break;
        }
        if (len > (64u << 20)) {
            rc = SH_FAIL(SHOAL_ERR_FORMAT, "%s: byte %zu: a record of %llu bytes; not a shoal event file", path, at,
                         (unsigned long long)len);
            break;
        }
        uint8_t *grown = realloc(data, (size_t)len + 1);
        if (!grown) {
            rc = SH_FAIL(SHOAL_ERR_NOMEM, "out of memory reading %s", path);
            break;
        }
        data = grown;
        if (fread(data, 1, (size_t)len, f) != len || fread(tail, 1, 4, f) != 4) break; /* cut short */
        if (sh_tb_masked_crc(data, (size_t)len) != (uint32_t)le(tail, 4)) {
            rc = SH_FAIL(SHOAL_ERR_FORMAT, "%s: byte %zu: record data fails its CRC; the file is damaged", path, at);
            break;
        }
        rc = take_event(r, data, (size_t)len, path, at);
        if (rc != SHOAL_OK) break;
        at += sizeof head + (size_t)len + 4;
    }
    free(data);
    fclose(f);
    return rc;
}

static int by_name(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

shoal_result sh_tb_run_read(const char *path, sh_tb_run *out)
{
    memset(out, 0, sizeof *out);
    struct stat st;
    if (stat(path, &st) != 0) return SH_FAIL(SHOAL_ERR_IO, "%s: %s", path, strerror(errno));
    if (!S_ISDIR(st.st_mode)) return read_file(out, path);
    DIR *d = opendir(path);
    if (!d) return SH_FAIL(SHOAL_ERR_IO, "%s: cannot open the directory: %s", path, strerror(errno));
    char **names = NULL;
    size_t nn = 0;
    shoal_result rc = SHOAL_OK;
    for (struct dirent *e; (e = readdir(d));) {
        if (strncmp(e->d_name, "events.out.tfevents.", 20)) continue;
        char **grown = realloc(names, (nn + 1) * sizeof *names);
        if (!grown || !(grown[nn] = strdup(e->d_name))) {
            if (grown) names = grown;
            rc = SH_FAIL(SHOAL_ERR_NOMEM, "out of memory listing %s", path);
            break;
        }
        names = grown;
        nn++;
    }
    closedir(d);
    if (rc == SHOAL_OK && nn == 0)
        rc = SH_FAIL(SHOAL_ERR_IO, "%s holds no events.out.tfevents.* file; give the --logdir of a shoal train run "
                     "(or an event file)", path);
    if (nn) qsort(names, nn, sizeof *names, by_name);
    for (size_t i = 0; i < nn; i++) {
        char file[4096];
        snprintf(file, sizeof file, "%s/%s", path, names[i]);
        if (rc == SHOAL_OK) rc = read_file(out, file);
        free(names[i]);
    }
    free(names);
    return rc;
}

void sh_tb_run_fini(sh_tb_run *r)
{
    for (int i = 0; i < r->nseries; i++) {
        free(r->series[i].step);
        free(r->series[i].wall_time);
        free(r->series[i].value);
    }
    free(r->series);
    free(r->slots);
    memset(r, 0, sizeof *r);
}

shoal_result sh_tb_run_add(sh_tb_run *r, const char *tag, int64_t step, double wall_time, double value)
{
    return add_point(r, tag, strlen(tag), step, wall_time, value);
}

const sh_tb_series *sh_tb_run_find(const sh_tb_run *r, const char *tag)
{
    if (!r->nslots) return NULL;
    size_t i = find_slot(r, tag, stored_len(tag, strlen(tag)));
    return r->slots[i] >= 0 ? &r->series[r->slots[i]] : NULL;
}
