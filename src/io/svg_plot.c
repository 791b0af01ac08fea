/* svg_plot.c — line and stacked bar charts written as SVG (svg_plot.h): data ranges padded
 * and cut at "nice" tick steps (1, 2 or 5 times a power of ten), text escaped for XML,
 * colours from a fixed palette (Tableau 10) so the same series keeps its colour.
 * Not here: reading runs, timelines or benchmark rows (src/cli/cmd_plot.c).
 * Proved by tests/io/test_svg_plot.c. */
#include "io/svg_plot.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "base/err.h"

static const char *const palette[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
                                      "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"};
#define NCOLORS (int)(sizeof palette / sizeof palette[0])

/* Panel geometry in SVG user units (px). */
#define PANEL_W 560
#define PANEL_H 400
#define MARGIN_L 78
#define MARGIN_R 24
#define MARGIN_T 56
#define MARGIN_B 64
#define TICKS_TARGET 6

int sh_svg_path_ok(const char *path)
{
    size_t n = path ? strlen(path) : 0;
    return n > 4 && !strcasecmp(path + n - 4, ".svg");
}

/* Length of the well-formed UTF-8 sequence at s that XML 1.0 allows (no surrogates, no
 * U+FFFE / U+FFFF, no overlong forms), or 0. */
static int utf8_ok(const unsigned char *s)
{
    if (s[0] < 0x80) return 1;
    int n = s[0] >= 0xf0 && s[0] <= 0xf4 ? 4 : s[0] >= 0xe0 ? 3 : s[0] >= 0xc2 && s[0] < 0xe0 ? 2 : 0;
    if (!n || s[0] > 0xf4) return 0;
    unsigned cp = s[0] & (0x7f >> n);
    for (int i = 1; i < n; i++) {
        if ((s[i] & 0xc0) != 0x80) return 0;
        cp = (cp << 6) | (s[i] & 0x3f);
    }
    static const unsigned lowest[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < lowest[n] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff) || cp == 0xfffe || cp == 0xffff)
        return 0;
    return n;
}

/* Text as XML character data: markup escaped; control bytes and bytes that are not UTF-8
 * (a crafted tag) become U+FFFD, so the file stays well-formed. */
static void put_text(FILE *f, const char *text)
{
    const unsigned char *s = (const unsigned char *)text;
    while (*s) {
        int n = utf8_ok(s);
        if (*s == '&') fputs("&amp;", f);
        else if (*s == '<') fputs("&lt;", f);
        else if (*s == '>') fputs("&gt;", f);
        else if (*s == '"') fputs("&quot;", f);
        else if (!n || (*s < 0x20 && *s != '\t' && *s != '\n')) fputs("\xef\xbf\xbd", f);
        else fwrite(s, 1, (size_t)n, f);
        s += n ? n : 1;
    }
}

static void text(FILE *f, double x, double y, const char *anchor, int size, const char *extra, const char *s)
{
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"%s\" font-size=\"%d\"%s%s>", x, y, anchor, size,
            extra ? " " : "", extra ? extra : "");
    put_text(f, s);
    fputs("</text>\n", f);
}

/* A title centred at x in a picture `width` wide: a long one gets a smaller font, down to
 * 9 px, so that it fits with a margin (bold glyphs average about 0.62 em). */
static void title_text_at(FILE *f, double x, double y, double width, int size, const char *s)
{
    double room = width - 16, need = 0.62 * size * (double)strlen(s);
    if (need > room) size = (int)(size * room / need);
    if (size < 9) size = 9;
    text(f, x, y, "middle", size, "font-weight=\"bold\"", s);
}

static void title_text(FILE *f, double x, double width, int size, const char *s) { title_text_at(f, x, 24, width, size, s); }

/* A step of 1, 2 or 5 times a power of ten giving about `target` intervals over range. */
static double nice_step(double range, int target)
{
    double raw = range / target, mag = pow(10, floor(log10(raw))), f = raw / mag;
    return (f < 1.5 ? 1 : f < 3 ? 2 : f < 7 ? 5 : 10) * mag;
}

