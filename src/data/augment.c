/* augment.c — a decoded picture into one network input: the sample's plan (Darknet's
 * random_augment_image geometry and random_distort_image colour, or resize and centre crop),
 * separable antialiased resampling (vertical, then horizontal, a row at a time) or per-pixel
 * bilinear under rotation, mean/std.
 * Not here: decoding (image_*.c), the random stream (source.c). Proved by tests/data/test_augment.c. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "data/augment.h"

/* Geometry (training, after Darknet): aspect a = rand_scale(aspect); shorter side r drawn in
 * [min_crop, max_crop]; scale s = r / min(H, W a); the crop's centre moved by dx, dy drawn
 * within the scaled picture's margin; rotation by theta. Output pixel centre (X, Y) reads the
 * source at R(theta) ((X - w/2 + dx) a / s, (Y - h/2 + dy) / s) + (W/2, H/2). */

#define PI 3.14159265358979323846

static double uniform(sh_rng *rng, double lo, double hi) { return lo + (hi - lo) * sh_rng_float(rng); }

/* Darknet's rand_scale: a factor in [1, s] (or [s, 1]), inverted half the time. Two draws always. */
static double rand_scale(sh_rng *rng, double s)
{
    double f = uniform(rng, 1.0, s > 0 ? s : 1.0);
    return sh_rng_below(rng, 2) ? f : 1.0 / f;
}

void sh_augment_plan_make(const sh_image_opts *o, int train, int full_w, int full_h, sh_rng *rng,
                          sh_augment_plan *p)
{
    memset(p, 0, sizeof *p);
    double W = full_w, H = full_h, w = o->w, h = o->h;
    double a = 1, s, dx = 0, dy = 0, theta = 0;
    int flip = 0;
    if (train) {
        /* the same number of draws whatever the options say */
        a = rand_scale(rng, o->aspect);
        int lo = o->min_crop, hi = o->max_crop > lo ? o->max_crop : lo;
        double r = lo + (double)sh_rng_below(rng, (uint64_t)(hi - lo) + 1);
        theta = uniform(rng, -o->angle, o->angle) * PI / 180.0;
        double shorter = H < W * a ? H : W * a;
        s = r / shorter;
        double mx = (W * s / a - w) / 2, my = (H * s - h) / 2;
        dx = uniform(rng, -mx, mx);
        dy = uniform(rng, -my, my);
        flip = o->flip && sh_rng_below(rng, 2);
        p->hue = (float)uniform(rng, -o->hue, o->hue);
        p->saturation = (float)rand_scale(rng, o->saturation);
        p->exposure = (float)rand_scale(rng, o->exposure);
        p->distort = p->hue != 0 || p->saturation != 1 || p->exposure != 1;
    } else {
        s = o->test_resize / (H < W ? H : W);
    }
    /* u = (X - w/2 + dx) a / s, v = (Y - h/2 + dy) / s; a flip reads X' = w - X instead */
    double ux = a / s, u0 = (dx - w / 2) * a / s, vy = 1 / s, v0 = (dy - h / 2) / s;
    if (flip) {
        u0 += w * ux;
        ux = -ux;
    }
    double c = cos(theta), sn = sin(theta);
    p->m[0] = c * ux;
    p->m[1] = -sn * vy;
    p->m[2] = c * u0 - sn * v0 + W / 2;
    p->m[3] = sn * ux;
    p->m[4] = c * vy;
    p->m[5] = sn * u0 + c * v0 + H / 2;
    p->rotated = theta != 0;
    /* output pixels per source pixel along each axis: the decode may shrink that far */
    double kx = s / a, ky = s;
    if (p->rotated) kx = ky = kx > ky ? kx : ky;
    p->min_w = (int)ceil(W * (kx < 1 ? kx : 1));
    p->min_h = (int)ceil(H * (ky < 1 ? ky : 1));
}

