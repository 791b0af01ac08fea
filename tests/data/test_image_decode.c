/* test_image_decode.c — proves src/data/image_read.c, image_jpeg.c and image_png.c: every
 * format and oddity decodes to the pixels PIL (or the PNG standard) gives, as grey and as RGB;
 * JPEGs scale down by DCT as PIL's draft does; damaged and foreign files are refused with an
 * error naming them, never a crash or an exit. Fixtures: tests/data/image_fixtures.py. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/err.h"
#include "check.h"
#include "data/image.h"
#include "lib/run.h"

static char dir[] = "/tmp/shoal_test_image_XXXXXX";

typedef struct {
    int w, h;
} want_size;

static void ask_size(void *ctx, int full_w, int full_h, int *min_w, int *min_h)
{
    const want_size *s = ctx;
    (void)full_w;
    (void)full_h;
    *min_w = s->w;
    *min_h = s->h;
}

static unsigned char *read_all(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = malloc(len > 0 ? (size_t)len : 1);
    *n = b ? fread(b, 1, (size_t)len, f) : 0;
    fclose(f);
    return b;
}

/* One manifest line of a picture: decode it as c channels at (at least) w x h and compare. */
static void check_picture(sh_image *img, const char *file, int c, int w, int h, int tol, const char *reffile)
{
    char path[512], refpath[512];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    snprintf(refpath, sizeof refpath, "%s/%s", dir, reffile);
    want_size ws = {w, h};
    shoal_result rc = sh_image_read(path, c, ask_size, &ws, img);
    CHECK(rc == SHOAL_OK, "%s as %d channels: %s", file, c, shoal_last_error());
    if (rc != SHOAL_OK) return;
    CHECK(img->w == w && img->h == h && img->c == c, "%s: decoded %dx%dx%d, want %dx%dx%d", file,
          img->w, img->h, img->c, w, h, c);
    if (img->w != w || img->h != h || img->c != c) return;
    size_t n = 0;
    unsigned char *ref = read_all(refpath, &n);
    CHECK(ref && n == (size_t)w * h * c, "%s: reference of %zu bytes", reffile, n);
    if (!ref || n != (size_t)w * h * c) {
        free(ref);
        return;
    }
    int worst = 0;
    size_t at = 0;
    for (size_t i = 0; i < n; i++) {
        int d = abs((int)img->px[i] - (int)ref[i]);
        if (d > worst) worst = d, at = i;
    }
    CHECK(worst <= tol, "%s as %d channels: pixel byte %zu is %d, reference %d (tolerance %d)", file, c, at,
          img->px[at], ref[at], tol);
    free(ref);
}

static void check_refused(sh_image *img, const char *file, int c)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    shoal_result rc = sh_image_read(path, c, NULL, NULL, img);
    CHECK(rc == SHOAL_ERR_FORMAT, "%s: got %s, want a format error", file, shoal_result_name(rc));
    CHECK(strstr(shoal_last_error(), file) != NULL, "%s: the error does not name the file: %s", file,
          shoal_last_error());
}

static void pictures_match_the_references_and_damaged_files_are_refused(void)
{
    char path[512], line[512];
    snprintf(path, sizeof path, "%s/manifest", dir);
    FILE *f = fopen(path, "r");
    CHECK(f != NULL, "no manifest in %s", dir);
    if (!f) return;
    sh_image img;
    memset(&img, 0, sizeof img);
    int pictures = 0, refused = 0;
    while (fgets(line, sizeof line, f)) {
        char file[128], ref[160], what[16];
        int c, w, h, tol;
        if (sscanf(line, "%127s %d %d %d %d %159s", file, &c, &w, &h, &tol, ref) == 6) {
            check_picture(&img, file, c, w, h, tol, ref);
            pictures++;
        } else if (sscanf(line, "%127s %d %15s", file, &c, what) == 3 && !strcmp(what, "bad")) {
            check_refused(&img, file, c);
            check_refused(&img, file, 1);
            refused++;
        }
    }
    fclose(f);
    /* every picture decodes after the refusals too: the buffers survive a longjmp */
    CHECK(pictures >= 29 && refused >= 7, "manifest: %d pictures, %d damaged files", pictures, refused);
    sh_image_fini(&img);
}

static void missing_and_unreadable_files_are_io_errors_naming_them(void)
{
    sh_image img;
    memset(&img, 0, sizeof img);
    char path[512];
    snprintf(path, sizeof path, "%s/no_such.jpg", dir);
    CHECK_RC(sh_image_read(path, 3, NULL, NULL, &img), SHOAL_ERR_IO);
    CHECK(strstr(shoal_last_error(), "no_such.jpg") != NULL, "error: %s", shoal_last_error());
    snprintf(path, sizeof path, "%s", dir); /* a folder */
    CHECK_RC(sh_image_read(path, 3, NULL, NULL, &img), SHOAL_ERR_IO);
    if (geteuid() != 0) { /* root reads files whatever their mode */
        snprintf(path, sizeof path, "%s/rgb.png", dir);
        char cmd[2048];
        snprintf(cmd, sizeof cmd, "cp %s %s/locked.png && chmod 000 %s/locked.png", path, dir, dir);
        CHECK(system(cmd) == 0, "%s", cmd);
        snprintf(path, sizeof path, "%s/locked.png", dir);
        CHECK_RC(sh_image_read(path, 3, NULL, NULL, &img), SHOAL_ERR_IO);
    }
    CHECK_RC(sh_image_decode((const uint8_t *)"\x89PNG", 4, "four.png", 2, NULL, NULL, &img), SHOAL_ERR_INVALID);
    sh_image_fini(&img);
}

