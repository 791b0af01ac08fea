/* checkpoint.h — named binary sections in one file, written atomically (temporary file,
 * fsync, rename, fsync of the directory) and checked by CRC-32C on load.
 * Not here: what goes in a checkpoint (the strategy or the CLI chooses the sections).
 * Proved by tests/io/test_checkpoint.c. */
#ifndef SH_CHECKPOINT_H
#define SH_CHECKPOINT_H

#include <stddef.h>
#include "shoal/result.h"

typedef struct {
    const char *name;  /* at most 31 bytes */
    void *data;        /* save: read from; load: written to */
    size_t nbytes;     /* load: must equal the stored size */
} sh_ckpt_section;

/* Write all sections. A crash at any point leaves either the old file or the new one. */
shoal_result sh_ckpt_save(const char *path, const sh_ckpt_section *secs, int nsecs);
/* Read the named sections (others in the file are skipped). Refused with SHOAL_ERR_FORMAT
 * and a clear message: not a shoal checkpoint (magic), newer format, truncated, checksum
 * mismatch ("the file is damaged"), a section missing or of another size ("was it saved
 * from another model?"). On error the destination buffers may be partly written. */
shoal_result sh_ckpt_load(const char *path, const sh_ckpt_section *secs, int nsecs);

#endif
