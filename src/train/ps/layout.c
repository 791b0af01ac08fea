/* ps/layout.c — the servers' vector over model-parallel replicas (DistBelief, Project Adam):
 * each part of a replica (a pipeline stage, a stage's or a layer pair's tensor shares) is a
 * range of the vector, part after part; every replica's worker of that part pushes and pulls
 * that range, so the servers average a part over the replicas that hold it. And under --sfb
 * (Poseidon) the pieces of a net the servers keep while factors travel between workers.
 * Not here: the shards and messages (ps/server.c, client.c), the parts themselves (mp/).
 * Proved by tests/cli/test_train_ps_layouts.c. */

/* Layers a layout keeps whole on several ranks of a replica (a tensor layout's unsplit layers,
 * on each of its T ranks) appear once per part: they get the same gradient on each, so the
 * servers step the copies alike. The agreement is two collectives over the job (servers
 * included): each rank's part, size and decay ranges (allgather), and later, once the workers
 * have their starting weights (the seed's, --weights or a checkpoint), the vector itself (a
 * sum where only replica 0's workers put their parts). */
#include "train/ps/layout.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "base/util.h"
#include "train/dp/compress.h"

enum { NHEAD = 3 }; /* part, parameters, ranges */

/* Every rank's ranges (maxr triplets each: offset, count, decay) moved to their part's place;
 * only the first worker of each part (replica 0's) gives them. */
static shoal_result gather_ranges(shoal_comm *c, const int64_t *head, int world, int maxr, int part, sh_net *net,
                                  int first_of_part, const size_t *part_lo, sh_ps_layout *out)
{
    int64_t *mine = NULL, *all = NULL;
    size_t per = 3 * (size_t)(maxr ? maxr : 1);
    SH_TRY(sh_calloc(per, sizeof *mine, (void **)&mine));
    shoal_result rc = sh_calloc(per * (size_t)world, sizeof *all, (void **)&all);
    if (rc == SHOAL_OK && net && first_of_part) {
        int nr = 0;
        const sh_param_range *r = sh_net_param_ranges(net, &nr);
        for (int i = 0; i < nr && i < maxr; i++) {
            mine[3 * i] = (int64_t)(r[i].offset + part_lo[part]);
            mine[3 * i + 1] = (int64_t)r[i].count;
            mine[3 * i + 2] = r[i].decay;
        }
    }
    if (rc == SHOAL_OK) rc = shoal_allgather(c, mine, all, per, SHOAL_INT64);
    int total = 0;
    for (int g = 0; rc == SHOAL_OK && g < world; g++) total += (int)head[NHEAD * g + 2];
    if (rc == SHOAL_OK) rc = sh_calloc((size_t)(total ? total : 1), sizeof *out->ranges, (void **)&out->ranges);
    for (size_t i = 0; rc == SHOAL_OK && i < per * (size_t)world; i += 3)
        if (all[i + 1] > 0) out->ranges[out->nranges++] = (sh_param_range){(size_t)all[i], (size_t)all[i + 1], (int)all[i + 2]};
    free(mine);
    free(all);
    return rc;
}

shoal_result sh_ps_layout_agree(shoal_comm *c, int nservers, int part, sh_net *net, sh_ps_layout *out)
{
    memset(out, 0, sizeof *out);
    int world = shoal_comm_world(c), nworkers = world - nservers, nranges = 0;
    if (net) (void)sh_net_param_ranges(net, &nranges);
    int64_t mine[NHEAD] = {part, net ? (int64_t)sh_net_nparams(net) : 0, nranges}, *head = NULL;
    size_t *size_of = NULL, *part_lo = NULL;
    SH_TRY(sh_calloc((size_t)world * NHEAD, sizeof *head, (void **)&head));
    shoal_result rc = shoal_allgather(c, mine, head, NHEAD, SHOAL_INT64);
    int maxr = 0, first_of_mine = 1;
    for (int g = nservers; rc == SHOAL_OK && g < world; g++) {
        if (head[NHEAD * g] + 1 > out->nparts) out->nparts = (int)head[NHEAD * g] + 1;
        if (head[NHEAD * g + 2] > maxr) maxr = (int)head[NHEAD * g + 2];
    }
    if (rc == SHOAL_OK) rc = sh_calloc((size_t)out->nparts + 1, sizeof *size_of, (void **)&size_of);
    if (rc == SHOAL_OK) rc = sh_calloc((size_t)out->nparts + 1, sizeof *part_lo, (void **)&part_lo);
    if (rc == SHOAL_OK) rc = sh_calloc((size_t)nworkers, sizeof *out->worker_lo, (void **)&out->worker_lo);
    if (rc == SHOAL_OK) rc = sh_calloc((size_t)nworkers, sizeof *out->worker_count, (void **)&out->worker_count);
    for (int g = nservers; rc == SHOAL_OK && g < world; g++) { /* the first worker of a part gives its size */
        int p = (int)head[NHEAD * g];
        size_t n = (size_t)head[NHEAD * g + 1];
        if (!size_of[p]) size_of[p] = n + 1; /* + 1: set, also for an empty part */
        else if (size_of[p] != n + 1)
            rc = SH_FAIL(SHOAL_ERR_MISMATCH, "--ps: rank %d holds part %d of a replica with %zu parameters, another "
                         "replica's holds %zu: start every rank with the same model and layout", g, p, n, size_of[p] - 1);
        if (g - nservers >= 0 && p == part && g < shoal_comm_rank(c)) first_of_mine = 0;
    }
    for (int p = 0; rc == SHOAL_OK && p < out->nparts; p++) {
        if (!size_of[p]) rc = SH_FAIL(SHOAL_ERR_INVALID, "--ps: no worker holds part %d of the model", p);
        part_lo[p + 1] = part_lo[p] + (size_of[p] ? size_of[p] - 1 : 0);
    }
    if (rc == SHOAL_OK) {
        out->nparams = part_lo[out->nparts];
        for (int w = 0; w < nworkers; w++) {
            int p = (int)head[NHEAD * (nservers + w)];
            out->worker_lo[w] = part_lo[p];
            out->worker_count[w] = part_lo[p + 1] - part_lo[p];
        }
        if (part >= 0) {
            out->part_lo = part_lo[part];
            out->part_count = part_lo[part + 1] - part_lo[part];
        }
        rc = gather_ranges(c, head, world, maxr, part, net, part >= 0 && first_of_mine, part_lo, out);
    }
    free(head);
    free(size_of);
    free(part_lo);
    if (rc != SHOAL_OK) sh_ps_layout_fini(out);
    return rc;
}

