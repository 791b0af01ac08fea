/* test_image_grid.c — proves src/io/image_grid.c: a grid of grey and of RGB images read back
 * through libpng has every tile's pixels (values clipped to [0, 1], scaled to bytes) at its
 * place and the borders between; the SVG holds that same PNG in base64; a name neither .png
 * nor .svg, a grid of two channels and a directory that does not exist are refused naming
 * the file, and a failed write leaves the old file as it was. */
#include <png.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/err.h"
#include "check.h"
#include "io/image_grid.h"

static char dir[256];

/* The PNG at path as rows of bytes (malloc'd), its size and channels; NULL when unreadable. */
static unsigned char *read_png(const char *path, int *w, int *h, int *c)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, NULL, NULL, NULL);
    png_infop info = png_create_info_struct(png);
    unsigned char *volatile px = NULL;
    if (setjmp(png_jmpbuf(png))) {
        png_destroy_read_struct(&png, &info, NULL);
        fclose(f);
        free(px);
        return NULL;
    }
    png_init_io(png, f);
    png_read_info(png, info);
    *w = (int)png_get_image_width(png, info);
    *h = (int)png_get_image_height(png, info);
    *c = png_get_channels(png, info);
    size_t stride = png_get_rowbytes(png, info);
    px = malloc(stride * (size_t)*h);
    for (int y = 0; y < *h; y++) png_read_row(png, px + stride * (size_t)y, NULL);
    png_destroy_read_struct(&png, &info, NULL);
    fclose(f);
    return px;
}

static void grids_read_back_pixel_for_pixel(void)
{
    enum { N = 5, H = 3, W = 4 };
    for (int c = 1; c <= 3; c += 2) {
        float img[N * 3 * H * W];
        for (int i = 0; i < N * c * H * W; i++) img[i] = (float)(i % 7) / 6.0f;
        img[0] = -0.5f; /* clipped to 0 */
        img[1] = 2.0f;  /* clipped to 1 */
        char path[512];
        snprintf(path, sizeof path, "%s/g%d.png", dir, c);
        CHECK_OK(sh_image_grid_save(path, img, N, c, H, W, 3));
        int gw = 0, gh = 0, gc = 0;
        unsigned char *px = read_png(path, &gw, &gh, &gc);
        CHECK(px && gw == 3 * (W + 1) + 1 && gh == 2 * (H + 1) + 1 && gc == c, "%s: %dx%d, %d channels", path, gw, gh, gc);
        int bad = 0;
        for (int k = 0; px && k < N; k++)
            for (int ch = 0; ch < c; ch++)
                for (int y = 0; y < H; y++)
                    for (int x = 0; x < W; x++) {
                        int gx = 1 + (k % 3) * (W + 1) + x, gy = 1 + (k / 3) * (H + 1) + y;
                        float v = img[((k * c + ch) * H + y) * W + x];
                        v = v < 0 ? 0 : v > 1 ? 1 : v;
                        bad += px[((size_t)gy * gw + gx) * c + ch] != (unsigned char)(v * 255 + 0.5f);
                    }
        CHECK(px && bad == 0, "%s: %d pixels differ", path, bad);
        CHECK(px && px[0] == 64 && px[(size_t)(H + 1) * gw * c] == 64, "%s: borders", path);
        /* the sixth tile of the 3 x 2 grid is empty: border grey */
        CHECK(px && px[((size_t)(H + 2) * gw + 2 * (W + 1) + 1) * c] == 64, "%s: the empty tile", path);
        free(px);
    }
}

static void svg_holds_the_png(void)
{
    float img[2 * 16] = {0.25f, 0.75f};
    char png[512], svg[512], cmd[2048], out[4096];
    snprintf(png, sizeof png, "%s/a.png", dir);
    snprintf(svg, sizeof svg, "%s/a.svg", dir);
    CHECK_OK(sh_image_grid_save(png, img, 2, 1, 4, 4, 0));
    CHECK_OK(sh_image_grid_save(svg, img, 2, 1, 4, 4, 0));
    snprintf(cmd, sizeof cmd, "sed -n 's/.*base64,\\([^\"]*\\)\".*/\\1/p' %s | base64 -d | cmp - %s && echo same", svg, png);
    FILE *p = popen(cmd, "r");
    size_t n = p ? fread(out, 1, sizeof out - 1, p) : 0;
    out[n] = 0;
    if (p) pclose(p);
    CHECK(strstr(out, "same") != NULL, "the SVG's image is the PNG: %s", out);
}

static void bad_names_shapes_and_directories_are_refused(void)
{
    float img[16] = {0};
    char path[512];
    snprintf(path, sizeof path, "%s/a.jpg", dir);
    CHECK_RC(sh_image_grid_save(path, img, 1, 1, 4, 4, 0), SHOAL_ERR_INVALID);
    CHECK(strstr(shoal_last_error(), "a.jpg: an image grid is written as PNG or SVG") != NULL, "%s", shoal_last_error());
    snprintf(path, sizeof path, "%s/b.png", dir);
    CHECK_RC(sh_image_grid_save(path, img, 2, 2, 2, 2, 0), SHOAL_ERR_INVALID);
    CHECK(strstr(shoal_last_error(), "one or three channels") != NULL, "%s", shoal_last_error());
    CHECK_OK(sh_image_grid_save(path, img, 1, 1, 4, 4, 0));
    long before = 0;
    FILE *f = fopen(path, "rb");
    if (f) fseek(f, 0, SEEK_END), before = ftell(f), fclose(f);
    snprintf(path, sizeof path, "%s/none/c.png", dir);
    CHECK_RC(sh_image_grid_save(path, img, 1, 1, 4, 4, 0), SHOAL_ERR_IO);
    CHECK(strstr(shoal_last_error(), "none/c.png.tmp: cannot write") != NULL, "%s", shoal_last_error());
    snprintf(path, sizeof path, "%s/b.png", dir);
    f = fopen(path, "rb");
    long after = -1;
    if (f) fseek(f, 0, SEEK_END), after = ftell(f), fclose(f);
    CHECK(before > 0 && after == before, "the old file stays: %ld -> %ld bytes", before, after);
}

int main(void)
{
    check_begin("test_image_grid", 30);
    snprintf(dir, sizeof dir, "/tmp/shoal-grid-XXXXXX");
    if (!mkdtemp(dir)) {
        CHECK(0, "mkdtemp");
        return check_end();
    }
    RUN(grids_read_back_pixel_for_pixel);
    RUN(svg_holds_the_png);
    RUN(bad_names_shapes_and_directories_are_refused);
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
    return check_end();
}