static void fmt_num(char *buf, size_t n, double v, double step)
{
    if (fabs(v) < step * 1e-9) v = 0;
    if (fabs(v) >= 1e6 || (fabs(v) < 1e-3 && v != 0)) snprintf(buf, n, "%.3g", v);
    else {
        int decimals = step >= 1 ? 0 : (int)ceil(-log10(step) - 1e-9);
        snprintf(buf, n, "%.*f", decimals > 6 ? 6 : decimals, v);
    }
}

static void fmt_bytes(char *buf, size_t n, double v)
{
    static const char *unit[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int u = 0;
    while (v >= 1024 && u < 4) v /= 1024, u++;
    snprintf(buf, n, "%g %s", v, unit[u]);
}

typedef struct {
    double lo, hi; /* data space */
    double p0, p1; /* pixels */
    int log2;
} axis;

static double to_px(const axis *a, double v)
{
    if (a->log2) v = log2(v);
    return a->p0 + (v - a->lo) / (a->hi - a->lo) * (a->p1 - a->p0);
}

/* lo..hi (already log2 when log2) widened to whole ticks; *step the tick step. */
static void fit_axis(axis *a, double lo, double hi, int pad_to_zero, double *step)
{
    if (pad_to_zero && lo > 0 && lo < hi * 0.5) lo = 0; /* small values: start at zero */
    if (hi - lo < 1e-12 * (fabs(hi) + 1)) {
        lo -= fabs(lo) * 0.1 + 0.5;
        hi += fabs(hi) * 0.1 + 0.5;
    }
    if (a->log2) {
        *step = ceil((hi - lo) / TICKS_TARGET);
        if (*step < 1) *step = 1;
        a->lo = floor(lo);
        a->hi = ceil(hi);
        if (a->hi == a->lo) a->hi = a->lo + 1;
        return;
    }
    *step = nice_step(hi - lo, TICKS_TARGET);
    /* 2.0000001 (a float's rounding) stays on the tick at 2 */
    a->lo = floor(lo / *step + 1e-6) * *step;
    a->hi = ceil(hi / *step - 1e-6) * *step;
}

static shoal_result open_svg(const char *path, int w, int h, FILE **out)
{
    *out = NULL;
    if (!sh_svg_path_ok(path))
        return SH_FAIL(SHOAL_ERR_INVALID, "%s: charts are written as SVG; name the file *.svg (rsvg-convert or a "
                       "browser turns it into PNG)", path ? path : "(null)");
    FILE *f = fopen(path, "w");
    if (!f) return SH_FAIL(SHOAL_ERR_IO, "%s: cannot create the chart: %s", path, strerror(errno));
    fprintf(f, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
               "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" "
               "font-family=\"DejaVu Sans, Helvetica, Arial, sans-serif\">\n"
               "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n", w, h, w, h);
    *out = f;
    return SHOAL_OK;
}

static shoal_result close_svg(FILE *f, const char *path)
{
    fputs("</svg>\n", f);
    if (ferror(f) | fclose(f)) return SH_FAIL(SHOAL_ERR_IO, "%s: write failed (disk full?)", path);
    return SHOAL_OK;
}

/* Axes frame, grid, ticks and labels of one panel at (ox, oy). */
static void draw_axes(FILE *f, const axis *ax, const axis *ay, double xstep, double ystep, int x_bytes,
                      const char *xlabel, const char *ylabel, double ox, double oy)
{
    double x0 = ax->p0, x1 = ax->p1, y0 = ay->p0, y1 = ay->p1; /* y0 bottom, y1 top */
    char buf[64];
    for (double v = ay->lo; v <= ay->hi + ystep * 1e-6; v += ystep) {
        double y = to_px(ay, v);
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#e5e5e5\"/>\n", x0, y, x1, y);
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#333\"/>\n", x0 - 5, y, x0, y);
        fmt_num(buf, sizeof buf, v, ystep);
        text(f, x0 - 8, y + 4, "end", 12, NULL, buf);
    }
    for (double v = ax->lo; v <= ax->hi + xstep * 1e-6; v += xstep) {
        double x = ax->log2 ? ax->p0 + (v - ax->lo) / (ax->hi - ax->lo) * (ax->p1 - ax->p0) : to_px(ax, v);
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#e5e5e5\"/>\n", x, y0, x, y1);
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#333\"/>\n", x, y0, x, y0 + 5);
        if (ax->log2 && x_bytes) fmt_bytes(buf, sizeof buf, exp2(v));
        else if (ax->log2) snprintf(buf, sizeof buf, "%g", exp2(v));
        else fmt_num(buf, sizeof buf, v, xstep);
        text(f, x, y0 + 20, "middle", 12, NULL, buf);
    }
    fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"none\" stroke=\"#333\"/>\n", x0, y1,
            x1 - x0, y0 - y1);
    text(f, (x0 + x1) / 2, y0 + 44, "middle", 14, NULL, xlabel ? xlabel : "");
    char rot[96];
    double ly = (y0 + y1) / 2, lx = ox + 18;
    snprintf(rot, sizeof rot, "transform=\"rotate(-90 %.1f %.1f)\"", lx, ly);
    text(f, lx, ly, "middle", 14, rot, ylabel ? ylabel : "");
    (void)oy;
}

