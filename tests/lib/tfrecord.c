/* tfrecord.c — the tests' TensorBoard event reader (tfrecord.h).
 * TFRecord: u64 length LE | u32 masked_crc32c(length) | data | u32 masked_crc32c(data),
 * masked = ((crc >> 15) | (crc << 17)) + 0xa282ead8. Event: 1 wall_time double, 2 step
 * int64, 3 file_version string, 5 summary; Summary: 1 repeated Value; Value: 1 tag,
 * 2 simple_value float, 5 histo; HistogramProto: 1 min, 2 max, 3 num, 4 sum, 5 sum_squares,
 * 6 bucket_limit, 7 bucket (repeated doubles, packed or not). */
#include "tfrecord.h"

#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

uint32_t tbr_crc32c(const void *data, size_t nbytes)
{
    const uint8_t *b = data;
    uint32_t crc = 0xffffffffu;
    for (size_t i = 0; i < nbytes; i++) {
        crc ^= b[i];
        for (int k = 0; k < 8; k++) crc = crc & 1 ? (crc >> 1) ^ 0x82f63b78u : crc >> 1;
    }
    return ~crc;
}

static uint32_t masked(const uint8_t *b, size_t n)
{
    uint32_t c = tbr_crc32c(b, n);
    return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

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

typedef int (*field_fn)(unsigned field, unsigned wire, uint64_t v, const uint8_t *p, size_t n, void *ctx);

static int walk(const uint8_t *b, size_t n, field_fn fn, void *ctx)
{
    size_t pos = 0;
    while (pos < n) {
        uint64_t key, v = 0;
        if (!varint(b, n, &pos, &key)) return 0;
        unsigned field = (unsigned)(key >> 3), wire = key & 7;
        const uint8_t *p = NULL;
        size_t len = 0;
        if (wire == 0) {
            if (!varint(b, n, &pos, &v)) return 0;
        } else if (wire == 1 || wire == 5) {
            int w = wire == 1 ? 8 : 4;
            if (pos + (size_t)w > n) return 0;
            v = le(b + pos, w);
            pos += (size_t)w;
        } else if (wire == 2) {
            if (!varint(b, n, &pos, &v) || v > n - pos) return 0;
            p = b + pos;
            len = (size_t)v;
            pos += len;
        } else {
            return 0;
        }
        if (!fn(field, wire, v, p, len, ctx)) return 0;
    }
    return 1;
}

static double as_double(uint64_t bits)
{
    double d;
    memcpy(&d, &bits, 8);
    return d;
}

/* A repeated double: packed (wire 2, 8 bytes each) or one per field (wire 1). */
static int add_doubles(double *dst, int *n, unsigned wire, uint64_t v, const uint8_t *p, size_t len)
{
    if (wire == 1) {
        if (*n >= TBR_BUCKETS_MAX) return 0;
        dst[(*n)++] = as_double(v);
        return 1;
    }
    if (wire != 2 || len % 8) return 0;
    for (size_t i = 0; i < len; i += 8) {
        if (*n >= TBR_BUCKETS_MAX) return 0;
        dst[(*n)++] = as_double(le(p + i, 8));
    }
    return 1;
}

static int on_histo(unsigned field, unsigned wire, uint64_t v, const uint8_t *p, size_t n, void *ctx)
{
    tbr_event *e = ctx;
    e->has_histo = 1;
    if (field >= 1 && field <= 5) {
        if (wire != 1) return 0;
        double d = as_double(v);
        if (field == 1) e->hmin = d;
        if (field == 2) e->hmax = d;
        if (field == 3) e->hnum = d;
        if (field == 4) e->hsum = d;
        if (field == 5) e->hsum_sq = d;
        return 1;
    }
    if (field == 6) return add_doubles(e->limit, &e->nlimits, wire, v, p, n);
    if (field == 7) return add_doubles(e->count, &e->ncounts, wire, v, p, n);
    return 1;
}

static int on_value(unsigned field, unsigned wire, uint64_t v, const uint8_t *p, size_t n, void *ctx)
{
    tbr_event *e = ctx;
    if (field == 1 && wire == 2) {
        if (n >= sizeof e->tag) return 0;
        memcpy(e->tag, p, n);
        e->tag[n] = 0;
    }
    if (field == 2 && wire == 5) {
        uint32_t bits = (uint32_t)v;
        memcpy(&e->value, &bits, 4);
        e->has_value = 1;
    }
    if (field == 5 && wire == 2) return walk(p, n, on_histo, ctx);
    return 1;
}

static int on_summary(unsigned field, unsigned wire, uint64_t v, const uint8_t *p, size_t n, void *ctx)
{
    return field == 1 && wire == 2 ? walk(p, n, on_value, ctx) : 1;
}

static int on_event(unsigned field, unsigned wire, uint64_t v, const uint8_t *p, size_t n, void *ctx)
{
    tbr_event *e = ctx;
    if (field == 1 && wire == 1) e->wall_time = as_double(v);
    if (field == 2 && wire == 0) e->step = (int64_t)v;
    if (field == 3 && wire == 2) {
        if (n >= sizeof e->file_version) return 0;
        memcpy(e->file_version, p, n);
        e->file_version[n] = 0;
    }
    if (field == 5 && wire == 2) return walk(p, n, on_summary, ctx);
    return 1;
}

static int read_into(const char *path, tbr_event **ev, int *count, char *err, size_t err_nbytes)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(err, err_nbytes, "cannot open %s", path);
        return -1;
    }
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *buf = malloc((size_t)size + 1);
    size_t n = fread(buf, 1, (size_t)size, f);
    fclose(f);
    size_t pos = 0;
    int rc = 0;
    while (pos < n) {
        if (n - pos < 12) {
            snprintf(err, err_nbytes, "%s: %zu stray bytes at %zu", path, n - pos, pos);
            rc = -1;
            break;
        }
        uint64_t len = le(buf + pos, 8);
        if (masked(buf + pos, 8) != (uint32_t)le(buf + pos + 8, 4)) {
            snprintf(err, err_nbytes, "%s: bad length CRC at %zu", path, pos);
            rc = -1;
            break;
        }
        pos += 12;
        if (len > n - pos || n - pos - len < 4 || masked(buf + pos, (size_t)len) != (uint32_t)le(buf + pos + len, 4)) {
            snprintf(err, err_nbytes, "%s: bad data CRC or length at %zu", path, pos);
            rc = -1;
            break;
        }
        tbr_event *grown = realloc(*ev, (size_t)(*count + 1) * sizeof **ev);
        if (!grown) {
            rc = -1;
            break;
        }
        *ev = grown;
        tbr_event *e = &(*ev)[*count];
        memset(e, 0, sizeof *e);
        if (!walk(buf + pos, (size_t)len, on_event, e)) {
            snprintf(err, err_nbytes, "%s: malformed Event at %zu", path, pos);
            rc = -1;
            break;
        }
        (*count)++;
        pos += (size_t)len + 4;
    }
    free(buf);
    return rc;
}

