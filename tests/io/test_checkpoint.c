/* test_checkpoint.c — proves src/io/checkpoint.c: sections round-trip; truncated, damaged and
 * foreign files are refused with clear messages; sections missing or of another size are named;
 * a writer killed mid-save leaves the previous checkpoint intact and loadable. */
#include <errno.h>
#include <glob.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "base/err.h"
#include "base/util.h"
#include "check.h"
#include "io/checkpoint.h"

static char dir[64];

static float w1[1000], w2[37];
static int64_t step_no;

static void fill(uint32_t seed)
{
    for (int i = 0; i < 1000; i++) w1[i] = (float)(i * 0.5 + seed);
    for (int i = 0; i < 37; i++) w2[i] = (float)(-i - (int)seed);
    step_no = 1000 + seed;
}

static void secs_init(sh_ckpt_section *s)
{
    s[0] = (sh_ckpt_section){"weights", w1, sizeof w1};
    s[1] = (sh_ckpt_section){"bias", w2, sizeof w2};
    s[2] = (sh_ckpt_section){"step", &step_no, sizeof step_no};
}

static void path_of(char *out, const char *name) { snprintf(out, 256, "%s/%s", dir, name); }

static long file_nbytes(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 ? (long)st.st_size : -1;
}

static void copy_prefix(const char *from, const char *to, long nbytes)
{
    FILE *a = fopen(from, "rb"), *b = fopen(to, "wb");
    CHECK(a && b, "open %s %s", from, to);
    for (long i = 0; a && b && i < nbytes; i++) {
        int c = fgetc(a);
        if (c == EOF) break;
        fputc(c, b);
    }
    if (a) fclose(a);
    if (b) fclose(b);
}

static void expect_refusal(const char *path, const char *want1, const char *want2)
{
    sh_ckpt_section s[3];
    secs_init(s);
    CHECK_RC(sh_ckpt_load(path, s, 3), SHOAL_ERR_FORMAT);
    const char *m = shoal_last_error_message();
    CHECK(strstr(m, want1) != NULL, "message \"%s\" lacks \"%s\"", m, want1);
    if (want2) CHECK(strstr(m, want2) != NULL, "message \"%s\" lacks \"%s\"", m, want2);
}

/* Temporaries of path: PATH.tmp.* beside it (atomic_file.c's random names). */
static int count_temporaries(const char *path)
{
    char pat[320];
    snprintf(pat, sizeof pat, "%s.tmp.*", path);
    glob_t g;
    int n = glob(pat, 0, NULL, &g) == 0 ? (int)g.gl_pathc : 0;
    if (n) globfree(&g);
    return n;
}

static void remove_temporaries(const char *path)
{
    char pat[320];
    snprintf(pat, sizeof pat, "%s.tmp.*", path);
    glob_t g;
    if (glob(pat, 0, NULL, &g) != 0) return;
    for (size_t i = 0; i < g.gl_pathc; i++) unlink(g.gl_pathv[i]);
    globfree(&g);
}

static void sections_round_trip_in_any_order(void)
{
    char p[256];
    path_of(p, "rt.ckpt");
    sh_ckpt_section s[3];
    secs_init(s);
    fill(3);
    CHECK_OK(sh_ckpt_save(p, s, 3));
    fill(99);
    /* read a subset, in another order */
    sh_ckpt_section sub[2] = {s[2], s[0]};
    CHECK_OK(sh_ckpt_load(p, sub, 2));
    CHECK(step_no == 1003 && w1[10] == 5.f + 3 && w2[1] == -100.f, "step %lld w1 %g w2 %g",
          (long long)step_no, w1[10], w2[1]);
    CHECK_OK(sh_ckpt_load(p, s, 3));
    CHECK(w2[1] == -4.f, "bias restored: %g", w2[1]);
    /* empty section and empty checkpoint */
    sh_ckpt_section e[1] = {{"nothing", NULL, 0}};
    CHECK_OK(sh_ckpt_save(p, e, 1));
    CHECK_OK(sh_ckpt_load(p, e, 1));
    CHECK_OK(sh_ckpt_save(p, NULL, 0));
    CHECK_OK(sh_ckpt_load(p, NULL, 0));
    /* no temporary left behind */
    CHECK(count_temporaries(p) == 0, "%d temporaries of %s left", count_temporaries(p), p);
}

