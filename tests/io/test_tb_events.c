/* test_tb_events.c — proves src/io/tb_events.c: the event file is a valid TFRecord stream
 * (lengths and masked CRC-32Cs check), the first Event holds file_version "brain.Event:2" and
 * each scalar decodes back to its tag, step, value and a current wall time. Decoded by the
 * tests' independent reader, tests/lib/tfrecord.c (TensorBoard's own is not installed on the
 * test machine). */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/err.h"
#include "base/util.h"
#include "check.h"
#include "io/tb_events.h"
#include "lib/tfrecord.h"

static char dir[64];

static void masked_crc_follows_tfrecord_definition(void)
{
    /* CRC-32C("123456789") = 0xE3069283; masked by hand: rotate right 15, add the delta. */
    uint32_t c = 0xE3069283u, want = ((c >> 15) | (c << 17)) + 0xa282ead8u;
    CHECK(sh_tb_masked_crc("123456789", 9) == want, "masked %08x want %08x",
          sh_tb_masked_crc("123456789", 9), want);
}

static double real_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void scalars_read_back_with_tags_steps_and_values(void)
{
    char logdir[128];
    snprintf(logdir, sizeof logdir, "%s/run/a", dir); /* parents are created */
    sh_tb *tb = NULL;
    /* time() reads the coarse clock, up to a tick behind CLOCK_REALTIME that the writer
     * stamps with: a record at x.005 s and time() = x - 1 tick made "after" too early once. */
    double before = real_now() - 1;
    CHECK_OK(sh_tb_open(logdir, &tb));
    if (!tb) return;
    const char *path = sh_tb_path(tb);
    CHECK(strstr(path, "/events.out.tfevents.") != NULL, "file name %s", path);
    for (int s = 0; s < 5; s++) {
        CHECK_OK(sh_tb_scalar(tb, "train/loss", s * 100, 2.5f / (float)(s + 1)));
        CHECK_OK(sh_tb_scalar(tb, "train/accuracy", s * 100, 0.1f * (float)s));
    }
    CHECK_OK(sh_tb_scalar(tb, "neg", -3, -1e-7f));
    CHECK_RC(sh_tb_scalar(tb, "", 0, 0.f), SHOAL_ERR_INVALID);
    /* records are visible before close (TensorBoard reads live runs) */
    tbr_event *ev = NULL;
    char err[256] = "";
    int n = tbr_read_file(path, &ev, err, sizeof err);
    CHECK(n == 12, "12 records before close, got %d (%s)", n, err);
    free(ev);
    char saved[512];
    snprintf(saved, sizeof saved, "%s", path);
    sh_tb_close(tb);
    double after = real_now() + 1;
    n = tbr_read_file(saved, &ev, err, sizeof err);
    CHECK(n == 12, "records %d (%s)", n, err);
    if (n != 12) {
        free(ev);
        return;
    }
    CHECK(strcmp(ev[0].file_version, "brain.Event:2") == 0, "version \"%s\"", ev[0].file_version);
    /* Every TensorFlow event file starts with these 12 bytes: length 24 (wall_time 9 bytes,
     * file_version 15) and its masked CRC, 0x224b7fa3. */
    static const uint8_t tf_prefix[12] = {0x18, 0, 0, 0, 0, 0, 0, 0, 0xa3, 0x7f, 0x4b, 0x22};
    uint8_t got[12] = {0};
    FILE *f = fopen(saved, "rb");
    if (f) {
        CHECK(fread(got, 1, 12, f) == 12, "read prefix");
        fclose(f);
    }
    CHECK(memcmp(got, tf_prefix, 12) == 0, "file starts like TensorFlow's: %02x %02x .. %02x",
          got[0], got[1], got[8]);
    int ok = 1;
    for (int s = 0; s < 5; s++) {
        const tbr_event *l = &ev[1 + 2 * s], *a = &ev[2 + 2 * s];
        ok &= strcmp(l->tag, "train/loss") == 0 && l->step == s * 100 && l->has_value &&
              l->value == 2.5f / (float)(s + 1);
        ok &= strcmp(a->tag, "train/accuracy") == 0 && a->step == s * 100 &&
              a->value == 0.1f * (float)s;
    }
    CHECK(ok, "tags, steps and values decode to what was written");
    CHECK(ev[11].step == -3 && ev[11].value == -1e-7f && strcmp(ev[11].tag, "neg") == 0,
          "negative step %lld value %g", (long long)ev[11].step, ev[11].value);
    int times = 1;
    for (int i = 0; i < n; i++) times &= ev[i].wall_time >= before && ev[i].wall_time <= after;
    CHECK(times, "wall times are now (%f)", ev[0].wall_time);
    free(ev);
}

