/* svg_plot.h — charts as SVG files that browsers and image viewers open, drawn by shoal
 * itself: line charts (one or several panels side by side, with axes, ticks, a legend and
 * units) and stacked bar charts.
 * Not here: where the numbers come from (src/cli/cmd_plot.c, cmd_bench.c).
 * Proved by tests/io/test_svg_plot.c and tests/cli/test_plot.c. */
#ifndef SH_SVG_PLOT_H
#define SH_SVG_PLOT_H

#include <stddef.h>

#include "shoal/result.h"

typedef struct {
    const char *label;          /* in the legend */
    const double *x, *y;        /* n points; a NaN y breaks the line */
    size_t n;
} sh_plot_series;

typedef struct {
    const char *title;
    const char *xlabel, *ylabel; /* with units: "wall time (s)", "busbw (GB/s)" */
    const sh_plot_series *series;
    int nseries;
    int x_bytes_log2;           /* x is a byte count: log2 axis, ticks labelled 1 KiB, 1 MiB */
    int markers;                /* a dot at every point */
} sh_plot_panel;

/* Write npanels line-chart panels side by side under one title to path (".svg"). Errors:
 * SHOAL_ERR_INVALID (no panel, a panel without any finite point, a path not ending in
 * .svg), SHOAL_ERR_IO naming the path. */
shoal_result sh_svg_line_chart(const char *path, const char *title, const sh_plot_panel *panels, int npanels);

typedef struct {
    const char *title, *xlabel, *ylabel;
    int ngroups, nbars, nparts;       /* groups along x, bars per group, parts per bar */
    const char *const *group_labels;  /* [ngroups] under each group */
    const char *const *bar_labels;    /* [nbars] under each bar (NULL: none) */
    const char *const *part_labels;   /* [nparts] in the legend, bottom part first */
    const double *value;              /* [ngroups][nbars][nparts]; a NaN part: none */
} sh_plot_stacked;

/* Write a stacked bar chart to path (".svg"). Same errors as sh_svg_line_chart. */
shoal_result sh_svg_stacked_bars(const char *path, const sh_plot_stacked *c);

/* 1 when path ends in ".svg" (any case). */
int sh_svg_path_ok(const char *path);

#endif