static void dct_scaling_picks_the_smallest_scale_that_keeps_the_size(void)
{
    char path[512];
    snprintf(path, sizeof path, "%s/scaled.jpg", dir); /* 300 x 200 */
    sh_image img;
    memset(&img, 0, sizeof img);
    const int asks[][4] = {{0, 0, 300, 200}, {37, 25, 38, 25}, {38, 26, 75, 50}, {76, 10, 150, 100},
                           {290, 1, 300, 200}, {1, 1, 38, 25}};
    for (size_t i = 0; i < sizeof asks / sizeof asks[0]; i++) {
        want_size ws = {asks[i][0], asks[i][1]};
        CHECK_OK(sh_image_read(path, 3, ask_size, &ws, &img));
        CHECK(img.w == asks[i][2] && img.h == asks[i][3] && img.full_w == 300 && img.full_h == 200,
              "asked %dx%d: got %dx%d of %dx%d, want %dx%d", asks[i][0], asks[i][1], img.w, img.h, img.full_w,
              img.full_h, asks[i][2], asks[i][3]);
    }
    sh_image_fini(&img);
}

static long peak_kb(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long kb = -1;
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, "VmHWM:", 6)) kb = strtol(line + 6, NULL, 10);
    if (f) fclose(f);
    return kb;
}

/* Damaged headers claiming huge pictures: refused before gigabytes are taken, also when the
 * decode may shrink them 8 times (a progressive file keeps its full size's coefficients). */
static void huge_claims_are_refused_without_taking_the_memory(void)
{
    sh_image img;
    memset(&img, 0, sizeof img);
    const char *files[] = {"claims_30000.jpg", "claims_16000.jpg"};
    for (int i = 0; i < 2; i++) {
        char path[512];
        snprintf(path, sizeof path, "%s/%s", dir, files[i]);
        long before = peak_kb();
        want_size ws = {1, 1};
        shoal_result rc = sh_image_read(path, 3, ask_size, &ws, &img);
        long grew = peak_kb() - before;
        CHECK(rc == SHOAL_ERR_FORMAT && strstr(shoal_last_error(), files[i]), "%s: %s: %s", files[i],
              shoal_result_name(rc), shoal_last_error());
        CHECK(check_under_san() || grew < 300 * 1024, "%s: peak memory grew %ld kB", files[i], grew);
    }
    sh_image_fini(&img);
}

/* A 10000 x 10000 picture asked for 6000 x 6000: the power-of-two scales (1/2: 5000, too
 * small; 1: 100 Mpixels, past the bound) give way to 5/8 (6250), which is decoded until the
 * data runs out; the full size is refused. */
static void past_the_bound_an_odd_scale_is_taken(void)
{
    sh_image img;
    memset(&img, 0, sizeof img);
    char path[512];
    snprintf(path, sizeof path, "%s/claims_10000.jpg", dir);
    want_size ws = {6000, 6000};
    shoal_result rc = sh_image_read(path, 3, ask_size, &ws, &img);
    CHECK(rc == SHOAL_ERR_FORMAT && strstr(shoal_last_error(), "damaged"), "asked 6000: %s: %s",
          shoal_result_name(rc), shoal_last_error());
    ws.w = ws.h = 0;
    rc = sh_image_read(path, 3, ask_size, &ws, &img);
    CHECK(rc == SHOAL_ERR_FORMAT && strstr(shoal_last_error(), "decodes to 10000x10000"), "full size: %s: %s",
          shoal_result_name(rc), shoal_last_error());
    sh_image_fini(&img);
}

static void names_with_picture_extensions_are_taken(void)
{
    CHECK(sh_image_name_ok("a.jpg") && sh_image_name_ok("B.JPEG") && sh_image_name_ok("c.Png"), "extensions");
    CHECK(!sh_image_name_ok("a.txt") && !sh_image_name_ok(".jpg") && !sh_image_name_ok("jpg") &&
          !sh_image_name_ok("a.jpg.bak"), "non-pictures");
}

int main(void)
{
    check_begin("test_image_decode", 120);
    if (!mkdtemp(dir)) {
        CHECK(0, "mkdtemp failed");
        return check_end();
    }
    char cmd[1024], out[4096];
    snprintf(cmd, sizeof cmd, "/usr/bin/python3 tests/data/image_fixtures.py %s 2>&1", dir);
    int st = sh_test_run(cmd, out, sizeof out);
    CHECK(st == 0, "the fixtures need /usr/bin/python3 with numpy and PIL (python3-pil; scripts/deps.sh): %s",
          out);
    if (st == 0) {
        RUN(pictures_match_the_references_and_damaged_files_are_refused);
        RUN(missing_and_unreadable_files_are_io_errors_naming_them);
        RUN(dct_scaling_picks_the_smallest_scale_that_keeps_the_size);
        RUN(huge_claims_are_refused_without_taking_the_memory);
        RUN(past_the_bound_an_odd_scale_is_taken);
    }
    RUN(names_with_picture_extensions_are_taken);
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
    return check_end();
}