/* Legend entries in a box at the panel's top right: a colour swatch and the label. */
static void draw_legend(FILE *f, double right, double top, int n, const char *const *labels,
                        const char *const *colors, int as_boxes)
{
    size_t longest = 0;
    for (int i = 0; i < n; i++)
        if (labels[i] && strlen(labels[i]) > longest) longest = strlen(labels[i]);
    double w = 36 + 7.0 * (double)longest, h = 8 + 18.0 * n, x = right - w - 8, y = top + 8;
    fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"white\" fill-opacity=\"0.85\" "
               "stroke=\"#999\"/>\n", x, y, w, h);
    for (int i = 0; i < n; i++) {
        double cy = y + 14 + 18.0 * i;
        if (as_boxes)
            fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"18\" height=\"10\" fill=\"%s\"/>\n", x + 6, cy - 5, colors[i]);
        else
            fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" stroke-width=\"2.5\"/>\n",
                    x + 6, cy, x + 24, cy, colors[i]);
        text(f, x + 30, cy + 4, "start", 12, NULL, labels[i] ? labels[i] : "");
    }
}

/* The line chart's legend goes under the panel in rows, so it never hides a curve. */
#define LEGEND_ROW_H 18

static int legend_per_row(const sh_plot_panel *p)
{
    size_t longest = 1;
    for (int s = 0; s < p->nseries; s++)
        if (p->series[s].label && strlen(p->series[s].label) > longest) longest = strlen(p->series[s].label);
    int per = (int)((PANEL_W - MARGIN_L - MARGIN_R) / (34 + 7.0 * (double)longest));
    return per < 1 ? 1 : per;
}

static int legend_rows(const sh_plot_panel *p)
{
    int per = legend_per_row(p);
    return (p->nseries + per - 1) / per;
}

static void draw_legend_below(FILE *f, const sh_plot_panel *p, double x0, double y0)
{
    int per = legend_per_row(p);
    double col_w = (PANEL_W - MARGIN_L - MARGIN_R) / (double)per;
    for (int s = 0; s < p->nseries; s++) {
        double x = x0 + col_w * (s % per), y = y0 + LEGEND_ROW_H * (s / per);
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" stroke-width=\"2.5\"/>\n", x, y,
                x + 20, y, palette[s % NCOLORS]);
        text(f, x + 26, y + 4, "start", 12, NULL, p->series[s].label ? p->series[s].label : "");
    }
}

/* Series this short get a dot at every point (evaluations once per epoch). */
#define FEW_POINTS 40

