/* fuzz_util.h — what the fuzz targets share: a scratch directory for the readers that take a
 * path, and writing bytes there (raw or gzipped).
 * Not here: the targets themselves (fuzz_*.c), the smoke driver (driver.c). */
#ifndef SHOAL_FUZZ_UTIL_H
#define SHOAL_FUZZ_UTIL_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

/* One directory per process, in memory when /dev/shm exists; removed at exit. */
static char fuzz_dir[64];
static char fuzz_cleanup_paths[8][128];
static int fuzz_ncleanup;

static void fuzz_cleanup(void)
{
    for (int i = 0; i < fuzz_ncleanup; i++) unlink(fuzz_cleanup_paths[i]);
    if (fuzz_dir[0]) rmdir(fuzz_dir);
}

/* Path of a scratch file by name (at most 8 distinct names per process). */
static const char *fuzz_path(const char *name, char *out, size_t cap)
{
    if (!fuzz_dir[0]) {
        snprintf(fuzz_dir, sizeof fuzz_dir, "%s/shoal-fuzz-XXXXXX",
                 access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp");
        if (!mkdtemp(fuzz_dir)) abort();
        atexit(fuzz_cleanup);
    }
    snprintf(out, cap, "%s/%s", fuzz_dir, name);
    int known = 0;
    for (int i = 0; i < fuzz_ncleanup; i++) known |= strcmp(fuzz_cleanup_paths[i], out) == 0;
    if (!known && fuzz_ncleanup < 8) snprintf(fuzz_cleanup_paths[fuzz_ncleanup++], 128, "%s", out);
    return out;
}

/* Write bytes to path, gzipped when gz; aborts when the scratch disk fails (not a finding
 * of the code under test, but it must not pass silently). */
static void fuzz_write(const char *path, const void *buf, size_t nbytes, int gz)
{
    if (gz) {
        gzFile g = gzopen(path, "wb1");
        if (!g) abort();
        if (nbytes && gzwrite(g, buf, (unsigned)nbytes) != (int)nbytes) abort();
        if (gzclose(g) != Z_OK) abort();
    } else {
        FILE *f = fopen(path, "wb");
        if (!f) abort();
        if (nbytes && fwrite(buf, 1, nbytes, f) != nbytes) abort();
        if (fclose(f) != 0) abort();
    }
}

#endif