static shoal_result reserve(void **p, size_t *cap, size_t nbytes)
{
    if (nbytes <= *cap) return SHOAL_OK;
    void *q = realloc(*p, nbytes);
    if (!q) return SH_FAIL(SHOAL_ERR_NOMEM, "no memory for %zu bytes of resampling buffers", nbytes);
    *p = q;
    *cap = nbytes;
    return SHOAL_OK;
}

void sh_augment_scratch_fini(sh_augment_scratch *s)
{
    free(s->rows);
    free(s->tap_idx);
    free(s->tap_w);
    memset(s, 0, sizeof *s);
}

/* Taps of n outputs along one axis: output i's centre lands at a i + b (decoded pixels,
 * centres at k + 0.5); a triangle of half-width max(1, |a|) over the pixels, weights summing
 * to 1, indices clamped into [0, len). Output i has cnt[i] <= ntaps taps of nonzero weight at
 * idx[i * ntaps ..], w[i * ntaps ..]. */
static void axis_taps(int n, double a, double b, int len, int ntaps, int32_t *idx, float *wt, int32_t *cnt)
{
    double support = fabs(a) > 1 ? fabs(a) : 1;
    for (int i = 0; i < n; i++) {
        double centre = a * (i + 0.5) + b;
        int first = (int)floor(centre - support - 0.5) + 1, k = 0;
        double w[64], sum = 0;
        int32_t at[64];
        for (int t = 0; t < ntaps && k < 64; t++) {
            int j = first + t;
            double d = fabs(j + 0.5 - centre) / support;
            if (d >= 1) continue;
            at[k] = j < 0 ? 0 : j >= len ? len - 1 : j;
            w[k] = 1 - d;
            sum += w[k++];
        }
        for (int t = 0; t < k; t++) {
            idx[i * ntaps + t] = at[t];
            wt[i * ntaps + t] = (float)(w[t] / sum);
        }
        cnt[i] = k;
    }
}

/* One output row's vertical pass: the taps' source rows (bytes, C channels interleaved) over
 * the n bytes the row's columns read, summed into acc (n floats); contiguous, so vectorized. */
static void column_pass(const uint8_t *px, size_t row_nbytes, const int32_t *iy, const float *wy, int taps,
                        size_t n, float *acc)
{
    const uint8_t *r0 = px + (size_t)iy[0] * row_nbytes;
    float w0 = wy[0];
    for (size_t k = 0; k < n; k++) acc[k] = w0 * r0[k];
    for (int t = 1; t < taps; t++) {
        const uint8_t *row = px + (size_t)iy[t] * row_nbytes;
        float wt = wy[t];
        for (size_t k = 0; k < n; k++) acc[k] += wt * row[k];
    }
}

/* One output row's horizontal pass: acc (C channels interleaved, from column xlo) through the
 * column taps into C planes of w floats (plane stride `plane`), scaled to [0, 1]. A true
 * division, as the in-memory loader's: an unscaled crop gives its bits; weights that sum to
 * 1 in floats may carry 255 an ulp past it. */
static void row_pass(const float *acc, int C, int w, int tx, const int32_t *xi, const float *xw, const int32_t *xc,
                     float *dst, size_t plane)
{
    for (int x = 0; x < w; x++) {
        const int32_t *ix = xi + (size_t)x * tx;
        const float *wx = xw + (size_t)x * tx;
        if (C == 3) {
            float a0 = 0, a1 = 0, a2 = 0;
            for (int t = 0; t < xc[x]; t++) {
                const float *q = acc + (size_t)ix[t] * 3;
                a0 += wx[t] * q[0];
                a1 += wx[t] * q[1];
                a2 += wx[t] * q[2];
            }
            a0 /= 255.f, a1 /= 255.f, a2 /= 255.f;
            dst[x] = a0 < 1.0f ? a0 : 1.0f;
            dst[plane + x] = a1 < 1.0f ? a1 : 1.0f;
            dst[2 * plane + x] = a2 < 1.0f ? a2 : 1.0f;
        } else {
            float a = 0;
            for (int t = 0; t < xc[x]; t++) a += wx[t] * acc[ix[t]];
            a /= 255.f;
            dst[x] = a < 1.0f ? a : 1.0f;
        }
    }
}

