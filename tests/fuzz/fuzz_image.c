/* fuzz_image.c — libFuzzer target: arbitrary bytes through the picture decoders and the cut
 * (src/data/image_read.c, image_jpeg.c, image_png.c, augment.c), as a training loader runs
 * them on a damaged file.
 * Input: flags u8 | file bytes. Flag bit 0: decode as grey (else RGB); bits 1-3: the decode
 * may shrink to 1/(bits + 1) of the picture (JPEG's DCT scaling); bit 4: training's random
 * cut (else the test's centre crop); bits 5-7: the draw's seed.
 * Not here: reading from disk, threads (source.c, stream.c).
 * Driven by scripts/fuzz.sh (clang) and tests/fuzz/test_fuzz_image.c. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "data/augment.h"
#include "data/image.h"

typedef struct {
    int shrink;
} fuzz_image_ctx;

static void fuzz_image_size(void *ctx, int w, int h, int *min_w, int *min_h)
{
    const fuzz_image_ctx *c = ctx;
    *min_w = w / c->shrink;
    *min_h = h / c->shrink;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1) return 0;
    static sh_image img;            /* reused as a decoding thread reuses it */
    static sh_augment_scratch scr;
    uint8_t f = data[0];
    int c = f & 1 ? 1 : 3;
    fuzz_image_ctx ctx = {((f >> 1) & 7) + 1};
    if (sh_image_decode(data + 1, size - 1, "fuzz", c, fuzz_image_size, &ctx, &img) != SHOAL_OK) return 0;
    /* What a decoded picture promises augment.c: a size within its own, pixels in place. */
    if (img.c != c || img.w < 1 || img.h < 1 || img.w > img.full_w || img.h > img.full_h ||
        (int64_t)img.w * img.h > SH_IMAGE_MAX_PIXELS)
        abort();
    sh_image_opts o;
    sh_image_opts_default(&o, c, 7, 9);
    o.max_crop = 20;
    o.aspect = 0.7f;
    o.angle = (f & 32) ? 10 : 0;
    o.flip = 1;
    o.hue = 0.1f;
    o.saturation = o.exposure = 1.5f;
    float out[3 * 7 * 9];
    sh_rng rng;
    sh_rng_seed(&rng, f >> 5);
    sh_augment_plan p;
    sh_augment_plan_make(&o, (f >> 4) & 1, img.full_w, img.full_h, &rng, &p);
    if (sh_augment_run(&o, &p, &img, &scr, out) != SHOAL_OK) return 0;
    for (int i = 0; i < c * 7 * 9; i++)
        if (!(out[i] >= 0 && out[i] <= 1)) abort();
    return 0;
}
