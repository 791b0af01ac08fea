/* test_augment.c — proves src/data/augment.c: the test's resize and centre crop (identity,
 * crop offsets, a shrink that keeps a ramp linear, the same result from a DCT-halved
 * decode), training draws that follow the seed alone, flips that mirror, crops inside the
 * scaled picture, rotation, colour changes that keep a picture when they are neutral, and
 * mean/std. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "base/util.h"
#include "check.h"
#include "data/augment.h"

/* A w x h picture of c channels whose pixel is f(x, y, channel). */
static void picture(sh_image *img, int w, int h, int c, int (*f)(int, int, int))
{
    CHECK_OK(sh_image_reserve(img, (size_t)w * h * c, 0));
    img->w = img->full_w = w;
    img->h = img->full_h = h;
    img->c = c;
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++)
            for (int k = 0; k < c; k++) img->px[((size_t)y * w + x) * c + k] = (uint8_t)f(x, y, k);
}

static int noise(int x, int y, int k) { return (x * 37 + y * 101 + k * 53 + x * y * 7) % 256; }
static int ramp_x(int x, int y, int k) { return x + 0 * y * k; }
static int flat(int x, int y, int k) { return 90 + 0 * (x + y + k); }

static void run_plan(const sh_image_opts *o, int train, const sh_image *img, uint64_t seed, float *dst,
                     sh_augment_plan *p)
{
    sh_augment_scratch s;
    memset(&s, 0, sizeof s);
    sh_rng rng;
    sh_rng_seed(&rng, seed);
    sh_augment_plan_make(o, train, img->full_w, img->full_h, &rng, p);
    CHECK_OK(sh_augment_run(o, p, img, &s, dst));
    sh_augment_scratch_fini(&s);
}

static void test_resize_of_the_same_size_is_the_identity(void)
{
    sh_image img;
    memset(&img, 0, sizeof img);
    picture(&img, 20, 14, 3, noise);
    sh_image_opts o;
    sh_image_opts_default(&o, 3, 14, 20); /* test_resize 20 > 14: scaled up then cropped */
    o.test_resize = 14;
    float dst[3 * 14 * 20];
    sh_augment_plan p;
    run_plan(&o, 0, &img, 1, dst, &p);
    float worst = 0;
    for (int k = 0; k < 3; k++)
        for (int y = 0; y < 14; y++)
            for (int x = 0; x < 20; x++) {
                float d = fabsf(dst[(k * 14 + y) * 20 + x] - noise(x, y, k) / 255.f);
                if (d > worst) worst = d;
            }
    CHECK(worst < 1e-6f, "identity differs by %g", (double)worst);
    CHECK(p.min_w == 20 && p.min_h == 14, "no shrink possible: min %dx%d", p.min_w, p.min_h);
    sh_image_fini(&img);
}

static void centre_crop_takes_the_middle(void)
{
    sh_image img;
    memset(&img, 0, sizeof img);
    picture(&img, 30, 16, 1, noise); /* shorter side 16 = test_resize: no scaling */
    sh_image_opts o;
    sh_image_opts_default(&o, 1, 16, 16);
    float dst[16 * 16];
    sh_augment_plan p;
    run_plan(&o, 0, &img, 1, dst, &p);
    int bad = 0;
    for (int y = 0; y < 16; y++)
        for (int x = 0; x < 16; x++) bad += fabsf(dst[y * 16 + x] - noise(x + 7, y, 0) / 255.f) > 1e-6f;
    CHECK(bad == 0, "%d pixels are not columns 7..22 of the picture", bad);
    sh_image_fini(&img);
}

/* Halving a ramp v(x) = x: output column j is centred at source 2j + 1, where the ramp (its
 * pixel i standing at i + 0.5) is 2j + 0.5; the symmetric filter keeps linear pictures. */
static void a_shrink_keeps_a_ramp_linear_and_dct_scale_does_not_matter(void)
{
    sh_image img;
    memset(&img, 0, sizeof img);
    picture(&img, 128, 64, 1, ramp_x);
    sh_image_opts o;
    sh_image_opts_default(&o, 1, 32, 64);
    o.test_resize = 32;
    float dst[32 * 64], half[32 * 64];
    sh_augment_plan p;
    run_plan(&o, 0, &img, 1, dst, &p);
    float worst = 0;
    for (int y = 0; y < 32; y++)
        for (int x = 2; x < 62; x++) {
            float d = fabsf(dst[y * 64 + x] * 255.f - (2 * x + 0.5f));
            if (d > worst) worst = d;
        }
    CHECK(worst < 1e-3f, "shrunk ramp off by %g", (double)worst);
    CHECK(p.min_w == 64 && p.min_h == 32, "the decode may shrink to 64x32, plan says %dx%d", p.min_w, p.min_h);
    /* the same picture decoded at half size (as DCT scaling would give it): same plan, same
     * output where the shrink was exactly the decode's */
    sh_image small;
    memset(&small, 0, sizeof small);
    picture(&small, 64, 32, 1, ramp_x);
    for (int y = 0; y < 32; y++)
        for (int x = 0; x < 64; x++) small.px[y * 64 + x] = (uint8_t)(2 * x); /* ramp at half scale */
    small.full_w = 128;
    small.full_h = 64;
    sh_augment_scratch s;
    memset(&s, 0, sizeof s);
    CHECK_OK(sh_augment_run(&o, &p, &small, &s, half));
    worst = 0;
    for (int y = 0; y < 32; y++)
        for (int x = 2; x < 62; x++) {
            float d = fabsf(half[y * 64 + x] * 255.f - 2 * x);
            if (d > worst) worst = d;
        }
    CHECK(worst < 1e-3f, "half-size decode off by %g", (double)worst);
    sh_augment_scratch_fini(&s);
    sh_image_fini(&small);
    sh_image_fini(&img);
}

