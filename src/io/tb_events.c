/* tb_events.c — TensorBoard event files (scalars and histograms): TFRecord framing around
 * Event protobufs that are encoded by hand (no protobuf library). Not here: choosing what to
 * log (the trainer, the parameter servers). Proved by tests/io/test_tb_events.c. */
#include <math.h>
#include "io/tb_events.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/err.h"
#include "base/util.h"

/* TFRecord: u64 length (LE) | u32 masked_crc(length bytes) | data | u32 masked_crc(data).
 * Event (tensorflow/core/util/event.proto): 1 wall_time double, 2 step int64,
 * 3 file_version string, 5 summary Summary; Summary: 1 value repeated Value;
 * Value: 1 tag string, 2 simple_value float, 5 histo HistogramProto;
 * HistogramProto (tensorflow/core/framework/summary.proto): 1 min, 2 max, 3 num, 4 sum,
 * 5 sum_squares (doubles), 6 bucket_limit and 7 bucket (packed repeated doubles): bucket i
 * counts the values in (bucket_limit[i-1], bucket_limit[i]], the first from min. */

/* Protobuf wire types. */
#define WIRE_VARINT 0
#define WIRE_FIXED64 1
#define WIRE_LEN 2
#define WIRE_FIXED32 5
#define TAG_NBYTES_MAX 255
#define EVENT_NBYTES_MAX (64 + TAG_NBYTES_MAX + HISTO_NBYTES_MAX)
/* Equal-width buckets between the smallest and largest value: enough to see a distribution's
 * shape, small enough that a histogram of every layer every N steps costs little. */
#define HISTO_BUCKETS 30
#define HISTO_NBYTES_MAX (5 * 9 + 2 * (4 + 8 * HISTO_BUCKETS) + 16)

struct sh_tb {
    FILE *f;
    int autoflush;          /* 1: every record reaches the kernel at once */
    char path[PATH_MAX];
};

