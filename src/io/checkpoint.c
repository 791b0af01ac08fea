/* checkpoint.c — named sections in one file, written atomically and checked by CRC-32C.
 * Not here: what goes in a checkpoint (strategies and the CLI choose the sections).
 * Proved by tests/io/test_checkpoint.c. */
#include "io/checkpoint.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/atomic_file.h"
#include "base/err.h"
#include "base/util.h"

/* Format (all integers little-endian):
 *   header   "SHOALCKP" | u32 version | u32 nsections                       16 bytes
 *   section  name[32] (NUL-padded) | u64 nbytes | u32 crc32c(data) | data  44 + nbytes
 *   trailer  u32 crc32c over the header and every section's 44-byte head
 * The trailer makes the table trustworthy before any data is read; each section's own CRC
 * covers its data. Saving writes a random path.tmp.XXXXXX (base/atomic_file.c), renamed over
 * path when complete: a crash at any point leaves the old file or the new one, never a mix. */

#define CKPT_MAGIC "SHOALCKP"
#define CKPT_MAGIC_NBYTES 8
#define CKPT_VERSION 1u
#define CKPT_HEADER_NBYTES 16
#define CKPT_NAME_NBYTES 32
#define CKPT_SECHEAD_NBYTES (CKPT_NAME_NBYTES + 8 + 4)
#define CKPT_TRAILER_NBYTES 4