int tbr_read_file(const char *path, tbr_event **out, char *err, size_t err_nbytes)
{
    int count = 0;
    *out = NULL;
    if (read_into(path, out, &count, err, err_nbytes) != 0) {
        free(*out);
        *out = NULL;
        return -1;
    }
    return count;
}

static int by_name(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

int tbr_read_dir(const char *dir, tbr_event **out, int *nfiles, char *err, size_t err_nbytes)
{
    *out = NULL;
    *nfiles = 0;
    DIR *d = opendir(dir);
    if (!d) {
        snprintf(err, err_nbytes, "cannot open directory %s", dir);
        return -1;
    }
    char *names[64];
    int nn = 0;
    struct dirent *de;
    while ((de = readdir(d)) && nn < 64)
        if (!strncmp(de->d_name, "events.out.tfevents.", 20)) names[nn++] = strdup(de->d_name);
    closedir(d);
    if (nn == 0) { /* a --logdir: the one run's folder in it */
        char run[1024] = "";
        int nruns = 0;
        d = opendir(dir);
        while (d && (de = readdir(d)))
            if (de->d_name[0] != '.' && de->d_type == DT_DIR) {
                snprintf(run, sizeof run, "%s/%s", dir, de->d_name);
                nruns++;
            }
        if (d) closedir(d);
        if (nruns == 1) return tbr_read_dir(run, out, nfiles, err, err_nbytes);
        if (nruns > 1) {
            snprintf(err, err_nbytes, "%s holds %d runs' folders; name one", dir, nruns);
            return -1;
        }
    }
    qsort(names, (size_t)nn, sizeof names[0], by_name);
    int count = 0, rc = 0;
    for (int i = 0; i < nn; i++) {
        char path[1024];
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        if (rc == 0) rc = read_into(path, out, &count, err, err_nbytes);
        free(names[i]);
    }
    *nfiles = nn;
    if (rc != 0) {
        free(*out);
        *out = NULL;
        return -1;
    }
    return count;
}

static const tbr_event *find_scalar(const tbr_event *ev, int n, const char *tag, int64_t step)
{
    for (int i = 0; i < n; i++)
        if (ev[i].has_value && ev[i].step == step && !strcmp(ev[i].tag, tag)) return &ev[i];
    return NULL;
}

int tbr_same_scalars(const char *dir_a, const char *dir_b, const char *tag, int64_t lo, int64_t hi, double rel,
                     char *why, size_t why_nbytes)
{
    tbr_event *a = NULL, *b = NULL;
    int fa = 0, fb = 0, same = 0;
    int na = tbr_read_dir(dir_a, &a, &fa, why, why_nbytes);
    int nb = na > 0 ? tbr_read_dir(dir_b, &b, &fb, why, why_nbytes) : -1;
    if (na > 0 && nb > 0) {
        same = 1;
        for (int64_t s = lo; same && s <= hi; s++) {
            const tbr_event *x = find_scalar(a, na, tag, s), *y = find_scalar(b, nb, tag, s);
            if (!x || !y) {
                snprintf(why, why_nbytes, "%s at step %lld: %s", tag, (long long)s, !x ? dir_a : dir_b);
                same = 0;
            } else if (!(fabs((double)x->value - (double)y->value) <= rel * fabs((double)x->value))) {
                snprintf(why, why_nbytes, "%s at step %lld: %.7g in %s, %.7g in %s", tag, (long long)s, x->value,
                         dir_a, y->value, dir_b);
                same = 0;
            }
        }
    }
    free(a);
    free(b);
    return same;
}