static void draw_panel(FILE *f, const sh_plot_panel *p, double ox, double oy)
{
    double xlo = INFINITY, xhi = -INFINITY, ylo = INFINITY, yhi = -INFINITY;
    for (int s = 0; s < p->nseries; s++)
        for (size_t i = 0; i < p->series[s].n; i++) {
            double x = p->series[s].x[i], y = p->series[s].y[i];
            if (!isfinite(x) || !isfinite(y) || (p->x_bytes_log2 && x <= 0)) continue;
            if (p->x_bytes_log2) x = log2(x);
            if (x < xlo) xlo = x;
            if (x > xhi) xhi = x;
            if (y < ylo) ylo = y;
            if (y > yhi) yhi = y;
        }
    axis ax = {0, 1, ox + MARGIN_L, ox + PANEL_W - MARGIN_R, p->x_bytes_log2};
    axis ay = {0, 1, oy + PANEL_H - MARGIN_B, oy + MARGIN_T, 0};
    double xstep, ystep;
    fit_axis(&ax, xlo, xhi, 0, &xstep);
    fit_axis(&ay, ylo, yhi, 1, &ystep);
    title_text_at(f, ox + PANEL_W / 2.0, oy + 36, PANEL_W, 16, p->title ? p->title : ""); /* a long one shrinks */
    draw_axes(f, &ax, &ay, xstep, ystep, p->x_bytes_log2, p->xlabel, p->ylabel, ox, oy);
    for (int s = 0; s < p->nseries; s++) {
        const sh_plot_series *se = &p->series[s];
        const char *c = palette[s % NCOLORS];
        int open = 0;
        for (size_t i = 0; i < se->n; i++) {
            double x = se->x[i], y = se->y[i];
            if (!isfinite(x) || !isfinite(y) || (p->x_bytes_log2 && x <= 0)) {
                if (open) fputs("\"/>\n", f);
                open = 0;
                continue;
            }
            double px = ax.log2 ? ax.p0 + (log2(x) - ax.lo) / (ax.hi - ax.lo) * (ax.p1 - ax.p0) : to_px(&ax, x);
            double py = to_px(&ay, y);
            if (!open) fprintf(f, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"1.8\" points=\"", c);
            fprintf(f, "%s%.1f,%.1f", open ? " " : "", px, py);
            open = 1;
        }
        if (open) fputs("\"/>\n", f);
        for (size_t i = 0; (p->markers || se->n <= FEW_POINTS) && i < se->n; i++) {
            double x = se->x[i], y = se->y[i];
            if (!isfinite(x) || !isfinite(y) || (p->x_bytes_log2 && x <= 0)) continue;
            double px = ax.log2 ? ax.p0 + (log2(x) - ax.lo) / (ax.hi - ax.lo) * (ax.p1 - ax.p0) : to_px(&ax, x);
            fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3\" fill=\"%s\"/>\n", px, to_px(&ay, y), c);
        }
    }
    draw_legend_below(f, p, ax.p0, oy + PANEL_H + 4);
}

static int has_point(const sh_plot_panel *p)
{
    for (int s = 0; s < p->nseries; s++)
        for (size_t i = 0; i < p->series[s].n; i++)
            if (isfinite(p->series[s].x[i]) && isfinite(p->series[s].y[i]) &&
                (!p->x_bytes_log2 || p->series[s].x[i] > 0))
                return 1;
    return 0;
}

shoal_result sh_svg_line_chart(const char *path, const char *title, const sh_plot_panel *panels, int npanels)
{
    if (npanels < 1) return SH_FAIL(SHOAL_ERR_INVALID, "%s: nothing to plot", path);
    for (int i = 0; i < npanels; i++)
        if (!has_point(&panels[i]))
            return SH_FAIL(SHOAL_ERR_INVALID, "%s: the panel \"%s\" has no data point", path,
                           panels[i].title ? panels[i].title : "");
    int top = title && *title ? 30 : 0, rows = 0;
    for (int i = 0; i < npanels; i++)
        if (legend_rows(&panels[i]) > rows) rows = legend_rows(&panels[i]);
    FILE *f = NULL;
    SH_TRY(open_svg(path, PANEL_W * npanels, PANEL_H + top + rows * LEGEND_ROW_H + 8, &f));
    if (top) title_text(f, PANEL_W * npanels / 2.0, PANEL_W * npanels, 18, title);
    for (int i = 0; i < npanels; i++) draw_panel(f, &panels[i], (double)PANEL_W * i, top);
    return close_svg(f, path);
}

