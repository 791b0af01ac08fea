/* driver.c — runs one libFuzzer target without clang, as a test binary of `make test` and
 * `make test-san`: every file of its seed corpus, then deterministic pseudo-random mutations
 * of them (bit flips, interesting bytes and integers, truncations, insertions, duplicated
 * and spliced chunks) until a time budget (FUZZ_SMOKE_MS, default 2000 ms) or an iteration
 * cap (FUZZ_SMOKE_ITERS, default 20000) runs out.
 * Include it after the target: tests/fuzz/test_fuzz_<name>.c is
 *     #define FUZZ_NAME "cfg"
 *     #include "fuzz_cfg.c"
 *     #include "driver.c"
 * It counts one check per seed and one for all the mutations (a run that returns at all).
 * A finding is a crash or a sanitizer report: the driver saves the input being run to
 * $TMPDIR/fuzz-<name>-crash.bin first and prints its path, then the process dies and
 * run-tests.sh counts the binary as failed. Inputs that return are counted as passed.
 * Not here: coverage guidance (that is libFuzzer's job, scripts/fuzz.sh). */
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "check.h"

#ifndef FUZZ_NAME
#error "define FUZZ_NAME before including driver.c"
#endif

enum { DRIVER_MAX_SEEDS = 256, DRIVER_MAX_LEN = 1 << 16 };

static const uint8_t *driver_cur;
static size_t driver_cur_size;
static char driver_crash_path[256];

/* Async-signal-safe: open/write/close only. */
static void driver_save_current(void)
{
    if (!driver_cur) return;
    int fd = open(driver_crash_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) return;
    (void)!write(fd, driver_cur, driver_cur_size);
    close(fd);
    static const char pre[] = "fuzz driver: the input that failed is saved in ";
    (void)!write(2, pre, sizeof pre - 1);
    (void)!write(2, driver_crash_path, strlen(driver_crash_path));
    (void)!write(2, "\n", 1);
    driver_cur = NULL;
}

static void driver_on_signal(int sig)
{
    driver_save_current();
    signal(sig, SIG_DFL);
    raise(sig);
}

/* Sanitizers call this before they exit on a report (weak: absent in a plain gcc build). */
void __sanitizer_set_death_callback(void (*cb)(void)) __attribute__((weak));

static uint64_t driver_rng = 0x9e3779b97f4a7c15ull;
static uint64_t driver_next(void)
{
    driver_rng ^= driver_rng << 13;
    driver_rng ^= driver_rng >> 7;
    driver_rng ^= driver_rng << 17;
    return driver_rng;
}
static size_t driver_below(size_t n) { return n ? (size_t)(driver_next() % n) : 0; }

typedef struct {
    uint8_t *data;
    size_t size;
} driver_buf;

static driver_buf driver_seeds[DRIVER_MAX_SEEDS];
static int driver_nseeds;

static void driver_load_seeds(const char *dir)
{
    DIR *d = opendir(dir);
    CHECK(d != NULL, "seed corpus %s missing; run from the repository root", dir);
    if (!d) return;
    struct dirent *e;
    char names[DRIVER_MAX_SEEDS][256];
    int n = 0;
    while ((e = readdir(d)) && n < DRIVER_MAX_SEEDS)
        if (e->d_name[0] != '.') snprintf(names[n++], 256, "%s", e->d_name);
    closedir(d);
    /* Sorted: the same mutations in every run, whatever order readdir returns. */
    qsort(names, (size_t)n, 256, (int (*)(const void *, const void *))strcmp);
    for (int i = 0; i < n; i++) {
        char path[600];
        size_t dl = strlen(dir), nl = strlen(names[i]);
        if (dl + 1 + nl >= sizeof path) continue;
        memcpy(path, dir, dl);
        path[dl] = '/';
        memcpy(path + dl + 1, names[i], nl + 1);
        FILE *f = fopen(path, "rb");
        if (!f) continue;
        uint8_t *b = malloc(DRIVER_MAX_LEN);
        size_t got = b ? fread(b, 1, DRIVER_MAX_LEN, f) : 0;
        fclose(f);
        if (!b) continue;
        driver_seeds[driver_nseeds].data = b;
        driver_seeds[driver_nseeds++].size = got;
    }
}

static void driver_run(const uint8_t *data, size_t size)
{
    /* A copy of exactly size bytes, so ASan sees a read past the end of the input. */
    uint8_t *copy = malloc(size ? size : 1);
    if (!copy) abort();
    memcpy(copy, data, size);
    driver_cur = copy;
    driver_cur_size = size;
    LLVMFuzzerTestOneInput(copy, size);
    driver_cur = NULL;
    free(copy);
}

