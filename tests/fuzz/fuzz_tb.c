/* fuzz_tb.c — libFuzzer target: arbitrary files through the TensorBoard event file reader
 * (src/io/tb_read.c, what `shoal plot` reads from a --logdir): TFRecord framing with its
 * two masked CRC-32Cs, then the Event / Summary / Value protobuf fields.
 * Input: mode u8 (bit 0: the target first rewrites both CRCs of every record the lengths
 * chain through, so the fuzzer gets past the checksums to the protobuf reader) · the file.
 * Not here: writing event files (tb_events.c), drawing (svg_plot.c).
 * Driven by scripts/fuzz.sh and tests/fuzz/test_fuzz_tb.c. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_util.h"
#include "io/tb_events.h"
#include "io/tb_read.h"

static void fuzz_tb_put_le32(uint8_t *b, uint32_t v)
{
    for (int i = 0; i < 4; i++) b[i] = (uint8_t)(v >> (8 * i));
}

/* Record: length u64 LE · masked CRC of the length · data · masked CRC of the data. */
static void fuzz_tb_fix_crcs(uint8_t *f, size_t size)
{
    for (size_t off = 0; size - off >= 12;) {
        uint64_t len = 0;
        for (int i = 7; i >= 0; i--) len = len << 8 | f[off + i];
        fuzz_tb_put_le32(f + off + 8, sh_tb_masked_crc(f + off, 8));
        if (len > size - off - 12 || size - off - 12 - len < 4) return;
        fuzz_tb_put_le32(f + off + 12 + len, sh_tb_masked_crc(f + off + 12, (size_t)len));
        off += 12 + (size_t)len + 4;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1) return 0;
    uint8_t *f = malloc(size);
    if (!f) return 0;
    memcpy(f, data + 1, size - 1);
    if (data[0] & 1) fuzz_tb_fix_crcs(f, size - 1);
    char path[128];
    fuzz_write(fuzz_path("events.out.tfevents.fuzz", path, sizeof path), f, size - 1, 0);
    sh_tb_run run;
    if (sh_tb_run_read(path, &run) == SHOAL_OK)
        for (int i = 0; i < run.nseries; i++)
            if (sh_tb_run_find(&run, run.series[i].tag) == NULL) abort();
    sh_tb_run_fini(&run);
    free(f);
    return 0;
}
