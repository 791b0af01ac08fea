/* image_grid.h — a grid of small images as PNG (libpng) or SVG (the PNG inside, base64).
 * Not here: what the images are (src/cli/cmd_sample.c).
 * Proved by tests/io/test_image_grid.c. */
#ifndef SH_IMAGE_GRID_H
#define SH_IMAGE_GRID_H

#include "shoal/result.h"

/* Write n images (n, C, H, W), values clipped to [0, 1], C 1 (grey) or 3 (RGB), as a grid of
 * cols columns (cols < 1: a square-ish grid) with a 1-pixel border, to path: a name ending in
 * .png is a PNG, .svg an SVG; another is SHOAL_ERR_INVALID. Written to path.tmp and renamed:
 * the old file survives a failure (SHOAL_ERR_IO naming the file). */
shoal_result sh_image_grid_save(const char *path, const float *images, int n, int c, int h, int w, int cols);

#endif