/* Axis-aligned plans, one output row at a time: a vertical pass over the source columns the
 * output reads into s->rows, then a horizontal pass into dst (C, h, w). */
static shoal_result resample(const sh_image_opts *o, const sh_augment_plan *p, const sh_image *img,
                             sh_augment_scratch *s, float *dst)
{
    int w = o->w, h = o->h, C = img->c, W = img->w, H = img->h;
    double kx = (double)W / img->full_w, ky = (double)H / img->full_h;
    double ax = p->m[0] * kx, bx = p->m[2] * kx, ay = p->m[4] * ky, by = p->m[5] * ky;
    int tx = 2 * (int)ceil(fabs(ax) > 1 ? fabs(ax) : 1) + 1, ty = 2 * (int)ceil(fabs(ay) > 1 ? fabs(ay) : 1) + 1;
    if (tx > 64 || ty > 64)
        return SH_FAIL(SHOAL_ERR_INTERNAL, "a shrink of %.1f x %.1f after decoding; the decode should have "
                       "been smaller", fabs(ax), fabs(ay));
    size_t ntaps = (size_t)w * tx + (size_t)h * ty;
    SH_TRY(reserve((void **)&s->tap_idx, &s->tap_idx_cap, (ntaps + (size_t)w + h) * sizeof(int32_t)));
    SH_TRY(reserve((void **)&s->tap_w, &s->tap_w_cap, ntaps * sizeof(float)));
    int32_t *xi = s->tap_idx, *yi = s->tap_idx + (size_t)w * tx, *xc = yi + (size_t)h * ty, *yc = xc + w;
    float *xw = s->tap_w, *yw = s->tap_w + (size_t)w * tx;
    axis_taps(w, ax, bx, W, tx, xi, xw, xc);
    axis_taps(h, ay, by, H, ty, yi, yw, yc);
    int xlo = W, xhi = -1; /* the source columns any output column reads */
    for (int x = 0; x < w; x++)
        for (int t = 0; t < xc[x]; t++) {
            int q = xi[(size_t)x * tx + t];
            xlo = q < xlo ? q : xlo;
            xhi = q > xhi ? q : xhi;
        }
    for (int x = 0; x < w; x++) /* column indices relative to xlo */
        for (int t = 0; t < xc[x]; t++) xi[(size_t)x * tx + t] -= xlo;
    size_t n = (size_t)(xhi - xlo + 1) * C, plane = (size_t)h * w;
    SH_TRY(reserve((void **)&s->rows, &s->rows_cap, n * sizeof(float)));
    const uint8_t *px = img->px + (size_t)xlo * C;
    for (int y = 0; y < h; y++) {
        column_pass(px, (size_t)W * C, yi + (size_t)y * ty, yw + (size_t)y * ty, yc[y], n, s->rows);
        row_pass(s->rows, C, w, tx, xi, xw, xc, dst + (size_t)y * w, plane);
    }
    return SHOAL_OK;
}

/* Rotated plans: bilinear at each output pixel's source position, the edge repeated. */
static void sample_rotated(const sh_image_opts *o, const sh_augment_plan *p, const sh_image *img, float *dst)
{
    int w = o->w, h = o->h, C = img->c, W = img->w, H = img->h;
    double kx = (double)W / img->full_w, ky = (double)H / img->full_h;
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++) {
            double X = x + 0.5, Y = y + 0.5;
            double sx = (p->m[0] * X + p->m[1] * Y + p->m[2]) * kx - 0.5;
            double sy = (p->m[3] * X + p->m[4] * Y + p->m[5]) * ky - 0.5;
            double fx = floor(sx), fy = floor(sy), ax = sx - fx, ay = sy - fy;
            int x0 = (int)fx, y0 = (int)fy, x1 = x0 + 1, y1 = y0 + 1;
            x0 = x0 < 0 ? 0 : x0 >= W ? W - 1 : x0;
            x1 = x1 < 0 ? 0 : x1 >= W ? W - 1 : x1;
            y0 = y0 < 0 ? 0 : y0 >= H ? H - 1 : y0;
            y1 = y1 < 0 ? 0 : y1 >= H ? H - 1 : y1;
            const uint8_t *r0 = img->px + (size_t)y0 * W * C, *r1 = img->px + (size_t)y1 * W * C;
            for (int c = 0; c < C; c++) {
                double top = r0[x0 * C + c] * (1 - ax) + r0[x1 * C + c] * ax;
                double bot = r1[x0 * C + c] * (1 - ax) + r1[x1 * C + c] * ax;
                dst[((size_t)c * h + y) * w + x] = (float)((top * (1 - ay) + bot * ay) / 255.0);
            }
        }
}