uint32_t sh_tb_masked_crc(const void *data, size_t nbytes)
{
    uint32_t crc = sh_crc32c(0, data, nbytes);
    return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

/* A small append-only buffer for one encoded message. */
typedef struct {
    uint8_t b[EVENT_NBYTES_MAX];
    size_t n;
} pbuf;

static void put_varint(pbuf *p, uint64_t v)
{
    do {
        uint8_t byte = v & 0x7f;
        v >>= 7;
        p->b[p->n++] = (uint8_t)(byte | (v ? 0x80 : 0));
    } while (v);
}
static void put_key(pbuf *p, unsigned field, unsigned wire) { put_varint(p, field << 3 | wire); }
static void put_bytes(pbuf *p, unsigned field, const void *data, size_t nbytes)
{
    put_key(p, field, WIRE_LEN);
    put_varint(p, nbytes);
    memcpy(p->b + p->n, data, nbytes);
    p->n += nbytes;
}
static void put_fixed(pbuf *p, unsigned field, unsigned wire, uint64_t bits, int nbytes)
{
    put_key(p, field, wire);
    for (int i = 0; i < nbytes; i++) p->b[p->n++] = (uint8_t)(bits >> (8 * i));
}

static double wall_time_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Event header fields every record carries: wall_time and step. */
static void put_event_head(pbuf *ev, int64_t step)
{
    double wt = wall_time_s();
    uint64_t bits;
    memcpy(&bits, &wt, sizeof bits);
    put_fixed(ev, 1, WIRE_FIXED64, bits, 8);
    /* proto3 leaves a zero out; so the first record is byte for byte what TensorFlow writes. */
    if (step == 0) return;
    put_key(ev, 2, WIRE_VARINT);
    put_varint(ev, (uint64_t)step); /* int64: negatives as 10-byte two's complement */
}

static shoal_result write_record(sh_tb *tb, const pbuf *ev)
{
    uint8_t head[12], tail[4];
    uint64_t len = ev->n;
    for (int i = 0; i < 8; i++) head[i] = (uint8_t)(len >> (8 * i));
    uint32_t c = sh_tb_masked_crc(head, 8);
    for (int i = 0; i < 4; i++) head[8 + i] = (uint8_t)(c >> (8 * i));
    c = sh_tb_masked_crc(ev->b, ev->n);
    for (int i = 0; i < 4; i++) tail[i] = (uint8_t)(c >> (8 * i));
    if (fwrite(head, 1, sizeof head, tb->f) != sizeof head ||
        fwrite(ev->b, 1, ev->n, tb->f) != ev->n ||
        fwrite(tail, 1, sizeof tail, tb->f) != sizeof tail || (tb->autoflush && fflush(tb->f) != 0))
        return SH_FAIL(SHOAL_ERR_IO, "TensorBoard log %s: write failed: %s (disk full?)",
                       tb->path, strerror(errno));
    return SHOAL_OK;
}

/* mkdir -p */
static shoal_result make_dirs(const char *dir)
{
    char p[PATH_MAX];
    if ((size_t)snprintf(p, sizeof p, "%s", dir) >= sizeof p)
        return SH_FAIL(SHOAL_ERR_INVALID, "TensorBoard log directory %s: path too long", dir);
    for (char *s = p + 1;; s++) {
        if (*s == '/' || *s == 0) {
            char keep = *s;
            *s = 0;
            if (mkdir(p, 0755) != 0 && errno != EEXIST)
                return SH_FAIL(SHOAL_ERR_IO, "TensorBoard log directory: cannot create %s: %s",
                               p, strerror(errno));
            *s = keep;
            if (!keep) break;
        }
    }
    struct stat st;
    if (stat(p, &st) != 0 || !S_ISDIR(st.st_mode))
        return SH_FAIL(SHOAL_ERR_IO, "TensorBoard log directory %s is not a directory", dir);
    return SHOAL_OK;
}

shoal_result sh_tb_open(const char *dir, sh_tb **out)
{
    shoal_result rc = SHOAL_OK;
    sh_tb *tb = NULL;
    *out = NULL;
    if (!dir || !*dir) return SH_FAIL(SHOAL_ERR_INVALID, "TensorBoard log directory is empty");
    SH_TRY(make_dirs(dir));
    SH_TRY_GOTO(sh_calloc(1, sizeof *tb, (void **)&tb), rc, done);
    char host[256] = "localhost";
    if (gethostname(host, sizeof host - 1) != 0) snprintf(host, sizeof host, "localhost");
    for (char *h = host; *h; h++)
        if (*h == '/') *h = '_';
    long now = (long)time(NULL);
    int fd = -1;
    /* O_EXCL: two writers started in the same second (ranks, tests) get distinct files. */
    for (int n = 0; n < 1000 && fd < 0; n++) {
        if (n == 0)
            snprintf(tb->path, sizeof tb->path, "%s/events.out.tfevents.%ld.%s", dir, now, host);
        else
            snprintf(tb->path, sizeof tb->path, "%s/events.out.tfevents.%ld.%s.%d", dir, now,
                     host, n);
        fd = open(tb->path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
        if (fd < 0 && errno != EEXIST) break;
    }
    if (fd < 0) {
        rc = SH_FAIL(SHOAL_ERR_IO, "TensorBoard log: cannot create %s: %s", tb->path,
                     strerror(errno));
        goto done;
    }
    tb->autoflush = 1;
    tb->f = fdopen(fd, "wb");
    if (!tb->f) {
        close(fd);
        rc = SH_FAIL(SHOAL_ERR_IO, "TensorBoard log %s: fdopen: %s", tb->path, strerror(errno));
        goto done;
    }
    pbuf ev = {.n = 0};
    put_event_head(&ev, 0);
    static const char version[] = "brain.Event:2";
    put_bytes(&ev, 3, version, sizeof version - 1);
    SH_TRY_GOTO(write_record(tb, &ev), rc, done);
    *out = tb;
    tb = NULL;
done:
    sh_tb_close(tb);
    return rc;
}

shoal_result sh_tb_scalar(sh_tb *tb, const char *tag, int64_t step, float value)
{
    size_t tag_nbytes = tag ? strlen(tag) : 0;
    if (tag_nbytes == 0 || tag_nbytes > TAG_NBYTES_MAX)
        return SH_FAIL(SHOAL_ERR_INVALID, "TensorBoard scalar tag \"%s\" must be 1..%d bytes",
                       tag ? tag : "(null)", TAG_NBYTES_MAX);
    pbuf val = {.n = 0}, sum = {.n = 0}, ev = {.n = 0};
    put_bytes(&val, 1, tag, tag_nbytes);
    uint32_t bits;
    memcpy(&bits, &value, sizeof bits);
    put_fixed(&val, 2, WIRE_FIXED32, bits, 4);
    put_bytes(&sum, 1, val.b, val.n);
    put_event_head(&ev, step);
    put_bytes(&ev, 5, sum.b, sum.n);
    SH_TRY(write_record(tb, &ev));
    return SHOAL_OK;
}

static void put_double(pbuf *p, unsigned field, double v)
{
    uint64_t bits;
    memcpy(&bits, &v, sizeof bits);
    put_fixed(p, field, WIRE_FIXED64, bits, 8);
}

static void put_packed_doubles(pbuf *p, unsigned field, const double *v, int n)
{
    put_key(p, field, WIRE_LEN);
    put_varint(p, (uint64_t)n * 8);
    for (int i = 0; i < n; i++) {
        uint64_t bits;
        memcpy(&bits, &v[i], sizeof bits);
        for (int k = 0; k < 8; k++) p->b[p->n++] = (uint8_t)(bits >> (8 * k));
    }
}

shoal_result sh_tb_histogram(sh_tb *tb, const char *tag, int64_t step, const float *v, size_t count)
{
    size_t tag_nbytes = tag ? strlen(tag) : 0;
    if (tag_nbytes == 0 || tag_nbytes > TAG_NBYTES_MAX)
        return SH_FAIL(SHOAL_ERR_INVALID, "TensorBoard histogram tag \"%s\" must be 1..%d bytes",
                       tag ? tag : "(null)", TAG_NBYTES_MAX);
    double mn = INFINITY, mx = -INFINITY, sum = 0, sum_sq = 0, num = 0;
    for (size_t i = 0; i < count; i++) {
        double x = v[i];
        if (!isfinite(x)) continue; /* a NaN would make every bucket meaningless */
        if (x < mn) mn = x;
        if (x > mx) mx = x;
        sum += x;
        sum_sq += x * x;
        num++;
    }
    if (num == 0) mn = mx = 0;
    double limit[HISTO_BUCKETS], bucket[HISTO_BUCKETS] = {0};
    double width = (mx - mn) / HISTO_BUCKETS;
    for (int k = 0; k < HISTO_BUCKETS; k++) limit[k] = mn + width * (k + 1);
    limit[HISTO_BUCKETS - 1] = mx; /* exact, whatever the rounding above */
    for (size_t i = 0; i < count; i++) {
        double x = v[i];
        if (!isfinite(x)) continue;
        int k = width > 0 ? (int)((x - mn) / width) : 0;
        if (k >= HISTO_BUCKETS) k = HISTO_BUCKETS - 1;
        if (k > 0 && x <= limit[k - 1]) k--; /* (limit[k-1], limit[k]] */
        bucket[k]++;
    }
    pbuf h = {.n = 0}, val = {.n = 0}, sumy = {.n = 0}, ev = {.n = 0};
    put_double(&h, 1, mn);
    put_double(&h, 2, mx);
    put_double(&h, 3, num);
    put_double(&h, 4, sum);
    put_double(&h, 5, sum_sq);
    put_packed_doubles(&h, 6, limit, HISTO_BUCKETS);
    put_packed_doubles(&h, 7, bucket, HISTO_BUCKETS);
    put_bytes(&val, 1, tag, tag_nbytes);
    put_bytes(&val, 5, h.b, h.n);
    put_bytes(&sumy, 1, val.b, val.n);
    put_event_head(&ev, step);
    put_bytes(&ev, 5, sumy.b, sumy.n);
    SH_TRY(write_record(tb, &ev));
    return SHOAL_OK;
}

void sh_tb_set_autoflush(sh_tb *tb, int on) { tb->autoflush = on; }

shoal_result sh_tb_flush(sh_tb *tb)
{
    if (fflush(tb->f) != 0)
        return SH_FAIL(SHOAL_ERR_IO, "TensorBoard log %s: write failed: %s (disk full?)", tb->path,
                       strerror(errno));
    return SHOAL_OK;
}

const char *sh_tb_path(const sh_tb *tb) { return tb->path; }

void sh_tb_close(sh_tb *tb)
{
    if (!tb) return;
    if (tb->f) fclose(tb->f);
    free(tb);
}
