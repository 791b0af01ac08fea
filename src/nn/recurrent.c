/* recurrent.c — helpers the recurrent layers share: common keys, initialisation, bias
 * gradient sums.
 * Not here: the layers' equations (layer_rnn.c, layer_gru.c, layer_lstm.c).
 * Proved by tests/nn/test_layer_rnn.c. */
#include "nn/recurrent.h"

#include "base/err.h"

double sh_rnn_split_min_macs = 2.0 * 1024 * 1024;

shoal_result sh_rnn_parse_common(sh_layer *l, sh_cfg_section *s, const sh_parse_ctx *ctx)
{
    int bn = 0;
    SH_TRY(sh_cfg_int(s, "batch_normalize", 0, 0, 1, &bn));
    if (bn)
        return sh_cfg_fail_at(s, "batch_normalize", SHOAL_ERR_FORMAT,
                              "batch_normalize=1 inside a recurrent layer is not supported; "
                              "remove it (or set 0)");
    l->steps = ctx->time_steps > 0 ? ctx->time_steps : 1;
    if (ctx->batch % l->steps)
        return sh_cfg_fail_at(s, NULL, SHOAL_ERR_FORMAT,
                              "%d rows are not whole sequences of time_steps=%d", ctx->batch,
                              l->steps);
    return SHOAL_OK;
}

void sh_rnn_uniform(float *p, size_t count, float scale, sh_rng *rng)
{
    for (size_t i = 0; i < count; i++) p[i] = scale * (2.0f * sh_rng_float(rng) - 1.0f);
}

void sh_rnn_colsum(const float *g, int rows, int ld, int k0, int k1, float *out)
{
    int nk = k1 - k0;
    for (int k = 0; k < nk; k++) out[k] = 0.0f;
    for (int r = 0; r < rows; r++) {
        const float *row = g + (size_t)r * ld + k0;
        for (int k = 0; k < nk; k++) out[k] += row[k];
    }
}

int sh_rnn_onehot(const float *x, int rows, int in, int32_t *idx)
{
    for (int r = 0; r < rows; r++) {
        const float *row = x + (size_t)r * in;
        int hot = -1;
        for (int i = 0; i < in; i++) {
            if (row[i] == 0.0f) continue;
            if (row[i] != 1.0f || hot >= 0) return 0;
            hot = i;
        }
        if (hot < 0) return 0;
        idx[r] = hot;
    }
    return 1;
}

void sh_rnn_transpose(const float *w, int g, int in, float *wt)
{
    for (int k = 0; k < g; k++)
        for (int c = 0; c < in; c++) wt[(size_t)c * g + k] = w[(size_t)k * in + c];
}

void sh_rnn_onehot_grad(const float *dg, int rows, int g, const int32_t *idx, int in, int k0,
                        int k1, float *acc, float *gw)
{
    int nk = k1 - k0;
    if (nk <= 0) return;
    for (int c = 0; c < in; c++) memset(acc + (size_t)c * g + k0, 0, (size_t)nk * sizeof(float));
    for (int r = 0; r < rows; r++) {
        float *dst = acc + (size_t)idx[r] * g + k0;
        const float *src = dg + (size_t)r * g + k0;
        for (int k = 0; k < nk; k++) dst[k] += src[k];
    }
    for (int k = k0; k < k1; k++)
        for (int c = 0; c < in; c++) gw[(size_t)k * in + c] = acc[(size_t)c * g + k];
}
