/* pipeline_tp.c — a pipeline stage split across T tensor-parallel ranks: its pairs of
 * [connected] layers (column split, then row split, as strategy_tensor.c's) planned inside
 * the stage, and each rank's shares placed in the whole model's blocks.
 * Not here: the schedule, links and sum hook (strategy_pipeline.c), the split math
 * (src/nn/layer_dense.c), the shares' construction (src/nn/net_part.c).
 * Proved by tests/train/test_pipeline_tp.c. */
#include "train/pipeline_tp.h"

#include <string.h>

#include "base/err.h"
#include "base/util.h"

shoal_result sh_pipetp_plan(const sh_net *plan, const int *cuts, int S, int T, unsigned char *roles, int *pairs)
{
    int total = 0;
    memset(roles, 0, (size_t)sh_net_nlayers(plan));
    for (int k = 0; k < S; k++) {
        pairs[k] = 0;
        for (int i = cuts[k]; i + 1 < cuts[k + 1]; i++)
            if (sh_net_tp_pair_ok(plan, i, T)) {
                roles[i] = SH_TP_COLUMN;
                roles[i + 1] = SH_TP_ROW;
                pairs[k]++;
                i++;
            }
        total += pairs[k];
    }
    if (!total)
        return SH_FAIL(SHOAL_ERR_INVALID, "--pipeline %d --tensor-parallel %d: no stage of %s has two consecutive "
                       "[connected] layers (without batch_normalize, the first's outputs divisible by %d) to split; "
                       "use another T, fewer stages (stage= keys) or --pipeline alone", S, T, sh_net_cfg_path(plan),
                       T);
    return SHOAL_OK;
}

/* A column share is rows [t k, (t+1) k) of W (K, I) and those biases; a row share columns
 * [t i, (t+1) i) of W (K, I) and the biases whole (as strategy_tensor.c's move_share). */
void sh_pipetp_move(const sh_net *net, const unsigned char *roles, const size_t *whole_off, int t, int T,
                    float *mine, float *whole, int to_whole)
{
    int lo, hi;
    sh_net_part(net, &lo, &hi);
    for (int i = lo; i < hi; i++) {
        size_t mo, mc;
        int c, h, w;
        sh_net_layer_params(net, i, &mo, &mc);
        sh_net_layer_shape(net, i, &c, &h, &w);
        float *m = mine + mo, *wh = whole + whole_off[i];
        size_t k = (size_t)c * h * w, r = (size_t)t;
        if (!mc) continue;
        if (roles[i] == SH_TP_NONE) {
            if (!to_whole) memcpy(m, wh, mc * sizeof(float));
            else if (t == 0) memcpy(wh, m, mc * sizeof(float));
            continue;
        }
        if (roles[i] == SH_TP_COLUMN) { /* k = K / T outputs here */
            size_t in = mc / k - 1, K = k * (size_t)T;
            float *wr = wh + r * k * in, *wb = wh + K * in + r * k;
            memcpy(to_whole ? wr : m, to_whole ? m : wr, k * in * sizeof(float));
            memcpy(to_whole ? wb : m + k * in, to_whole ? m + k * in : wb, k * sizeof(float));
            continue;
        }
        size_t K = k, in = (mc - K) / K, I = in * (size_t)T; /* row: all K outputs, I / T inputs */
        for (size_t row = 0; row < K; row++) {
            float *wr = wh + row * I + r * in, *mr = m + row * in;
            memcpy(to_whole ? wr : mr, to_whole ? mr : wr, in * sizeof(float));
        }
        if (!to_whole) memcpy(m + K * in, wh + K * I, K * sizeof(float));
        else if (t == 0) memcpy(wh + K * I, m + K * in, K * sizeof(float));
    }
}

double sh_pipetp_sum_squares(const sh_net *net, const unsigned char *roles, int t, const float *g)
{
    if (t == 0) return sh_sum_squares(g, sh_net_nparams(net));
    int lo, hi;
    double sq = 0;
    sh_net_part(net, &lo, &hi);
    for (int i = lo; i < hi; i++) {
        size_t mo, mc;
        int c, h, w;
        if (roles[i] == SH_TP_NONE) continue;
        sh_net_layer_params(net, i, &mo, &mc);
        sh_net_layer_shape(net, i, &c, &h, &w);
        size_t K = (size_t)c * h * w;
        sq += sh_sum_squares(g + mo, roles[i] == SH_TP_ROW ? mc - K : mc); /* a row share's biases are whole */
    }
    return sq;
}