static void truncated_file_is_refused_at_every_cut(void)
{
    char p[256], t[256];
    path_of(p, "whole.ckpt");
    path_of(t, "cut.ckpt");
    sh_ckpt_section s[3];
    secs_init(s);
    fill(1);
    CHECK_OK(sh_ckpt_save(p, s, 3));
    long n = file_nbytes(p);
    CHECK(n == 16 + 3 * 44 + 4000 + 148 + 8 + 4, "file is %ld bytes", n);
    /* inside the magic, the header, a section head, section data, between sections, the trailer */
    const long cuts[] = {0, 3, 8, 12, 16, 30, 60, 500, 16 + 44 + 4000, 16 + 44 + 4000 + 20,
                         n - 12, n - 4, n - 1};
    for (size_t i = 0; i < sizeof cuts / sizeof cuts[0]; i++) {
        copy_prefix(p, t, cuts[i]);
        expect_refusal(t, "truncated", "cut.ckpt");
    }
}

static void flipped_byte_is_a_checksum_mismatch(void)
{
    char p[256], t[256];
    path_of(p, "whole.ckpt");
    path_of(t, "flip.ckpt");
    long n = file_nbytes(p);
    /* in data of each section, and in the section table (a name byte, a crc byte) */
    const long at[] = {16 + 44 + 7, 16 + 44 + 3999, 16 + 88 + 4000 + 100, n - 6, 16 + 2,
                       16 + 44 + 4000 + 41};
    for (size_t i = 0; i < sizeof at / sizeof at[0]; i++) {
        copy_prefix(p, t, n);
        FILE *f = fopen(t, "r+b");
        if (!f) continue;
        fseek(f, at[i], SEEK_SET);
        int c = fgetc(f);
        fseek(f, at[i], SEEK_SET);
        fputc(c ^ 0x10, f);
        fclose(f);
        expect_refusal(t, "checksum mismatch", "the file is damaged");
    }
}

static void foreign_files_are_not_shoal_checkpoints(void)
{
    char t[256];
    path_of(t, "foreign.txt");
    FILE *f = fopen(t, "w");
    if (f) fputs("epoch=3\nlr=0.1\nthis is a text file, long enough to look like a header\n", f),
        fclose(f);
    expect_refusal(t, "not a shoal checkpoint", "foreign.txt");
    sh_rng r;
    sh_rng_seed(&r, 7);
    f = fopen(t, "wb");
    for (int i = 0; f && i < 5000; i++) fputc((int)sh_rng_below(&r, 256), f);
    if (f) fclose(f);
    expect_refusal(t, "not a shoal checkpoint", NULL);
    /* a newer version */
    char p[256];
    path_of(p, "whole.ckpt");
    copy_prefix(p, t, file_nbytes(p));
    f = fopen(t, "r+b");
    if (f) fseek(f, 8, SEEK_SET), fputc(9, f), fclose(f);
    expect_refusal(t, "version 9 is newer", "upgrade shoal");
    /* a missing file is an I/O error naming it */
    path_of(t, "absent.ckpt");
    sh_ckpt_section s[3];
    secs_init(s);
    CHECK_RC(sh_ckpt_load(t, s, 3), SHOAL_ERR_IO);
    CHECK(strstr(shoal_last_error_message(), "absent.ckpt"), "%s", shoal_last_error_message());
}

static void other_model_is_named_by_section_and_sizes(void)
{
    char p[256];
    path_of(p, "whole.ckpt");
    float bigger[40];
    sh_ckpt_section s[2] = {{"weights", w1, sizeof w1}, {"bias", bigger, sizeof bigger}};
    CHECK_RC(sh_ckpt_load(p, s, 2), SHOAL_ERR_FORMAT);
    const char *m = shoal_last_error_message();
    CHECK(strstr(m, "\"bias\"") && strstr(m, "148 bytes in the file but 160 bytes here") &&
              strstr(m, "another model"),
          "message: %s", m);
    sh_ckpt_section miss[2] = {{"weights", w1, sizeof w1}, {"momentum", bigger, sizeof bigger}};
    CHECK_RC(sh_ckpt_load(p, miss, 2), SHOAL_ERR_FORMAT);
    m = shoal_last_error_message();
    CHECK(strstr(m, "\"momentum\" missing") && strstr(m, "weights, bias, step"), "message: %s", m);
}