static void training_draws_follow_the_seed_alone(void)
{
    sh_image img;
    memset(&img, 0, sizeof img);
    picture(&img, 50, 40, 3, noise);
    sh_image_opts o;
    sh_image_opts_default(&o, 3, 24, 24);
    o.min_crop = 24;
    o.max_crop = 48;
    o.aspect = 0.8f;
    o.hue = 0.1f;
    o.saturation = o.exposure = 1.5f;
    float a[3 * 24 * 24], b[3 * 24 * 24], c[3 * 24 * 24];
    sh_augment_plan pa, pb, pc;
    run_plan(&o, 1, &img, 42, a, &pa);
    run_plan(&o, 1, &img, 42, b, &pb);
    run_plan(&o, 1, &img, 43, c, &pc);
    CHECK(!memcmp(a, b, sizeof a), "same seed, different pictures");
    CHECK(memcmp(a, c, sizeof a) != 0, "different seeds, the same picture");
    for (size_t i = 0; i < sizeof a / sizeof a[0]; i++)
        if (a[i] < 0 || a[i] > 1) {
            CHECK(0, "value %g outside [0, 1] at %zu", (double)a[i], i);
            break;
        }
    sh_image_fini(&img);
}

static void flips_mirror_and_both_sides_occur(void)
{
    sh_image img;
    memset(&img, 0, sizeof img);
    picture(&img, 16, 16, 1, noise);
    sh_image_opts o;
    sh_image_opts_default(&o, 1, 16, 16); /* crop = picture: only the flip moves pixels */
    o.flip = 1;
    float dst[16 * 16];
    sh_augment_plan p;
    int plain = 0, mirrored = 0, other = 0;
    for (uint64_t seed = 1; seed <= 40; seed++) {
        run_plan(&o, 1, &img, seed, dst, &p);
        int same = 1, mirror = 1;
        for (int y = 0; y < 16; y++)
            for (int x = 0; x < 16; x++) {
                same &= fabsf(dst[y * 16 + x] - noise(x, y, 0) / 255.f) < 1e-6f;
                mirror &= fabsf(dst[y * 16 + x] - noise(15 - x, y, 0) / 255.f) < 1e-6f;
            }
        plain += same;
        mirrored += mirror;
        other += !same && !mirror;
    }
    CHECK(plain > 5 && mirrored > 5 && other == 0, "40 draws: %d plain, %d mirrored, %d neither", plain, mirrored,
          other);
    o.flip = 0;
    for (uint64_t seed = 1; seed <= 20; seed++) {
        run_plan(&o, 1, &img, seed, dst, &p);
        CHECK(fabsf(dst[0] - noise(0, 0, 0) / 255.f) < 1e-6f, "flip=0 mirrored (seed %llu)",
              (unsigned long long)seed);
    }
    sh_image_fini(&img);
}

/* Random crops of a ramp: each output row is a window of the scaled ramp, so its values rise
 * by the scale a pixel (on average: a triangle filter sampled at whole pixels moves each
 * output by up to a tenth of a pixel) and start where the crop does. */
static void random_crops_are_windows_of_the_scaled_picture(void)
{
    sh_image img;
    memset(&img, 0, sizeof img);
    picture(&img, 200, 100, 1, ramp_x);
    sh_image_opts o;
    sh_image_opts_default(&o, 1, 20, 20);
    o.min_crop = 40;
    o.max_crop = 80;
    o.flip = 0;
    float dst[20 * 20];
    sh_augment_plan p;
    double lo = 1e9, hi = -1e9;
    for (uint64_t seed = 1; seed <= 30; seed++) {
        run_plan(&o, 1, &img, seed, dst, &p);
        double scale = p.m[0]; /* source pixels per output pixel */
        CHECK(scale >= 100.0 / 80 - 1e-9 && scale <= 100.0 / 40 + 1e-9, "scale %g outside [1.25, 2.5]", scale);
        double step = (dst[18] - dst[2]) * 255.0 / 16;
        CHECK(fabs(step - scale) < 0.015, "a row rises by %g a pixel, the scale is %g", step, scale);
        double start = dst[0] * 255.0;
        if (start < lo) lo = start;
        if (start > hi) hi = start;
        CHECK(start >= 0 && start + 20 * scale <= 200.5, "crop from %g of width %g leaves the picture", start,
              20 * scale);
    }
    CHECK(hi - lo > 30, "crop positions span only %g..%g", lo, hi);
    sh_image_fini(&img);
}

