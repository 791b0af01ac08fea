/* test_svg_plot.c — proves src/io/svg_plot.c: a line chart has one polyline per series with
 * one point per finite value, x pixels growing with x and y pixels falling as y grows, ticks
 * at nice values covering the data, labels escaped for XML, the legend naming each series;
 * a log2 byte axis labels its ticks in binary units; stacked bars put one rectangle per part
 * with heights in proportion; a path not ending in .svg and a panel without data are
 * refused with a message naming them; a title too long for the picture gets a smaller font. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "check.h"
#include "io/svg_plot.h"

static char dir[64], path[128], svg[1 << 17];

static void load(void)
{
    svg[0] = 0;
    FILE *f = fopen(path, "r");
    if (!f) return;
    size_t n = fread(svg, 1, sizeof svg - 1, f);
    svg[n] = 0;
    fclose(f);
}

static int count(const char *hay, const char *needle)
{
    int n = 0;
    for (const char *p = hay; (p = strstr(p, needle)); p++) n++;
    return n;
}

/* The points of the k-th polyline into px, py; returns how many. */
static int polyline(int k, double *px, double *py, int max)
{
    const char *p = svg;
    for (int i = 0; i <= k; i++) {
        p = strstr(p, "<polyline");
        if (!p) return -1;
        p++;
    }
    p = strstr(p, "points=\"");
    if (!p) return -1;
    p += 8;
    int n = 0;
    while (*p && *p != '"' && n < max) {
        char *end;
        px[n] = strtod(p, &end);
        if (*end != ',') break;
        py[n] = strtod(end + 1, &end);
        n++;
        p = end;
        while (*p == ' ') p++;
    }
    return n;
}

static void line_chart_places_points_and_ticks(void)
{
    double x[5] = {0, 1, 2, 3, 4}, y1[5] = {10, 7, 5, 4, 3.5}, y2[5] = {1, NAN, 2, 3, 4};
    sh_plot_series se[2] = {{"loss <train> & more", x, y1, 5}, {"second", x, y2, 5}};
    sh_plot_panel p = {"title \"q\"", "step", "loss (nats)", se, 2, 0, 0};
    snprintf(path, sizeof path, "%s/a.svg", dir);
    CHECK_OK(sh_svg_line_chart(path, "top", &p, 1));
    load();
    CHECK(strstr(svg, "<svg") && strstr(svg, "</svg>"), "not an SVG document");
    CHECK(strstr(svg, "loss &lt;train&gt; &amp; more") && strstr(svg, "title &quot;q&quot;"), "labels not escaped");
    CHECK(strstr(svg, ">step<") && strstr(svg, ">loss (nats)<") && strstr(svg, ">second<"), "axis labels or legend");
    /* the NaN breaks the second series into two polylines: 3 in all */
    CHECK(count(svg, "<polyline") == 3, "%d polylines", count(svg, "<polyline"));
    double px[16], py[16];
    int n = polyline(0, px, py, 16);
    CHECK(n == 5, "first series has %d points", n);
    int ok = 1;
    for (int i = 1; i < n; i++) ok &= px[i] > px[i - 1] && py[i] > py[i - 1]; /* y falls: pixels go down */
    CHECK(ok, "points not ordered as the data");
    CHECK(polyline(1, px, py, 16) == 1 && polyline(2, px, py, 16) == 3, "NaN split wrong");
    /* y from 0 (small values start at zero) to 10 in steps of 2 */
    CHECK(strstr(svg, ">0</text>") && strstr(svg, ">10</text>") && strstr(svg, ">4</text>"), "y ticks");
}

static void byte_axis_uses_binary_units(void)
{
    double x[4] = {8, 1024, 1 << 20, 64 << 20}, y[4] = {0.1, 1, 8, 9};
    sh_plot_series se = {"busbw", x, y, 4};
    sh_plot_panel p = {"b", "message size", "busbw (GB/s)", &se, 1, 1, 1};
    snprintf(path, sizeof path, "%s/b.svg", dir);
    CHECK_OK(sh_svg_line_chart(path, NULL, &p, 1));
    load();
    CHECK(strstr(svg, ">8 B<") && strstr(svg, "MiB<"), "byte ticks missing");
    CHECK(count(svg, "<circle") == 4, "%d markers", count(svg, "<circle"));
}

/* A title too long for the picture at 18 px gets a smaller font; a short one keeps 18. */
static void long_titles_shrink_to_fit(void)
{
    double x[2] = {1, 2}, y[2] = {1, 2};
    sh_plot_series se = {"s", x, y, 2};
    sh_plot_panel p = {"b", "x", "y", &se, 1, 0, 0};
    snprintf(path, sizeof path, "%s/t.svg", dir);
    CHECK_OK(sh_svg_line_chart(path, "short", &p, 1));
    load();
    CHECK(strstr(svg, "font-size=\"18\" font-weight=\"bold\">short<") != NULL, "a short title keeps 18 px");
    const char *lng = "allreduce on 2 ranks, one host: automatic choice (b2.out) against SHOAL_ALGO=ring";
    CHECK_OK(sh_svg_line_chart(path, lng, &p, 1));
    load();
    const char *at = strstr(svg, lng), *fs = at ? at : svg;
    while (fs > svg && strncmp(fs, "font-size=\"", 11)) fs--;
    int size = at && fs > svg ? atoi(fs + 11) : 0;
    CHECK(size >= 9 && size < 18 && 0.62 * size * (double)strlen(lng) <= 560, "long title at %d px", size);
}