static void bad_section_names_are_refused_on_save(void)
{
    char p[256];
    path_of(p, "names.ckpt");
    sh_ckpt_section s[2] = {{"a", w1, 4}, {"a", w2, 4}};
    CHECK_RC(sh_ckpt_save(p, s, 2), SHOAL_ERR_INVALID);
    s[1].name = "a-name-that-is-far-too-long-for-32-bytes";
    CHECK_RC(sh_ckpt_save(p, s, 2), SHOAL_ERR_INVALID);
    CHECK(access(p, F_OK) != 0, "nothing written");
    char nodir[256];
    path_of(nodir, "no/such/dir/x.ckpt");
    CHECK_RC(sh_ckpt_save(nodir, s, 1), SHOAL_ERR_IO);
    CHECK(strstr(shoal_last_error_message(), "does the directory exist"), "%s",
          shoal_last_error_message());
}

static void every_single_byte_damage_or_cut_is_refused(void)
{
    char p[256], t[256];
    path_of(p, "small.ckpt");
    path_of(t, "damaged.ckpt");
    uint8_t a[10], b[3];
    for (int i = 0; i < 10; i++) a[i] = (uint8_t)(i * 11);
    b[0] = 1, b[1] = 2, b[2] = 3;
    sh_ckpt_section s[2] = {{"a", a, sizeof a}, {"bee", b, sizeof b}};
    CHECK_OK(sh_ckpt_save(p, s, 2));
    long n = file_nbytes(p);
    uint8_t whole[256];
    FILE *f = fopen(p, "rb");
    CHECK(f && n == 16 + 2 * 44 + 13 + 4 && fread(whole, 1, (size_t)n, f) == (size_t)n,
          "read %ld bytes", n);
    if (f) fclose(f);
    int refused = 0, cut_refused = 0;
    for (long i = 0; i < n; i++) {
        /* Every byte is covered by a check: the table by the trailer, data by its section's
         * CRC, the trailer by itself. */
        for (int bit = 0; bit < 8; bit += 7) {
            whole[i] ^= (uint8_t)(1u << bit);
            f = fopen(t, "wb");
            if (f) fwrite(whole, 1, (size_t)n, f), fclose(f);
            whole[i] ^= (uint8_t)(1u << bit);
            refused += sh_ckpt_load(t, s, 2) == SHOAL_ERR_FORMAT;
        }
        copy_prefix(p, t, i);
        cut_refused += sh_ckpt_load(t, s, 2) == SHOAL_ERR_FORMAT;
    }
    CHECK(refused == 2 * n, "%d of %ld single-bit flips refused", refused, 2 * n);
    CHECK(cut_refused == n, "%d of %ld cuts refused", cut_refused, n);
    /* and the intact file still loads */
    CHECK_OK(sh_ckpt_load(p, s, 2));
    CHECK(a[9] == 99 && b[2] == 3, "values back");
}

/* A big checkpoint: each save fills every float with the save's number. */
#define BIG_COUNT (4 << 20)

static int big_is_uniform(const float *big, float *value)
{
    for (size_t i = 1; i < BIG_COUNT; i++)
        if (big[i] != big[0]) return 0;
    *value = big[0];
    return 1;
}

/* Saves base+1, base+2, ... until killed: each round's child writes values above every
 * earlier round's, so a loaded value older than the last one seen means a lost save. */
/* Counts in the file are claims checked against the file's size before anything is
 * allocated from them (the IDX reader once allocated what its header claimed): 2^32-1
 * sections, or a section of 2^60 bytes, in a file of a few hundred bytes is refused as
 * damaged or truncated, naming the file. */
static void huge_counts_in_the_table_are_refused_before_allocating(void)
{
    char good[256], bad[256];
    path_of(good, "claims.ckpt");
    path_of(bad, "claims-bad.ckpt");
    fill(3);
    sh_ckpt_section s[3];
    secs_init(s);
    CHECK_OK(sh_ckpt_save(good, s, 3));
    FILE *f = fopen(good, "rb");
    static uint8_t buf[8192];
    size_t n = f ? fread(buf, 1, sizeof buf, f) : 0;
    if (f) fclose(f);
    CHECK(n > 16 + 44 && n < sizeof buf, "checkpoint is %zu bytes", n);
    uint8_t nsec_max[4] = {0xff, 0xff, 0xff, 0xff}, saved[8];
    memcpy(saved, buf + 12, 4);
    memcpy(buf + 12, nsec_max, 4);
    f = fopen(bad, "wb");
    if (f) fwrite(buf, 1, n, f), fclose(f);
    expect_refusal(bad, "header lists 4294967295 sections, more than the", "claims-bad.ckpt");
    memcpy(buf + 12, saved, 4);
    uint8_t huge[8] = {0, 0, 0, 0, 0, 0, 0, 0x10}; /* 2^60, little-endian */
    memcpy(buf + 16 + 32, huge, 8);
    f = fopen(bad, "wb");
    if (f) fwrite(buf, 1, n, f), fclose(f);
    expect_refusal(bad, "truncated", "section \"weights\" (1152921504606846976 bytes)");
}

