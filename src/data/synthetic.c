/* synthetic.c — random images whose class can be learned: each class has a random template,
 * each image is its class's template plus Gaussian noise. Deterministic from the seed.
 * Not here: batching (loader.c). Proved by tests/data/test_loader.c. */
#include <stdlib.h>

#include "base/err.h"
#include "base/util.h"
#include "data/dataset_priv.h"

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