/* Whether buf is UTF-8 that XML 1.0 accepts as character data (no C0 controls but tab,
 * newline and carriage return). */
static int xml_clean(const unsigned char *b)
{
    while (*b) {
        if (*b < 0x20 && *b != '\t' && *b != '\n' && *b != '\r') return 0;
        int n = *b < 0x80 ? 1 : (*b & 0xe0) == 0xc0 ? 2 : (*b & 0xf0) == 0xe0 ? 3 : (*b & 0xf8) == 0xf0 ? 4 : 0;
        if (!n || (n == 2 && *b < 0xc2)) return 0;
        for (int i = 1; i < n; i++)
            if ((b[i] & 0xc0) != 0x80) return 0;
        b += n;
    }
    return 1;
}

static void crafted_names_keep_the_file_well_formed(void)
{
    double x[2] = {1, 2}, y[2] = {1, 2};
    const char *name = "loss\x01\x1b[31m\xff\xfe half \xc3 \xed\xa0\x80 \xc0\xaf ok \xc2\xb5s";
    sh_plot_series se = {name, x, y, 2};
    sh_plot_panel p = {"tag\x02<b>", "x", "y", &se, 1, 0, 0};
    snprintf(path, sizeof path, "%s/c.svg", dir);
    CHECK_OK(sh_svg_line_chart(path, "title\x7f\x08", &p, 1));
    load();
    CHECK(svg[0] && xml_clean((const unsigned char *)svg), "the SVG is clean UTF-8 XML text");
    CHECK(strstr(svg, "ok \xc2\xb5s") != NULL, "valid UTF-8 is kept");
    CHECK(strstr(svg, "tag\xef\xbf\xbd&lt;b&gt;") != NULL, "a control byte becomes U+FFFD, markup is escaped");
}

static void stacked_bars_stack_in_proportion(void)
{
    const char *groups[2] = {"0", "1"}, *bars[2] = {"r0", "r1"}, *parts[3] = {"a", "b", "c"};
    double v[2 * 2 * 3] = {1, 2, 3, 2, 2, 2, 0, NAN, 6, 3, 3, 0};
    sh_plot_stacked c = {"t", "step", "time (ms)", 2, 2, 3, groups, bars, parts, v};
    snprintf(path, sizeof path, "%s/c.svg", dir);
    CHECK_OK(sh_svg_stacked_bars(path, &c));
    load();
    /* non-empty parts: 3 + 3 + 1 + 2 = 9 bar pieces, plus the frame, background and legend boxes */
    int heights = 0;
    double h6 = 0, h3 = 0;
    for (const char *p = svg; (p = strstr(p, "<rect ")); p++) {
        char tag[256];
        const char *end = strchr(p, '>');
        size_t len = end && (size_t)(end - p) < sizeof tag ? (size_t)(end - p) : 0;
        memcpy(tag, p, len);
        tag[len] = 0;
        const char *h = strstr(tag, "height=\"");
        if (!h || !strstr(tag, "fill=\"#") || strstr(tag, "width=\"18\"")) continue; /* legend swatches */
        double hv = strtod(h + 8, NULL);
        if (++heights == 1) h3 = hv; /* group 0, rank 0, part a = 1 */
        if (hv > h6) h6 = hv;
    }
    CHECK(heights == 9, "%d bar pieces", heights);
    CHECK(fabs(h6 / h3 - 6.0) < 0.05, "6 ms piece is %.3f times the 1 ms piece", h6 / h3);
    CHECK(strstr(svg, ">r1<") && strstr(svg, ">time (ms)<"), "labels");
}

static void bad_paths_and_empty_panels_are_refused(void)
{
    double x[1] = {1}, y[1] = {NAN};
    sh_plot_series se = {"s", x, y, 1};
    sh_plot_panel p = {"empty", "x", "y", &se, 1, 0, 0};
    snprintf(path, sizeof path, "%s/d.svg", dir);
    CHECK_RC(sh_svg_line_chart(path, NULL, &p, 1), SHOAL_ERR_INVALID);
    CHECK(strstr(shoal_last_error_message(), "\"empty\" has no data point"), "%s", shoal_last_error_message());
    y[0] = 1;
    CHECK_RC(sh_svg_line_chart("/tmp/x.png", NULL, &p, 1), SHOAL_ERR_INVALID);
    CHECK(strstr(shoal_last_error_message(), "x.png") && strstr(shoal_last_error_message(), "*.svg"), "%s",
          shoal_last_error_message());
    CHECK_RC(sh_svg_line_chart("/nonexistent-dir/x.svg", NULL, &p, 1), SHOAL_ERR_IO);
    CHECK(strstr(shoal_last_error_message(), "/nonexistent-dir/x.svg"), "%s", shoal_last_error_message());
}

int main(void)
{
    check_begin("test_svg_plot", 10);
    snprintf(dir, sizeof dir, "/tmp/shoal-test-svg-XXXXXX");
    if (!mkdtemp(dir)) return 1;
    RUN(line_chart_places_points_and_ticks);
    RUN(byte_axis_uses_binary_units);
    RUN(long_titles_shrink_to_fit);
    RUN(crafted_names_keep_the_file_well_formed);
    RUN(stacked_bars_stack_in_proportion);
    RUN(bad_paths_and_empty_panels_are_refused);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
    return check_end();
}