static void child_saves_forever(const char *p, float *big, int limit_fsize, int base)
{
    if (limit_fsize) {
        /* The kernel stops the writer with SIGXFSZ once the file passes 1 MiB: a crash at an
         * exact point in the middle of the data. No core file. */
        struct rlimit core = {0, 0}, fsz = {1 << 20, 1 << 20};
        setrlimit(RLIMIT_CORE, &core);
        setrlimit(RLIMIT_FSIZE, &fsz);
    }
    for (int k = 1;; k++) {
        for (size_t i = 0; i < BIG_COUNT; i++) big[i] = (float)(base + k);
        sh_ckpt_section s = {"big", big, BIG_COUNT * sizeof(float)};
        if (sh_ckpt_save(p, &s, 1) != SHOAL_OK) _exit(3);
    }
}

static void killed_writer_leaves_previous_checkpoint_loadable(void)
{
    char p[256];
    path_of(p, "big.ckpt");
    float *big = malloc(BIG_COUNT * sizeof(float));
    CHECK(big != NULL, "malloc");
    if (!big) return;
    for (size_t i = 0; i < BIG_COUNT; i++) big[i] = 0.f;
    sh_ckpt_section s = {"big", big, BIG_COUNT * sizeof(float)};
    CHECK_OK(sh_ckpt_save(p, &s, 1));
    int rounds = check_under_san() ? 2 : 4;
    float last = 0.f;
    for (int round = 0; round <= rounds; round++) {
        int by_fsize = round == 0;
        pid_t pid = fork();
        if (pid == 0) child_saves_forever(p, big, by_fsize, round * 100000);
        CHECK(pid > 0, "fork: %s", strerror(errno));
        if (pid < 0) break;
        if (!by_fsize) {
            /* Kill at a different moment each round: mid-write of the first save, or later. */
            struct timespec ts = {0, (long)(round * 37 + 5) * 1000000L};
            nanosleep(&ts, NULL);
            kill(pid, SIGKILL);
        }
        int st = 0;
        waitpid(pid, &st, 0);
        CHECK(WIFSIGNALED(st), "child died by a signal (status 0x%x)", st);
        if (by_fsize) CHECK(WIFSIGNALED(st) && WTERMSIG(st) == SIGXFSZ, "SIGXFSZ mid-write");
        for (size_t i = 0; i < BIG_COUNT; i++) big[i] = -1.f;
        CHECK_OK(sh_ckpt_load(p, &s, 1));
        float v = -1.f;
        CHECK(big_is_uniform(big, &v), "round %d: loaded file is one whole save", round);
        CHECK(v >= last, "round %d: value %g not older than %g", round, v, last);
        if (by_fsize) CHECK(v == 0.f, "the interrupted save left the old file: %g", v);
        last = v;
        remove_temporaries(p); /* what a crashed writer leaves; never the checkpoint itself */
    }
    free(big);
}

int main(void)
{
    check_begin("test_checkpoint", 60);
    snprintf(dir, sizeof dir, "/tmp/shoal-test-ckpt-XXXXXX");
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    RUN(sections_round_trip_in_any_order);
    RUN(truncated_file_is_refused_at_every_cut);
    RUN(flipped_byte_is_a_checksum_mismatch);
    RUN(foreign_files_are_not_shoal_checkpoints);
    RUN(other_model_is_named_by_section_and_sizes);
    RUN(bad_section_names_are_refused_on_save);
    RUN(every_single_byte_damage_or_cut_is_refused);
    RUN(huge_counts_in_the_table_are_refused_before_allocating);
    RUN(killed_writer_leaves_previous_checkpoint_loadable);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
    return check_end();
}