shoal_result sh_ps_layout_start(shoal_comm *c, const sh_ps_layout *l, int contributes, const float *mine, float *vec)
{
    float *v = vec;
    if (!v) SH_TRY(sh_calloc(l->nparams ? l->nparams : 1, sizeof *v, (void **)&v));
    else memset(v, 0, l->nparams * sizeof *v);
    if (contributes && l->part_count) memcpy(v + l->part_lo, mine, l->part_count * sizeof *v);
    shoal_result rc = shoal_allreduce(c, v, v, l->nparams, SHOAL_FLOAT32, SHOAL_SUM);
    if (v != vec) free(v);
    return rc;
}

void sh_ps_layout_fini(sh_ps_layout *l)
{
    free(l->worker_lo);
    free(l->worker_count);
    free(l->ranges);
    memset(l, 0, sizeof *l);
}

shoal_result sh_ps_pieces_sfb(sh_net *net, sh_ps_pieces *out)
{
    memset(out, 0, sizeof *out);
    int nl = sh_net_nlayers(net), nranges = 0;
    size_t at = 0, nparams = sh_net_nparams(net);
    SH_TRY(sh_calloc((size_t)nl + 1, sizeof *out->off, (void **)&out->off));
    shoal_result rc = sh_calloc((size_t)nl + 1, sizeof *out->count, (void **)&out->count);
    for (int i = 0; rc == SHOAL_OK && i < nl; i++) { /* layers' blocks come in layer order */
        size_t w_off, wn;
        if (!sh_gradx_sends_factors(net, i, &w_off, &wn) || !wn || w_off < at) continue;
        if (w_off > at) {
            out->off[out->n] = at;
            out->count[out->n++] = w_off - at;
        }
        at = w_off + wn;
    }
    if (rc == SHOAL_OK && nparams > at) {
        out->off[out->n] = at;
        out->count[out->n++] = nparams - at;
    }
    for (int k = 0; k < out->n; k++) out->total += out->count[k];
    const sh_param_range *r = sh_net_param_ranges(net, &nranges);
    if (rc == SHOAL_OK)
        rc = sh_calloc((size_t)(nranges * out->n) + 1, sizeof *out->ranges, (void **)&out->ranges);
    size_t base = 0;
    for (int k = 0; rc == SHOAL_OK && k < out->n; base += out->count[k], k++)
        for (int i = 0; i < nranges; i++) { /* each range's part in each piece, moved to its packed place */
            size_t a = r[i].offset > out->off[k] ? r[i].offset : out->off[k];
            size_t b = r[i].offset + r[i].count < out->off[k] + out->count[k] ? r[i].offset + r[i].count
                                                                               : out->off[k] + out->count[k];
            if (b > a) out->ranges[out->nranges++] = (sh_param_range){base + a - out->off[k], b - a, r[i].decay};
        }
    if (rc != SHOAL_OK) sh_ps_pieces_fini(out);
    return rc;
}

void sh_ps_pieces_gather(const sh_ps_pieces *p, const float *block, float *packed)
{
    for (int k = 0; k < p->n; packed += p->count[k], k++) memcpy(packed, block + p->off[k], p->count[k] * sizeof *packed);
}

void sh_ps_pieces_scatter(const sh_ps_pieces *p, const float *packed, float *block)
{
    for (int k = 0; k < p->n; packed += p->count[k], k++) memcpy(block + p->off[k], packed, p->count[k] * sizeof *packed);
}

void sh_ps_pieces_fini(sh_ps_pieces *p)
{
    free(p->off);
    free(p->count);
    free(p->ranges);
    memset(p, 0, sizeof *p);
}