static void two_writers_in_one_second_get_two_files(void)
{
    char logdir[128];
    snprintf(logdir, sizeof logdir, "%s/two", dir);
    sh_tb *a = NULL, *b = NULL;
    CHECK_OK(sh_tb_open(logdir, &a));
    CHECK_OK(sh_tb_open(logdir, &b));
    if (a && b) CHECK(strcmp(sh_tb_path(a), sh_tb_path(b)) != 0, "distinct: %s", sh_tb_path(a));
    sh_tb_close(a);
    sh_tb_close(b);
    int files = 0;
    DIR *d = opendir(logdir);
    for (struct dirent *e; d && (e = readdir(d));) files += strstr(e->d_name, "tfevents") != NULL;
    if (d) closedir(d);
    CHECK(files == 2, "files %d", files);
    /* a file where the directory should be is refused with its name */
    char blocker[160];
    snprintf(blocker, sizeof blocker, "%s/blocker", dir);
    FILE *f = fopen(blocker, "w");
    if (f) fclose(f);
    CHECK_RC(sh_tb_open(blocker, &a), SHOAL_ERR_IO);
    CHECK(strstr(shoal_last_error_message(), "blocker"), "%s", shoal_last_error_message());
}

/* The same file through Google's protobuf library (python3-protobuf) when it is installed:
 * a decoder that shares no code with ours. Event, Summary and Value as in TensorFlow's
 * event.proto / summary.proto, built from descriptors so no .proto compiler is needed. */
static const char *const pb_reader_py =
    "import sys, struct\n"
    "from google.protobuf import descriptor_pb2, descriptor_pool, message_factory\n"
    "f = descriptor_pb2.FileDescriptorProto(name='e.proto', package='t', syntax='proto3')\n"
    "h = f.message_type.add(name='HistogramProto')\n"
    "for i, n in enumerate(['min', 'max', 'num', 'sum', 'sum_squares'], 1):\n"
    "    h.field.add(name=n, number=i, type=1, label=1)\n"
    "for i, n in ((6, 'bucket_limit'), (7, 'bucket')):\n"
    "    h.field.add(name=n, number=i, type=1, label=3,\n"
    "                options=descriptor_pb2.FieldOptions(packed=True))\n"
    "v = f.message_type.add(name='Value')\n"
    "v.field.add(name='tag', number=1, type=9, label=1)\n"
    "v.field.add(name='simple_value', number=2, type=2, label=1)\n"
    "v.field.add(name='histo', number=5, type=11, label=1, type_name='.t.HistogramProto')\n"
    "s = f.message_type.add(name='Summary')\n"
    "s.field.add(name='value', number=1, type=11, label=3, type_name='.t.Value')\n"
    "e = f.message_type.add(name='Event')\n"
    "e.field.add(name='wall_time', number=1, type=1, label=1)\n"
    "e.field.add(name='step', number=2, type=3, label=1)\n"
    "e.field.add(name='file_version', number=3, type=9, label=1)\n"
    "e.field.add(name='summary', number=5, type=11, label=1, type_name='.t.Summary')\n"
    "pool = descriptor_pool.DescriptorPool(); pool.Add(f)\n"
    "Event = message_factory.MessageFactory(pool).GetPrototype(\n"
    "    pool.FindMessageTypeByName('t.Event'))\n"
    "data = open(sys.argv[1], 'rb').read(); pos = 0\n"
    "while pos < len(data):\n"
    "    (n,) = struct.unpack_from('<Q', data, pos); pos += 12\n"
    "    ev = Event(); ev.ParseFromString(data[pos:pos + n]); pos += n + 4\n"
    "    for x in ev.summary.value:\n"
    "        if x.HasField('histo'):\n"
    "            g = x.histo\n"
    "            print(ev.step, x.tag, g.min, g.max, g.num, g.sum, g.sum_squares, len(g.bucket_limit),\n"
    "                  sum(g.bucket), g.bucket_limit[-1])\n"
    "        else: print(ev.step, x.tag, repr(x.simple_value))\n"
    "    if ev.file_version: print('version', ev.file_version)\n";

