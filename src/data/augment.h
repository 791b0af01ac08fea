/* augment.h — from a decoded picture to one network input: Darknet's training geometry
 * (random shorter side in [min_crop, max_crop], aspect, rotation, crop position, flip) and
 * colour (hue, saturation, exposure), or the test's resize and centre crop; then mean/std.
 * Not here: decoding (image.h), which picture and which random draws (source.c).
 * Proved by tests/data/test_augment.c. */
#ifndef SH_AUGMENT_H
#define SH_AUGMENT_H

#include <stddef.h>
#include <stdint.h>

#include "base/util.h"
#include "data/data.h"
#include "data/image.h"

/* What one sample does, drawn before decoding (the decode's size depends on it). Positions
 * are in the full-size picture's pixels, pixel centres at i + 0.5: output pixel (x, y) reads
 * source (m[0] X + m[1] Y + m[2], m[3] X + m[4] Y + m[5]) with X = x + 0.5, Y = y + 0.5. */
typedef struct {
    double m[6];
    int rotated;                 /* m[1] or m[3] nonzero: per-pixel bilinear sampling */
    int distort;                 /* colour changes to apply */
    float hue, saturation, exposure;
    int min_w, min_h;            /* the smallest decode that keeps every output pixel's detail */
} sh_augment_plan;

/* Buffers one decoding thread reuses from sample to sample. */
typedef struct {
    float *rows;                 /* (source columns, C): one output row after the vertical pass */
    size_t rows_cap;
    int32_t *tap_idx;            /* per output column, then per output row: source indices */
    size_t tap_idx_cap;
    float *tap_w;                /* and their weights */
    size_t tap_w_cap;
} sh_augment_scratch;

/* Draw sample's plan for a full_w x full_h picture: train = 1 the random geometry and colour
 * of o (from rng, a fixed number of draws whatever o says), 0 the resize of the shorter side
 * to o->test_resize and the centre crop. */
void sh_augment_plan_make(const sh_image_opts *o, int train, int full_w, int full_h, sh_rng *rng,
                          sh_augment_plan *p);

/* Write the network input (C, H, W) of o's shape from img (decoded at any scale of its
 * full_w x full_h) through plan p: resampled with a triangle filter as wide as the
 * shrinking (PIL's antialiased bilinear), or bilinear per pixel when rotated, the edge
 * repeated past the picture; colour changes; (v / 255 - mean) / std. */
shoal_result sh_augment_run(const sh_image_opts *o, const sh_augment_plan *p, const sh_image *img,
                            sh_augment_scratch *s, float *dst);

void sh_augment_scratch_fini(sh_augment_scratch *s);

/* Darknet's random_distort_image on one RGB pixel in [0, 1]: H shifted by hue (turns),
 * S times saturation, V times exposure, back to RGB, clamped to [0, 1]. */
void sh_augment_distort_rgb(float *r, float *g, float *b, float hue, float saturation, float exposure);

#endif
