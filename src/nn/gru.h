/* gru.h — what the two forms of [gru] share (layer_gru.c: PyTorch's, layer_gru_darknet.c:
 * Darknet's): the input part of the gates, X Wx^T + bx over all rows, a row lookup when the
 * inputs are one-hot.
 * Not here: either form's equations; the helpers of every recurrent layer (recurrent.h).
 * Proved by tests/nn/test_layer_rnn.c and tests/nn/test_darknet_gru.c. */
#ifndef SH_GRU_H
#define SH_GRU_H

#include "nn/recurrent.h"

/* Forward's start: h0 (B, H) from the carried state; l->input_onehot set from this pass's
 * inputs (each row's column in idx), and if so wt (I, g) = Wx (g, I) transposed plus bx, so
 * that a row's input part is a row of wt. */
void sh_gru_begin(sh_layer *l, const sh_exec *x, float *h0, const float *wx, const float *bx,
                  int g, int32_t *idx, float *wt);
/* Rows [r0, r1) of the input part X Wx^T + bx into dst (rows, g): a row of wt each when
 * one-hot, else through pk (Wx^T packed for sh_packed_gemm). */
void sh_gru_input_part(const sh_layer *l, int r0, int r1, int g, const float *wt,
                       const int32_t *idx, const float *pk, const float *bx, float *dst);

#endif