static void put32(uint8_t *b, uint32_t v)
{
    for (int i = 0; i < 4; i++) b[i] = (uint8_t)(v >> (8 * i));
}
static void put64(uint8_t *b, uint64_t v)
{
    for (int i = 0; i < 8; i++) b[i] = (uint8_t)(v >> (8 * i));
}
static uint32_t get32(const uint8_t *b)
{
    return (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
}
static uint64_t get64(const uint8_t *b)
{
    return (uint64_t)get32(b) | (uint64_t)get32(b + 4) << 32;
}

/* Read exactly nbytes at offset; *got says how many arrived when the file is shorter. */
static shoal_result read_at(int fd, const char *path, void *buf, size_t nbytes, uint64_t offset,
                            size_t *got)
{
    uint8_t *p = buf;
    size_t done = 0;
    while (done < nbytes) {
        size_t chunk = nbytes - done > (1u << 30) ? (1u << 30) : nbytes - done;
        ssize_t n = pread(fd, p + done, chunk, (off_t)(offset + done));
        if (n < 0 && errno == EINTR) continue;
        if (n < 0)
            return SH_FAIL(SHOAL_ERR_IO, "checkpoint %s: read failed at byte %llu: %s", path,
                           (unsigned long long)(offset + done), strerror(errno));
        if (n == 0) break;
        done += (size_t)n;
    }
    *got = done;
    return SHOAL_OK;
}

static shoal_result check_sections(const sh_ckpt_section *secs, int nsecs)
{
    if (nsecs < 0 || (nsecs > 0 && !secs))
        return SH_FAIL(SHOAL_ERR_INVALID, "checkpoint: %d sections with no section array", nsecs);
    for (int i = 0; i < nsecs; i++) {
        size_t len = secs[i].name ? strlen(secs[i].name) : 0;
        if (len == 0 || len >= CKPT_NAME_NBYTES)
            return SH_FAIL(SHOAL_ERR_INVALID,
                           "checkpoint: section %d name \"%s\" must be 1..%d bytes", i,
                           secs[i].name ? secs[i].name : "(null)", CKPT_NAME_NBYTES - 1);
        if (secs[i].nbytes && !secs[i].data)
            return SH_FAIL(SHOAL_ERR_INVALID,
                           "checkpoint: section \"%s\" has %zu bytes but no data", secs[i].name,
                           secs[i].nbytes);
        for (int j = 0; j < i; j++)
            if (strcmp(secs[i].name, secs[j].name) == 0)
                return SH_FAIL(SHOAL_ERR_INVALID, "checkpoint: section \"%s\" appears twice",
                               secs[i].name);
    }
    return SHOAL_OK;
}

shoal_result sh_ckpt_save(const char *path, const sh_ckpt_section *secs, int nsecs)
{
    shoal_result rc = SHOAL_OK;
    sh_atomic_file f;
    if (!path || !*path) return SH_FAIL(SHOAL_ERR_INVALID, "checkpoint: empty path");
    SH_TRY(check_sections(secs, nsecs));
    SH_TRY(sh_atomic_open(&f, path, "checkpoint"));
    uint8_t head[CKPT_HEADER_NBYTES], sh[CKPT_SECHEAD_NBYTES], trailer[CKPT_TRAILER_NBYTES];
    memcpy(head, CKPT_MAGIC, CKPT_MAGIC_NBYTES);
    put32(head + 8, CKPT_VERSION);
    put32(head + 12, (uint32_t)nsecs);
    uint32_t table_crc = sh_crc32c(0, head, sizeof head);
    SH_TRY_GOTO(sh_atomic_write(&f, head, sizeof head), rc, fail);
    for (int i = 0; i < nsecs; i++) {
        memset(sh, 0, sizeof sh);
        memcpy(sh, secs[i].name, strlen(secs[i].name));
        put64(sh + CKPT_NAME_NBYTES, secs[i].nbytes);
        put32(sh + CKPT_NAME_NBYTES + 8, sh_crc32c(0, secs[i].data, secs[i].nbytes));
        table_crc = sh_crc32c(table_crc, sh, sizeof sh);
        SH_TRY_GOTO(sh_atomic_write(&f, sh, sizeof sh), rc, fail);
        SH_TRY_GOTO(sh_atomic_write(&f, secs[i].data, secs[i].nbytes), rc, fail);
    }
    put32(trailer, table_crc);
    SH_TRY_GOTO(sh_atomic_write(&f, trailer, sizeof trailer), rc, fail);
    return sh_atomic_commit(&f);
fail:
    sh_atomic_abort(&f);
    return rc;
}

typedef struct {
    char name[CKPT_NAME_NBYTES + 1];
    uint64_t nbytes;
    uint32_t crc;
    uint64_t offset; /* of the data */
} sec_entry;

static shoal_result truncated(const char *path, uint64_t file_nbytes, const char *where)
{
    return SH_FAIL(SHOAL_ERR_FORMAT,
                   "checkpoint %s: truncated: the file is %llu bytes and ends inside %s; it "
                   "was cut short (disk full or a copy interrupted): resume from an older one",
                   path, (unsigned long long)file_nbytes, where);
}

/* Walk the heads of all sections (skipping their data), then check the trailer CRC. */
static shoal_result read_table(int fd, const char *path, uint64_t file_nbytes,
                               sec_entry **table_out, uint32_t *nsec_out)
{
    shoal_result rc = SHOAL_OK;
    uint8_t head[CKPT_HEADER_NBYTES], sh[CKPT_SECHEAD_NBYTES], trailer[CKPT_TRAILER_NBYTES];
    sec_entry *table = NULL;
    size_t got = 0;
    char where[96];
    *table_out = NULL;
    SH_TRY(read_at(fd, path, head, sizeof head, 0, &got));
    size_t cmp = got < CKPT_MAGIC_NBYTES ? got : CKPT_MAGIC_NBYTES;
    if (got == 0) return truncated(path, file_nbytes, "the header (it is empty)");
    if (memcmp(head, CKPT_MAGIC, cmp) != 0)
        return SH_FAIL(SHOAL_ERR_FORMAT,
                       "checkpoint %s: not a shoal checkpoint (it does not start with \"%s\"); "
                       "pass a file written by shoal",
                       path, CKPT_MAGIC);
    if (got < sizeof head) return truncated(path, file_nbytes, "the header");
    uint32_t version = get32(head + 8), nsec = get32(head + 12);
    if (version > CKPT_VERSION)
        return SH_FAIL(SHOAL_ERR_FORMAT,
                       "checkpoint %s: format version %u is newer than this shoal reads (%u); "
                       "upgrade shoal",
                       path, version, CKPT_VERSION);
    if (version == 0)
        return SH_FAIL(SHOAL_ERR_FORMAT, "checkpoint %s: format version 0; the file is damaged",
                       path);
    /* Every section takes at least its head: more than fits in the file cannot be real. */
    if ((uint64_t)nsec * CKPT_SECHEAD_NBYTES > file_nbytes)
        return SH_FAIL(SHOAL_ERR_FORMAT,
                       "checkpoint %s: header lists %u sections, more than the %llu-byte file "
                       "can hold; truncated or damaged: resume from an older one",
                       path, nsec, (unsigned long long)file_nbytes);
    SH_TRY_GOTO(sh_calloc(nsec ? nsec : 1, sizeof *table, (void **)&table), rc, done);
    uint32_t table_crc = sh_crc32c(0, head, sizeof head);
    uint64_t off = sizeof head;
    for (uint32_t i = 0; i < nsec; i++) {
        SH_TRY_GOTO(read_at(fd, path, sh, sizeof sh, off, &got), rc, done);
        if (got < sizeof sh) {
            snprintf(where, sizeof where, "the head of section %u of %u", i + 1, nsec);
            rc = truncated(path, file_nbytes, where);
            goto done;
        }
        table_crc = sh_crc32c(table_crc, sh, sizeof sh);
        memcpy(table[i].name, sh, CKPT_NAME_NBYTES);
        table[i].name[CKPT_NAME_NBYTES] = 0;
        table[i].nbytes = get64(sh + CKPT_NAME_NBYTES);
        table[i].crc = get32(sh + CKPT_NAME_NBYTES + 8);
        table[i].offset = off + sizeof sh;
        if (table[i].nbytes > file_nbytes - table[i].offset) {
            snprintf(where, sizeof where, "section \"%.32s\" (%llu bytes)", table[i].name,
                     (unsigned long long)table[i].nbytes);
            rc = truncated(path, file_nbytes, where);
            goto done;
        }
        off = table[i].offset + table[i].nbytes;
    }
    SH_TRY_GOTO(read_at(fd, path, trailer, sizeof trailer, off, &got), rc, done);
    if (got < sizeof trailer) {
        rc = truncated(path, file_nbytes, "the trailer");
        goto done;
    }
    if (get32(trailer) != table_crc) {
        rc = SH_FAIL(SHOAL_ERR_FORMAT,
                     "checkpoint %s: checksum mismatch in the section table; the file is "
                     "damaged: resume from an older one",
                     path);
        goto done;
    }
    if (off + sizeof trailer != file_nbytes) {
        rc = SH_FAIL(SHOAL_ERR_FORMAT,
                     "checkpoint %s: %llu unexpected bytes after the end; the file is damaged",
                     path, (unsigned long long)(file_nbytes - off - sizeof trailer));
        goto done;
    }
    *table_out = table;
    *nsec_out = nsec;
    table = NULL;
done:
    free(table);
    return rc;
}

static void list_names(const sec_entry *table, uint32_t nsec, char *buf, size_t nbytes)
{
    size_t len = 0;
    buf[0] = 0;
    for (uint32_t i = 0; i < nsec && len + 1 < nbytes; i++) {
        int n = snprintf(buf + len, nbytes - len, "%s%s", i ? ", " : "", table[i].name);
        if (n < 0) break;
        len += (size_t)n;
    }
    if (nsec == 0) snprintf(buf, nbytes, "none");
}

shoal_result sh_ckpt_load(const char *path, const sh_ckpt_section *secs, int nsecs)
{
    shoal_result rc = SHOAL_OK;
    sec_entry *table = NULL;
    uint32_t nsec = 0;
    if (!path || !*path) return SH_FAIL(SHOAL_ERR_INVALID, "checkpoint: empty path");
    SH_TRY(check_sections(secs, nsecs));
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return SH_FAIL(SHOAL_ERR_IO, "checkpoint %s: cannot open: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        rc = SH_FAIL(SHOAL_ERR_IO, "checkpoint %s: not a regular file", path);
        goto done;
    }
    SH_TRY_GOTO(read_table(fd, path, (uint64_t)st.st_size, &table, &nsec), rc, done);
    for (int i = 0; i < nsecs; i++) {
        const sec_entry *e = NULL;
        for (uint32_t k = 0; k < nsec && !e; k++)
            if (strcmp(table[k].name, secs[i].name) == 0) e = &table[k];
        if (!e) {
            char names[512];
            list_names(table, nsec, names, sizeof names);
            rc = SH_FAIL(SHOAL_ERR_FORMAT,
                         "checkpoint %s: section \"%s\" missing (the file has: %s); was it "
                         "saved from another model?",
                         path, secs[i].name, names);
            goto done;
        }
        if (e->nbytes != secs[i].nbytes) {
            rc = SH_FAIL(SHOAL_ERR_FORMAT,
                         "checkpoint %s: section \"%s\" is %llu bytes in the file but %zu bytes "
                         "here; was it saved from another model?",
                         path, secs[i].name, (unsigned long long)e->nbytes, secs[i].nbytes);
            goto done;
        }
        size_t got = 0;
        SH_TRY_GOTO(read_at(fd, path, secs[i].data, secs[i].nbytes, e->offset, &got), rc, done);
        if (got < secs[i].nbytes) {
            rc = truncated(path, (uint64_t)st.st_size, "a section (it shrank while read)");
            goto done;
        }
        if (sh_crc32c(0, secs[i].data, secs[i].nbytes) != e->crc) {
            rc = SH_FAIL(SHOAL_ERR_FORMAT,
                         "checkpoint %s: checksum mismatch in section \"%s\"; the file is "
                         "damaged: resume from an older one",
                         path, secs[i].name);
            goto done;
        }
    }
done:
    free(table);
    close(fd);
    return rc;
}