/* One mutation of b (capacity DRIVER_MAX_LEN) in place. */
static void driver_mutate(uint8_t *b, size_t *size)
{
    static const uint32_t ints[] = {0, 1, 2, 7, 8, 0x7f, 0x80, 0xff, 0x100, 0x7fff, 0xffff,
                                    0x10000, 0x7fffffff, 0x80000000u, 0xffffffffu,
                                    1000000000u, 0xfffffff0u};
    size_t n = *size;
    switch (driver_below(8)) {
    case 0: /* flip a bit */
        if (n) b[driver_below(n)] ^= (uint8_t)(1u << driver_below(8));
        break;
    case 1: /* an interesting byte */
        if (n) b[driver_below(n)] = (uint8_t)ints[driver_below(9)];
        break;
    case 2: /* an interesting 32-bit integer, either byte order */
        if (n >= 4) {
            size_t at = driver_below(n - 3);
            uint32_t v = ints[driver_below(sizeof ints / sizeof ints[0])];
            int big = (int)driver_below(2);
            for (int i = 0; i < 4; i++) b[at + i] = (uint8_t)(v >> (8 * (big ? 3 - i : i)));
        }
        break;
    case 3: /* truncate */
        *size = driver_below(n + 1);
        break;
    case 4: { /* insert random bytes */
        size_t k = 1 + driver_below(16), at = driver_below(n + 1);
        if (n + k > DRIVER_MAX_LEN) break;
        memmove(b + at + k, b + at, n - at);
        for (size_t i = 0; i < k; i++) b[at + i] = (uint8_t)driver_next();
        *size = n + k;
        break;
    }
    case 5: { /* erase a chunk */
        if (!n) break;
        size_t at = driver_below(n), k = 1 + driver_below(n - at);
        memmove(b + at, b + at + k, n - at - k);
        *size = n - k;
        break;
    }
    case 6: { /* duplicate a chunk */
        if (!n) break;
        size_t at = driver_below(n), k = 1 + driver_below(n - at < 64 ? n - at : 64);
        size_t to = driver_below(n + 1);
        if (n + k > DRIVER_MAX_LEN) break;
        uint8_t tmp[64];
        memcpy(tmp, b + at, k);
        memmove(b + to + k, b + to, n - to);
        memcpy(b + to, tmp, k);
        *size = n + k;
        break;
    }
    default: { /* splice: the tail of another seed */
        const driver_buf *o = &driver_seeds[driver_below((size_t)driver_nseeds)];
        size_t at = driver_below(n + 1), from = driver_below(o->size + 1);
        size_t k = o->size - from;
        if (at + k > DRIVER_MAX_LEN) k = DRIVER_MAX_LEN - at;
        memcpy(b + at, o->data + from, k);
        *size = at + k;
        break;
    }
    }
}

static uint64_t driver_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

int main(void)
{
    check_begin("fuzz_" FUZZ_NAME, 120);
    const char *tmp = getenv("TMPDIR");
    snprintf(driver_crash_path, sizeof driver_crash_path, "%s/fuzz-%s-crash.bin",
             tmp && *tmp ? tmp : "/tmp", FUZZ_NAME);
    if (__sanitizer_set_death_callback) __sanitizer_set_death_callback(driver_save_current);
    signal(SIGSEGV, driver_on_signal);
    signal(SIGBUS, driver_on_signal);
    signal(SIGFPE, driver_on_signal);
    signal(SIGABRT, driver_on_signal);
    signal(SIGPIPE, SIG_IGN);

    check_current = "seed_corpus_runs_clean";
    driver_load_seeds("tests/fuzz/corpus/" FUZZ_NAME);
    CHECK(driver_nseeds > 0, "no seeds in tests/fuzz/corpus/%s", FUZZ_NAME);
    for (int i = 0; i < driver_nseeds; i++) {
        driver_run(driver_seeds[i].data, driver_seeds[i].size);
        check_passed++; /* one check per seed: it returned without a sanitizer report */
    }

    check_current = "mutations_run_clean";
    const char *ms_env = getenv("FUZZ_SMOKE_MS"), *it_env = getenv("FUZZ_SMOKE_ITERS");
    uint64_t budget_ms = ms_env ? strtoull(ms_env, NULL, 10) : 2000;
    long max_iters = it_env ? strtol(it_env, NULL, 10) : 20000;
    uint8_t *b = malloc(DRIVER_MAX_LEN);
    if (!b) abort();
    uint64_t start = driver_ms();
    long iters = 0;
    for (; driver_nseeds && iters < max_iters && driver_ms() - start < budget_ms; iters++) {
        const driver_buf *s = &driver_seeds[driver_below((size_t)driver_nseeds)];
        size_t size = s->size;
        memcpy(b, s->data, size);
        for (size_t k = 1 + driver_below(4); k > 0; k--) driver_mutate(b, &size);
        driver_run(b, size);
    }
    free(b);
    CHECK(iters > 0 || !driver_nseeds, "no mutation ran within %llu ms",
          (unsigned long long)budget_ms);
    for (int i = 0; i < driver_nseeds; i++) free(driver_seeds[i].data);
    printf("fuzz_%s: %d seeds and %ld mutations in %llu ms\n", FUZZ_NAME, driver_nseeds, iters,
           (unsigned long long)(driver_ms() - start));
    return check_end();
}