static void protobuf_library_decodes_the_same_events(void)
{
    if (system("/usr/bin/python3 -c 'import google.protobuf' 2>/dev/null") != 0) {
        printf("skip protobuf_library_decodes_the_same_events: python3-protobuf not installed\n");
        return;
    }
    char logdir[128], script[160], cmd[512];
    snprintf(logdir, sizeof logdir, "%s/pb", dir);
    snprintf(script, sizeof script, "%s/read.py", dir);
    FILE *f = fopen(script, "w");
    if (f) fputs(pb_reader_py, f), fclose(f);
    sh_tb *tb = NULL;
    CHECK_OK(sh_tb_open(logdir, &tb));
    if (!tb) return;
    CHECK_OK(sh_tb_scalar(tb, "train/loss", 7, 0.125f));
    CHECK_OK(sh_tb_scalar(tb, "test/accuracy", 1234567890123LL, 0.875f));
    CHECK_OK(sh_tb_scalar(tb, "neg", -2, -3.5f));
    const float hv[4] = {-1, 0.5f, 2, 2};
    CHECK_OK(sh_tb_histogram(tb, "weights/conv 0", 9, hv, 4));
    snprintf(cmd, sizeof cmd, "/usr/bin/python3 %s %s", script, sh_tb_path(tb));
    sh_tb_close(tb);
    char out[1024] = "";
    FILE *p = popen(cmd, "r");
    size_t n = p ? fread(out, 1, sizeof out - 1, p) : 0;
    out[n] = 0;
    int st = p ? pclose(p) : -1;
    CHECK(st == 0, "python reader exit status %d: %s", st, out);
    CHECK(strcmp(out, "version brain.Event:2\n7 train/loss 0.125\n1234567890123 test/accuracy "
                      "0.875\n-2 neg -3.5\n9 weights/conv 0 -1.0 2.0 4.0 3.5 9.25 30 4.0 2.0\n") == 0,
          "protobuf decoded:\n%s", out);
}

/* 1..10, a NaN and 0.5 five times: statistics over the 15 finite values, 30 buckets that
 * count each value once, in (limit[k-1], limit[k]], and a buffered writer that shows its
 * records after sh_tb_flush. */
static void histogram_reads_back_with_exact_statistics(void)
{
    char logdir[128];
    snprintf(logdir, sizeof logdir, "%s/histo", dir);
    sh_tb *tb = NULL;
    CHECK_OK(sh_tb_open(logdir, &tb));
    if (!tb) return;
    sh_tb_set_autoflush(tb, 0);
    float v[16];
    double sum = 0, sum_sq = 0;
    for (int i = 0; i < 10; i++) v[i] = (float)(i + 1);
    for (int i = 10; i < 15; i++) v[i] = 0.5f;
    for (int i = 0; i < 15; i++) sum += v[i], sum_sq += (double)v[i] * v[i];
    v[15] = NAN;
    CHECK_OK(sh_tb_histogram(tb, "weights/conv 0", 7, v, 16));
    CHECK_OK(sh_tb_histogram(tb, "empty", 8, v, 0));
    CHECK_OK(sh_tb_flush(tb));
    char path[512], err[256] = "";
    snprintf(path, sizeof path, "%s", sh_tb_path(tb));
    tbr_event *ev = NULL;
    int n = tbr_read_file(path, &ev, err, sizeof err);
    CHECK(n == 3, "records after flush: %d (%s)", n, err);
    if (n == 3) {
        const tbr_event *h = &ev[1];
        CHECK(!strcmp(h->tag, "weights/conv 0") && h->step == 7 && h->has_histo && !h->has_value, "tag %s step %lld",
              h->tag, (long long)h->step);
        CHECK(h->hmin == 0.5 && h->hmax == 10 && h->hnum == 15, "min %g max %g num %g", h->hmin, h->hmax, h->hnum);
        CHECK_NEAR(h->hsum, sum, 1e-9);
        CHECK_NEAR(h->hsum_sq, sum_sq, 1e-9);
        CHECK(h->nlimits == 30 && h->ncounts == 30, "%d limits %d buckets", h->nlimits, h->ncounts);
        int placed = 1;
        for (int i = 0; i < 15 && h->nlimits == 30; i++) {
            int k = 0;
            while (k < 29 && v[i] > h->limit[k]) k++; /* the bucket whose (lo, hi] holds it */
            double got = h->count[k];
            placed &= got >= 1;
        }
        double total = 0;
        for (int k = 0; k < h->ncounts; k++) total += h->count[k];
        CHECK(placed && total == 15, "bucket counts add to %g", total);
        CHECK(h->count[0] == 5, "the five 0.5s in the first bucket: %g", h->count[0]);
        CHECK(ev[2].has_histo && ev[2].hnum == 0, "empty histogram: num %g", ev[2].hnum);
    }
    free(ev);
    sh_tb_close(tb);
}

int main(void)
{
    check_begin("test_tb_events", 20);
    snprintf(dir, sizeof dir, "/tmp/shoal-test-tb-XXXXXX");
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    RUN(masked_crc_follows_tfrecord_definition);
    RUN(scalars_read_back_with_tags_steps_and_values);
    RUN(two_writers_in_one_second_get_two_files);
    RUN(protobuf_library_decodes_the_same_events);
    RUN(histogram_reads_back_with_exact_statistics);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
    return check_end();
}
