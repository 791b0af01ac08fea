/* layer_table.c — the table of layer kinds by Darknet section name, "did you mean" for
 * misspelt sections, and resolving Darknet's relative layer references (from=-3).
 * Not here: the layers (layer_*.c), building the network (net.c).
 * Proved by tests/nn/test_net.c (unknown section, bad references). */
#include <stdio.h>
#include <string.h>

#include "base/err.h"
#include "nn/layer.h"

static const sh_layer_ops *const table[] = {
    &sh_conv_ops, &sh_dense_ops, &sh_maxpool_ops, &sh_avgpool_ops, &sh_dropout_ops,
    &sh_softmax_ops, &sh_cost_ops, &sh_shortcut_ops, &sh_route_ops, &sh_reorg_ops,
    &sh_crop_ops, &sh_rnn_ops, &sh_gru_ops, &sh_lstm_ops, &sh_crnn_ops,
    &sh_lrn_ops, &sh_deconv_ops, &sh_upsample_ops, &sh_local_ops, &sh_rbm_ops,
};
enum { NTABLE = sizeof table / sizeof table[0] };

/* Darknet accepts these spellings too. */
static const struct {
    const char *alias, *name;
} aliases[] = {{"conv", "convolutional"}, {"conn", "connected"}, {"max", "maxpool"},
               {"avg", "avgpool"}, {"soft", "softmax"}, {"lrn", "normalization"},
               {"deconv", "deconvolutional"}};

const sh_layer_ops *sh_layer_find(const char *cfg_name)
{
    for (size_t i = 0; i < sizeof aliases / sizeof aliases[0]; i++)
        if (strcmp(cfg_name, aliases[i].alias) == 0) cfg_name = aliases[i].name;
    for (int i = 0; i < NTABLE; i++)
        if (strcmp(table[i]->cfg_name, cfg_name) == 0) return table[i];
    return NULL;
}

static int edit_distance(const char *a, const char *b)
{
    int la = (int)strlen(a), lb = (int)strlen(b);
    if (la > 63 || lb > 63) return 99;
    int prev[64], cur[64];
    for (int j = 0; j <= lb; j++) prev[j] = j;
    for (int i = 1; i <= la; i++) {
        cur[0] = i;
        for (int j = 1; j <= lb; j++) {
            int sub = prev[j - 1] + (a[i - 1] != b[j - 1]);
            int del = prev[j] + 1, ins = cur[j - 1] + 1;
            cur[j] = sub < del ? (sub < ins ? sub : ins) : (del < ins ? del : ins);
        }
        memcpy(prev, cur, sizeof(int) * (size_t)(lb + 1));
    }
    return prev[lb];
}

/* Darknet's other section names (parser.c string_to_layer_type): a file using one gets "not
 * supported" rather than a guess at a misspelling. */
static const char *const darknet_only[] = {
    "batchnorm",
    "activation", "logistic", "l2norm", "region", "detection", "yolo", "iseg", "xnor"};

int sh_layer_is_darknet_only(const char *cfg_name)
{
    for (size_t i = 0; i < sizeof darknet_only / sizeof darknet_only[0]; i++)
        if (strcmp(cfg_name, darknet_only[i]) == 0) return 1;
    return 0;
}

void sh_layer_list(char *out, size_t out_nbytes)
{
    size_t len = 0;
    out[0] = 0;
    for (int i = 0; i < NTABLE && len < out_nbytes; i++)
        len += (size_t)snprintf(out + len, out_nbytes - len, "%s[%s]", i ? ", " : "",
                                table[i]->cfg_name);
}

const char *sh_layer_closest(const char *cfg_name)
{
    const char *best = table[0]->cfg_name;
    int best_d = 1 << 30;
    for (int i = 0; i < NTABLE; i++) {
        int d = edit_distance(cfg_name, table[i]->cfg_name);
        if (d < best_d) {
            best_d = d;
            best = table[i]->cfg_name;
        }
    }
    return best;
}

shoal_result sh_layer_ref(const sh_cfg_section *s, const char *key, int ref, int index,
                          int *out)
{
    int abs_index = ref < 0 ? index + ref : ref;
    if (abs_index < 0 || abs_index >= index)
        return sh_cfg_fail_at(s, key, SHOAL_ERR_FORMAT,
                              "%s=%d refers to layer %d, but this is layer %d: a reference must "
                              "name an earlier layer (negative counts back from this one)",
                              key, ref, abs_index, index);
    *out = abs_index;
    return SHOAL_OK;
}