static void rgb_to_hsv(float r, float g, float b, float *h, float *s, float *v)
{
    float mx = r > g ? (r > b ? r : b) : (g > b ? g : b);
    float mn = r < g ? (r < b ? r : b) : (g < b ? g : b);
    float d = mx - mn;
    *v = mx;
    *s = mx > 0 ? d / mx : 0;
    if (d <= 0) {
        *h = 0;
        return;
    }
    float hh = r == mx ? (g - b) / d : g == mx ? 2 + (b - r) / d : 4 + (r - g) / d;
    hh /= 6;
    *h = hh < 0 ? hh + 1 : hh;
}

static void hsv_to_rgb(float h, float s, float v, float *r, float *g, float *b)
{
    if (s <= 0) {
        *r = *g = *b = v;
        return;
    }
    float hh = h * 6;
    int i = (int)floorf(hh);
    float f = hh - (float)i, p = v * (1 - s), q = v * (1 - s * f), t = v * (1 - s * (1 - f));
    switch (((i % 6) + 6) % 6) {
    case 0: *r = v, *g = t, *b = p; break;
    case 1: *r = q, *g = v, *b = p; break;
    case 2: *r = p, *g = v, *b = t; break;
    case 3: *r = p, *g = q, *b = v; break;
    case 4: *r = t, *g = p, *b = v; break;
    default: *r = v, *g = p, *b = q; break;
    }
}

static float clamp01(float v) { return v < 0 ? 0 : v > 1 ? 1 : v; }

void sh_augment_distort_rgb(float *r, float *g, float *b, float hue, float saturation, float exposure)
{
    float h, s, v;
    rgb_to_hsv(*r, *g, *b, &h, &s, &v);
    s *= saturation;
    v *= exposure;
    h += hue;
    h = h > 1 ? h - 1 : h < 0 ? h + 1 : h;
    hsv_to_rgb(h, s, v, r, g, b);
    *r = clamp01(*r);
    *g = clamp01(*g);
    *b = clamp01(*b);
}

shoal_result sh_augment_run(const sh_image_opts *o, const sh_augment_plan *p, const sh_image *img,
                            sh_augment_scratch *s, float *dst)
{
    if (p->rotated) sample_rotated(o, p, img, dst);
    else SH_TRY(resample(o, p, img, s, dst));
    size_t plane = (size_t)o->h * o->w;
    if (p->distort && o->c == 3) {
        float *r = dst, *g = dst + plane, *b = dst + 2 * plane;
        for (size_t i = 0; i < plane; i++)
            sh_augment_distort_rgb(r + i, g + i, b + i, p->hue, p->saturation, p->exposure);
    } else if (p->distort) { /* grey: exposure only */
        for (size_t i = 0; i < plane; i++) dst[i] = clamp01(dst[i] * p->exposure);
    }
    for (int c = 0; c < o->c; c++) {
        float mean = o->mean[c], inv = 1.0f / o->std[c];
        if (mean == 0 && inv == 1) continue;
        float *q = dst + (size_t)c * plane;
        for (size_t i = 0; i < plane; i++) q[i] = (q[i] - mean) * inv;
    }
    return SHOAL_OK;
}
