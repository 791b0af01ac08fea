/* synthetic.c — random images whose class can be learned, deterministic from the seed: in
 * memory (a random template per class plus Gaussian noise), or drawn one at a time for
 * --data synthetic (a coarse pattern per class plus noise, any shape, no memory).
 * Not here: batching (loader.c, stream.c). Proved by tests/data/test_loader.c, test_stream.c. */
#include <stdlib.h>

#include "base/err.h"
#include "base/util.h"
#include "data/dataset_priv.h"
#include "data/source.h"

/* Noise standard deviation in pixel units (0..255): large enough that one pixel does not
 * give the class away, small enough that the whole image does. */
#define SYNTH_NOISE_STD 40.0f

shoal_result sh_synthetic_create(int count, int c, int h, int w, int nclasses, uint64_t seed,
                                 sh_dataset **out)
{
    shoal_result rc = SHOAL_OK;
    sh_dataset *d = NULL;
    uint8_t *templates = NULL; /* (nclasses, C, H, W) */
    *out = NULL;
    if (count <= 0 || c <= 0 || h <= 0 || w <= 0 || nclasses <= 0 || nclasses > 1 << 20 ||
        (int64_t)c * h * w > 1 << 24)
        return SH_FAIL(SHOAL_ERR_INVALID,
                       "synthetic dataset: count %d, shape %dx%dx%d, %d classes; all must be "
                       "positive (and an image at most 16M pixels)",
                       count, c, h, w, nclasses);
    size_t npix = (size_t)c * h * w;
    SH_TRY_GOTO(sh_dataset_alloc(count, c, h, w, "synthetic", &d), rc, done);
    SH_TRY_GOTO(sh_calloc((size_t)nclasses, npix, (void **)&templates), rc, done);
    sh_rng rng;
    sh_rng_seed(&rng, seed);
    for (size_t i = 0; i < (size_t)nclasses * npix; i++)
        templates[i] = (uint8_t)sh_rng_below(&rng, 256);
    for (int i = 0; i < count; i++) {
        /* Round-robin labels: every class appears, balanced within one. */
        int y = i % nclasses;
        d->labels[i] = y;
        const uint8_t *t = templates + (size_t)y * npix;
        uint8_t *px = d->pixels + (size_t)i * npix;
        for (size_t p = 0; p < npix; p++) {
            float v = (float)t[p] + SYNTH_NOISE_STD * sh_rng_normal(&rng);
            px[p] = (uint8_t)(v < 0.f ? 0.f : v > 255.f ? 255.f : v + 0.5f);
        }
    }
    d->nclasses = nclasses;
    *out = d;
    d = NULL;
done:
    free(templates);
    sh_dataset_destroy(d);
    return rc;
}

/* The pattern's resolution: coarse enough that a small net learns it, whatever the size. */
#define SYNTH_GRID 8

void sh_synthetic_draw(uint64_t seed, int64_t item, int nclasses, const sh_image_opts *o, float *dst,
                       int32_t *label)
{
    int y = (int)(item % nclasses);
    uint8_t pattern[3][SYNTH_GRID][SYNTH_GRID];
    sh_rng rng;
    sh_rng_seed(&rng, seed ^ (0xD1B54A32D192ED03ull * (uint64_t)(y + 1)));
    for (int c = 0; c < o->c; c++)
        for (int i = 0; i < SYNTH_GRID; i++)
            for (int j = 0; j < SYNTH_GRID; j++) pattern[c][i][j] = (uint8_t)sh_rng_below(&rng, 192);
    sh_rng_seed(&rng, seed ^ (0x9E3779B97F4A7C15ull * (uint64_t)(item + 1)));
    uint64_t bits = 0;
    int left = 0;
    for (int c = 0; c < o->c; c++) {
        float inv = 1.0f / o->std[c], mean = o->mean[c];
        for (int i = 0; i < o->h; i++) {
            const uint8_t *row = pattern[c][i * SYNTH_GRID / o->h];
            float *out = dst + ((size_t)c * o->h + i) * o->w;
            for (int j = 0; j < o->w; j++) {
                if (!left) bits = sh_rng_u64(&rng), left = 8;
                int v = row[j * SYNTH_GRID / o->w] + (int)(bits & 63); /* noise in [0, 64) */
                bits >>= 8;
                left--;
                out[j] = ((float)v / 255.f - mean) * inv;
            }
        }
    }
    *label = y;
}
