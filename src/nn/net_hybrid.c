/* net_hybrid.c — where hybrid parallelism (Krizhevsky's "one weird trick") cuts a net: the
 * layers before the first [connected] run data-parallel, the rest, a chain, split every
 * [connected] layer by outputs across the ranks (SH_TP_GATHER shares).
 * Not here: building the parts (net.c), the split layers' math (layer_dense.c), moving
 * activations between the ranks (src/train/mp/hybrid.c).
 * Proved by tests/train/test_hybrid.c. */
#include <string.h>

#include "base/err.h"
#include "nn/layer.h"

shoal_result sh_net_hybrid_plan(const sh_net *n, int ranks, int *cut, unsigned char *roles)
{
    sh_net *net = (sh_net *)n; /* read only: sh_net_layer has no const twin */
    int L = sh_net_nlayers(n), c = -1;
    const char *path = sh_net_cfg_path(n);
    for (int i = 0; i < L && c < 0; i++)
        if (sh_layer_can(sh_net_layer(net, i), SH_LAYER_GATHER)) c = i;
    if (c < 0)
        return SH_FAIL(SHOAL_ERR_INVALID, "--hybrid: %s has no [connected] layer to split across the ranks; "
                       "train it data-parallel (leave out --hybrid)", path);
    if (c == 0)
        return SH_FAIL(SHOAL_ERR_INVALID, "--hybrid: %s:%d: the net starts with [connected], so nothing runs "
                       "data-parallel before it; use --tensor-parallel, or data parallelism", path,
                       sh_net_layer_line(n, 0));
    if (!sh_net_cut_ok(n, c))
        return SH_FAIL(SHOAL_ERR_INVALID, "--hybrid: %s:%d: a layer after the first [connected] reads a layer "
                       "before it ([route], [shortcut]); the data-parallel part must end where the connected "
                       "part starts", path, sh_net_layer_line(n, c));
    memset(roles, 0, (size_t)L);
    for (int i = c; i < L; i++) {
        const sh_layer *l = sh_net_layer(net, i);
        for (int k = 0; k < l->nsrc; k++)
            if (i > c && l->src[k] < c)
                return SH_FAIL(SHOAL_ERR_INVALID, "--hybrid: %s:%d: [%s] reads layer %d, before the first "
                               "[connected] (layer %d); hybrid parallelism needs the connected part to be a "
                               "chain", path, l->line, l->ops->cfg_name, l->src[k], c);
        if (l->state_count)
            return SH_FAIL(SHOAL_ERR_INVALID, "--hybrid: %s:%d: [%s] is recurrent; hybrid parallelism trains "
                           "feed-forward nets", path, l->line, l->ops->cfg_name);
        if (!sh_layer_can(l, SH_LAYER_GATHER)) continue;
        if (l->batch_normalize)
            return SH_FAIL(SHOAL_ERR_INVALID, "--hybrid: %s:%d: [connected] with batch_normalize=1 cannot be "
                           "split by outputs over a batch its ranks hold in parts; remove it or leave out --hybrid",
                           path, l->line);
        if ((int)l->outputs < ranks)
            return SH_FAIL(SHOAL_ERR_INVALID, "--hybrid: %s:%d: [connected] has %d output%s, fewer than the %d "
                           "ranks that split it; run on at most %d ranks", path, l->line, (int)l->outputs,
                           l->outputs == 1 ? "" : "s", ranks, (int)l->outputs);
        roles[i] = SH_TP_GATHER;
    }
    for (int i = 0; i < c; i++)
        if (sh_net_layer(net, i)->state_count)
            return SH_FAIL(SHOAL_ERR_INVALID, "--hybrid: %s:%d: [%s] is recurrent; hybrid parallelism trains "
                           "feed-forward nets", path, sh_net_layer(net, i)->line, sh_net_layer(net, i)->ops->cfg_name);
    *cut = c;
    return SHOAL_OK;
}