static void rotation_moves_pixels_and_keeps_flat_pictures(void)
{
    sh_image img;
    memset(&img, 0, sizeof img);
    picture(&img, 32, 32, 3, flat);
    sh_image_opts o;
    sh_image_opts_default(&o, 3, 32, 32);
    o.angle = 30;
    float dst[3 * 32 * 32];
    sh_augment_plan p;
    run_plan(&o, 1, &img, 5, dst, &p);
    CHECK(p.rotated, "angle 30 drew no rotation");
    float worst = 0;
    for (size_t i = 0; i < sizeof dst / sizeof dst[0]; i++) worst = fmaxf(worst, fabsf(dst[i] - 90 / 255.f));
    CHECK(worst < 1e-5f, "a flat picture changed by %g under rotation", (double)worst);
    picture(&img, 32, 32, 1, ramp_x);
    sh_image_opts_default(&o, 1, 32, 32);
    o.flip = 0;
    float still[32 * 32], turned[32 * 32];
    run_plan(&o, 1, &img, 5, still, &p);
    o.angle = 30;
    run_plan(&o, 1, &img, 5, turned, &p);
    /* a ramp along x is constant down a column; turned, it changes by m[1] a row */
    CHECK(fabsf(still[0 * 32 + 16] - still[31 * 32 + 16]) < 1e-5f, "unrotated column not constant");
    double want = 27 * p.m[1], got = (turned[29 * 32 + 16] - turned[2 * 32 + 16]) * 255.0;
    CHECK(fabs(p.m[1]) > 0.01 && fabs(got - want) < 0.05, "rotated column changes by %g over 27 rows, want %g", got,
          want);
    sh_image_fini(&img);
}

static void neutral_colour_changes_keep_the_picture_and_mean_std_apply(void)
{
    float worst = 0;
    for (int i = 0; i < 1000; i++) {
        float r = (float)((i * 37) % 256) / 255.f, g = (float)((i * 91) % 256) / 255.f,
              b = (float)((i * 13) % 256) / 255.f, r2 = r, g2 = g, b2 = b;
        sh_augment_distort_rgb(&r2, &g2, &b2, 0, 1, 1);
        worst = fmaxf(worst, fmaxf(fabsf(r - r2), fmaxf(fabsf(g - g2), fabsf(b - b2))));
    }
    CHECK(worst < 1e-5f, "HSV round trip off by %g", (double)worst);
    float r = 1, g = 0, b = 0; /* red, a third of the circle on: green */
    sh_augment_distort_rgb(&r, &g, &b, 1.0f / 3, 1, 1);
    CHECK(r < 1e-5f && g > 1 - 1e-5f && b < 1e-5f, "red + 1/3 turn = (%g, %g, %g)", (double)r, (double)g, (double)b);
    r = 0.4f, g = 0.2f, b = 0.1f;
    sh_augment_distort_rgb(&r, &g, &b, 0, 1, 2); /* exposure doubles V = max */
    CHECK(fabsf(r - 0.8f) < 1e-5f && fabsf(g - 0.4f) < 1e-5f && fabsf(b - 0.2f) < 1e-5f, "exposure 2: %g %g %g",
          (double)r, (double)g, (double)b);

    sh_image img;
    memset(&img, 0, sizeof img);
    picture(&img, 8, 8, 3, noise);
    sh_image_opts o;
    sh_image_opts_default(&o, 3, 8, 8);
    o.mean[0] = 0.485f, o.mean[1] = 0.456f, o.mean[2] = 0.406f;
    o.std[0] = 0.229f, o.std[1] = 0.224f, o.std[2] = 0.225f;
    float dst[3 * 64];
    sh_augment_plan p;
    run_plan(&o, 0, &img, 1, dst, &p);
    worst = 0;
    for (int k = 0; k < 3; k++)
        for (int i = 0; i < 64; i++) {
            float want = (noise(i % 8, i / 8, k) / 255.f - o.mean[k]) / o.std[k];
            worst = fmaxf(worst, fabsf(dst[k * 64 + i] - want));
        }
    CHECK(worst < 1e-5f, "normalization off by %g", (double)worst);
    sh_image_fini(&img);
}

int main(void)
{
    check_begin("test_augment", 60);
    RUN(test_resize_of_the_same_size_is_the_identity);
    RUN(centre_crop_takes_the_middle);
    RUN(a_shrink_keeps_a_ramp_linear_and_dct_scale_does_not_matter);
    RUN(training_draws_follow_the_seed_alone);
    RUN(flips_mirror_and_both_sides_occur);
    RUN(random_crops_are_windows_of_the_scaled_picture);
    RUN(rotation_moves_pixels_and_keeps_flat_pictures);
    RUN(neutral_colour_changes_keep_the_picture_and_mean_std_apply);
    return check_end();
}
