/* net_tensor.c — the network side of tensor and hybrid parallelism: which pairs may be split
 * (sh_net_tp_pair_end), the hybrid cut (sh_net_hybrid_plan), share constructors, their hooks.
 * Not here: the shares' math (dense_share.c, layer_conv.c); the train side, the strategies and
 * their plans (src/train/mp/tensor.c, tensor_plan.c, hybrid.c).
 * Proved by tests/train/test_tensor.c, test_hybrid.c and test_pipeline_tp.c. */
#include <string.h>

#include "base/err.h"
#include "nn/net_internal.h"

/* ---- tensor parallelism: Megatron-LM's column / row pairs ---- */

shoal_result sh_net_create_tensor(sh_cfg *cfg, int batch, uint64_t seed, int rank, int ranks,
                                  const unsigned char *roles, sh_net **out)
{
    return sh_net_build(cfg, batch, 0, seed, 0, -1, rank, ranks, roles, out);
}

shoal_result sh_net_create_part_tensor(sh_cfg *cfg, int batch, uint64_t seed, int lo, int hi, int rank, int ranks,
                                       const unsigned char *roles, sh_net **out)
{
    return sh_net_build(cfg, batch, 0, seed, lo, hi, rank, ranks, roles, out);
}

/* A share of a batch (tensor replicas, hybrid parts): the rows its dropout draws for. */
void sh_net_set_rows(sh_net *n, int total, int group, int stride, int offset)
{
    n->exec.rows_total = total;
    n->exec.rows_group = group;
    n->exec.rows_stride = stride;
    n->exec.rows_offset = offset;
}

/* A layer that may start a pair: one that can hold a column share ([connected], a plain
 * [convolutional]), no batch norm, its outputs (connected outputs, filters) divisible by the
 * ranks. */
static int tp_column_ok(const sh_layer *a, int ranks)
{
    if (a->batch_normalize || a->out_shape.c % ranks) return 0;
    return sh_layer_can(a, SH_LAYER_SPLIT_COLUMN);
}

/* Pooling acts per channel: it runs on a column share by channels as on the whole. */
static int tp_passes_share(const sh_layer *l)
{
    return sh_layer_can(l, SH_LAYER_PER_CHANNEL);
}

int sh_net_tp_pair_end(const sh_net *n, int i, int ranks)
{
    if (i < 0 || i + 1 >= n->nlayers || !tp_column_ok(&n->layers[i], ranks)) return -1;
    const sh_layer *a = &n->layers[i];
    int j = i + 1;
    if (sh_layer_can(a, SH_LAYER_SPLIT_CHANNELS))
        while (j < n->nlayers && tp_passes_share(&n->layers[j]) && n->layers[j].nsrc == 1 &&
               n->layers[j].src[0] == j - 1)
            j++;
    if (j >= n->nlayers) return -1;
    const sh_layer *b = &n->layers[j];
    if (b->batch_normalize || b->nsrc != 1 || b->src[0] != j - 1) return -1;
    /* a row share of any input range ([connected]) follows any column share (a channel share
     * of (C, H, W) is a range); one by channels ([convolutional]) only a column share by
     * channels: a connected column share's outputs are not meant to be channels */
    if (!sh_layer_can(b, SH_LAYER_SPLIT_ROW) &&
        !(sh_layer_can(b, SH_LAYER_SPLIT_CHANNELS) && sh_layer_can(a, SH_LAYER_SPLIT_CHANNELS)))
        return -1;
    /* the pair is a chain: nothing later reads a's input, a, or what lies between */
    for (int k = i + 1; k <= j + 1 && k < n->nlayers; k++)
        if (!sh_net_cut_ok(n, k)) return -1;
    return j;
}

int sh_net_tp_by_channels(const sh_net *n, int i) { return sh_layer_can(&n->layers[i], SH_LAYER_SPLIT_CHANNELS); }

void sh_net_set_sum(sh_net *n, shoal_result (*sum)(void *ctx, float *buf, size_t count), void *ctx)
{
    n->sum = sum;
    n->sum_ctx = ctx;
}

void sh_net_set_update(sh_net *n, void (*update)(void *ctx, size_t offset, const float *g, size_t count), void *ctx)
{
    n->update = update;
    n->update_ctx = ctx;
}

int sh_net_layer_fuses_update(const sh_net *n, int i)
{
    return n->update && i >= n->lo && i < n->hi && sh_layer_can(&n->layers[i], SH_LAYER_FUSES_UPDATE);
}

void sh_net_step_unfused(const sh_net *n, sh_optim *o, float *params, const float *grads, size_t base)
{
    for (int i = n->lo; i < n->hi; i++) { /* the part's: the others' offsets are scratch's */
        size_t off, count;
        sh_net_layer_params(n, i, &off, &count);
        if (count && !sh_net_layer_fuses_update(n, i)) sh_optim_apply(o, params, grads + base + off, base + off, count);
    }
}

/* ---- hybrid parallelism: Krizhevsky's "one weird trick" ---- */

/* The layers before the first gather-capable layer ([connected]) run data-parallel; the
 * rest, a chain, split every such layer by outputs across the ranks (SH_TP_GATHER). */
shoal_result sh_net_hybrid_plan(const sh_net *n, int ranks, int *cut, unsigned char *roles)
{
    int L = n->nlayers, c = -1;
    const char *path = sh_cfg_path(n->cfg);
    for (int i = 0; i < L && c < 0; i++)
        if (sh_layer_can(&n->layers[i], SH_LAYER_GATHER)) c = i;
    if (c < 0)
        return SH_FAIL(SHOAL_ERR_INVALID, "--hybrid: %s has no [connected] layer to split across the ranks; "
                       "train it data-parallel (leave out --hybrid)", path);
    if (c == 0)
        return SH_FAIL(SHOAL_ERR_INVALID, "--hybrid: %s:%d: the net starts with [connected], so nothing runs "
                       "data-parallel before it; use --tensor-parallel, or data parallelism", path,
                       n->layers[0].line);
    if (!sh_net_cut_ok(n, c))
        return SH_FAIL(SHOAL_ERR_INVALID, "--hybrid: %s:%d: a layer after the first [connected] reads a layer "
                       "before it ([route], [shortcut]); the data-parallel part must end where the connected "
                       "part starts", path, n->layers[c].line);
    memset(roles, 0, (size_t)L);
    for (int i = c; i < L; i++) {
        const sh_layer *l = &n->layers[i];
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
        if (n->layers[i].state_count)
            return SH_FAIL(SHOAL_ERR_INVALID, "--hybrid: %s:%d: [%s] is recurrent; hybrid parallelism trains "
                           "feed-forward nets", path, n->layers[i].line, n->layers[i].ops->cfg_name);
    *cut = c;
    return SHOAL_OK;
}