shoal_result sh_svg_stacked_bars(const char *path, const sh_plot_stacked *c)
{
    if (c->ngroups < 1 || c->nbars < 1 || c->nparts < 1)
        return SH_FAIL(SHOAL_ERR_INVALID, "%s: nothing to plot (%d groups of %d bars)", path, c->ngroups, c->nbars);
    double top_v = 0;
    for (int g = 0; g < c->ngroups; g++)
        for (int b = 0; b < c->nbars; b++) {
            double sum = 0;
            for (int k = 0; k < c->nparts; k++) {
                double v = c->value[((size_t)g * c->nbars + b) * c->nparts + k];
                if (isfinite(v) && v > 0) sum += v;
            }
            if (sum > top_v) top_v = sum;
        }
    if (!(top_v > 0)) return SH_FAIL(SHOAL_ERR_INVALID, "%s: every bar is empty", path);
    double bar_w = c->nbars * c->ngroups > 120 ? 6 : 16, gap = bar_w * 0.8;
    double group_w = c->nbars * (bar_w + 2) + gap;
    double plot_w = group_w * c->ngroups;
    int w = (int)(MARGIN_L + plot_w + MARGIN_R + 220), h = PANEL_H + 30;
    if (w < 640) w = 640;
    FILE *f = NULL;
    SH_TRY(open_svg(path, w, h, &f));
    title_text(f, w / 2.0, w, 18, c->title ? c->title : "");
    axis ax = {0, (double)c->ngroups, MARGIN_L, MARGIN_L + plot_w, 0};
    axis ay = {0, 1, 30 + PANEL_H - MARGIN_B, 30 + MARGIN_T - 20, 0};
    double ystep;
    fit_axis(&ay, 0, top_v, 1, &ystep);
    char buf[64];
    for (double v = ay.lo; v <= ay.hi + ystep * 1e-6; v += ystep) {
        double y = to_px(&ay, v);
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#e5e5e5\"/>\n", ax.p0, y, ax.p1, y);
        fmt_num(buf, sizeof buf, v, ystep);
        text(f, ax.p0 - 8, y + 4, "end", 12, NULL, buf);
    }
    /* label every group while they fit, else every k-th */
    int every = (int)ceil(40.0 / group_w);
    if (every < 1) every = 1;
    for (int g = 0; g < c->ngroups; g++) {
        double gx = ax.p0 + group_w * g + gap / 2;
        for (int b = 0; b < c->nbars; b++) {
            double x = gx + b * (bar_w + 2), base = 0;
            for (int k = 0; k < c->nparts; k++) {
                double v = c->value[((size_t)g * c->nbars + b) * c->nparts + k];
                if (!isfinite(v) || v <= 0) continue;
                double y_top = to_px(&ay, base + v), y_bot = to_px(&ay, base);
                fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.2f\" fill=\"%s\"/>\n", x, y_top,
                        bar_w, y_bot - y_top, palette[k % NCOLORS]);
                base += v;
            }
            if (c->bar_labels && c->nbars > 1 && bar_w >= 12)
                text(f, x + bar_w / 2, ay.p0 + 12, "middle", 9, NULL, c->bar_labels[b]);
        }
        if (g % every == 0 && c->group_labels)
            text(f, gx + (group_w - gap) / 2, ay.p0 + (c->nbars > 1 && bar_w >= 12 ? 28 : 18), "middle", 12, NULL,
                 c->group_labels[g]);
    }
    fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"none\" stroke=\"#333\"/>\n", ax.p0,
            ay.p1, ax.p1 - ax.p0, ay.p0 - ay.p1);
    text(f, (ax.p0 + ax.p1) / 2, ay.p0 + 48, "middle", 14, NULL, c->xlabel ? c->xlabel : "");
    char rot[96];
    snprintf(rot, sizeof rot, "transform=\"rotate(-90 18 %.1f)\"", (ay.p0 + ay.p1) / 2);
    text(f, 18, (ay.p0 + ay.p1) / 2, "middle", 14, rot, c->ylabel ? c->ylabel : "");
    const char *colors[NCOLORS];
    int nl = c->nparts < NCOLORS ? c->nparts : NCOLORS;
    for (int k = 0; k < nl; k++) colors[k] = palette[k];
    /* legend right of the plot, the top part first as the bars stack */
    const char *labels[NCOLORS], *cols[NCOLORS];
    for (int k = 0; k < nl; k++) {
        labels[k] = c->part_labels[nl - 1 - k];
        cols[k] = colors[nl - 1 - k];
    }
    draw_legend(f, ax.p1 + 220, ay.p1 - 8, nl, labels, cols, 1);
    return close_svg(f, path);
}
