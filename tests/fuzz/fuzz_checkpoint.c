/* fuzz_checkpoint.c — libFuzzer target: arbitrary files through the checkpoint loader
 * (src/io/checkpoint.c) asking for the sections a training snapshot has.
 * Input: one mode byte, then the file. Mode bit 0: the target first rewrites every CRC the
 * file's own table implies (section CRCs, then the trailer), so the fuzzer gets past the
 * checksums to the code behind them. Not here: what sections mean (src/train/snapshot.c).
 * Driven by scripts/fuzz.sh (clang) and tests/fuzz/test_fuzz_checkpoint.c. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "fuzz_util.h"
#include "io/checkpoint.h"

/* Layout as checkpoint.c documents it: 16-byte header, 44-byte section heads, 4-byte trailer. */
static uint64_t le(const uint8_t *b, int n)
{
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--) v = v << 8 | b[i];
    return v;
}

static void put_le32(uint8_t *b, uint32_t v)
{
    for (int i = 0; i < 4; i++) b[i] = (uint8_t)(v >> (8 * i));
}

static void fix_crcs(uint8_t *f, size_t size)
{
    if (size < 16) return;
    uint32_t table_crc = sh_crc32c(0, f, 16);
    uint64_t nsec = le(f + 12, 4), off = 16;
    for (uint64_t i = 0; i < nsec && off + 44 <= size; i++) {
        uint64_t nbytes = le(f + off + 32, 8);
        uint64_t have = size - off - 44;
        put_le32(f + off + 40, sh_crc32c(0, f + off + 44, nbytes < have ? nbytes : have));
        table_crc = sh_crc32c(table_crc, f + off, 44);
        if (nbytes > have) return;
        off += 44 + nbytes;
    }
    if (off + 4 <= size) put_le32(f + off, table_crc);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1) return 0;
    char path[128];
    uint8_t *f = malloc(size);
    if (!f) return 0;
    memcpy(f, data + 1, size - 1);
    if (data[0] & 1) fix_crcs(f, size - 1);
    fuzz_write(fuzz_path("ckpt.bin", path, sizeof path), f, size - 1, 0);
    uint64_t meta[8];
    float params[16], optim[32];
    sh_ckpt_section secs[4] = {{"meta", meta, sizeof meta},
                               {"params", params, sizeof params},
                               {"optim", optim, sizeof optim},
                               {"empty", NULL, 0}};
    (void)sh_ckpt_load(path, secs, 1 + (data[0] >> 1) % 4);
    free(f);
    return 0;
}
