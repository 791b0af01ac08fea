/* conv_winograd.h — 3x3 stride-1 pad-1 convolutions by Winograd's F(2x2, 3x3), forward and
 * the input gradient (the same convolution with the kernels turned and channels swapped).
 * Not here: the weight gradient, bias, activation, batch norm (layer_conv.c).
 * Proved by tests/nn/test_layer_conv.c. */
#ifndef SH_CONV_WINOGRAD_H
#define SH_CONV_WINOGRAD_H

#include <stddef.h>

/* Scratch floats sh_wino_conv needs for images of (h, w) with c and f channels (either
 * direction), for chunks of at most nimg images. */
size_t sh_wino_ws_count(int c, int f, int h, int w, int nimg);

/* The transformed kernels U (16, f, c) of weights wt (f, c, 3, 3), output channels
 * [f0, f1) only (threads split them). */
void sh_wino_weights(const float *wt, int f, int c, int f0, int f1, float *u);

/* out (nimg, out_ch, h, w) = (accum ? out : 0) + conv3x3(in (nimg, in_ch, h, w)), stride 1,
 * zero padding 1. flip = 0: u is sh_wino_weights of (out_ch, in_ch, 3, 3) weights
 * (forward). flip = 1: u is sh_wino_weights of (in_ch, out_ch, 3, 3) weights, used turned
 * 180 degrees with the channels swapped (the input gradient of that forward convolution).
 * ws: sh_wino_ws_count floats, 64-byte aligned. Runs on the calling thread. */
void sh_wino_conv(const float *u, int flip, const float *in, int nimg, int in_ch, int h, int w,
                  int out_ch, float *out, int accum, float *ws);

#endif
