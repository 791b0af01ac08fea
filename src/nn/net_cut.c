/* net_cut.c — where a net may be cut into parts (pipeline stages) and what crosses a cut:
 * the part a net runs (layers [lo, hi)), the links it holds from before its start and sends
 * past its end, and their buffers.
 * Not here: building the part (net.c), running a stage (net_part.c, src/train/mp/pipeline.c).
 * Proved by tests/train/test_pipeline.c and tests/train/test_pipeline_links.c. */
#include "base/err.h"
#include "nn/net_internal.h"

/* The part may start anywhere sh_net_can_cut allows: what its layers read from before
 * layer lo-1 it holds as links (sh_net_part_holds), filled by the caller. */
shoal_result sh_net_check_part(sh_net *n, int lo, int hi)
{
    if (hi < 0) hi = n->nlayers;
    if (lo < 0 || lo >= hi || hi > n->nlayers)
        return SH_FAIL(SHOAL_ERR_INVALID, "%s: layers [%d, %d) are not a part of its %d layers",
                       sh_cfg_path(n->cfg), lo, hi, n->nlayers);
    /* Only the part's own start: what a cut at hi leaves unread is the next part's check
     * (and a plan-only part, layers [0, 1), may end anywhere). */
    if (lo > 0 && !sh_net_can_cut(n, lo))
        return SH_FAIL(SHOAL_ERR_INVALID, "%s:%d: the net cannot be cut before layer %d (%s): it "
                       "works in place on the layer before it; move the cut (stage=) elsewhere",
                       sh_cfg_path(n->cfg), n->layers[lo].line, lo, n->layers[lo].name);
    n->lo = lo;
    n->hi = hi;
    n->part_in_count = lo == 0 ? sh_shape_count(&n->input) : n->layers[lo - 1].outputs;
    return SHOAL_OK;
}

int sh_net_cut_ok(const sh_net *n, int c)
{
    if (c <= 0 || c >= n->nlayers) return 0;
    if (n->layers[c].alias_input) return 0;
    for (int i = c; i < n->nlayers; i++)
        for (int k = 0; k < n->layers[i].nsrc; k++)
            if (n->layers[i].src[k] < c - 1) return 0;
    return 1;
}

int sh_net_can_cut(const sh_net *n, int c)
{
    return c > 0 && c < n->nlayers && !n->layers[c].alias_input;
}

int sh_net_crosses(const sh_net *n, int s, int c)
{
    if (s < 0 || s >= c) return 0;
    for (int i = c; i < n->nlayers; i++)
        for (int k = 0; k < n->layers[i].nsrc; k++)
            if (n->layers[i].src[k] == s) return 1;
    return 0;
}

int sh_net_cut_links(const sh_net *n, int c, int *layers)
{
    int count = 0;
    for (int s = 0; s < c - 1; s++)
        if (sh_net_crosses(n, s, c)) {
            if (layers) layers[count] = s;
            count++;
        }
    return count;
}

int sh_net_part_holds(const sh_net *n, int s)
{
    return s < n->lo - 1 && sh_net_crosses(n, s, n->lo);
}

int sh_net_part_sends(const sh_net *n, int s)
{
    if (n->hi >= n->nlayers || s < 0 || s >= n->hi) return 0;
    return s == n->hi - 1 || sh_net_crosses(n, s, n->hi);
}

size_t sh_net_layer_outputs(const sh_net *n, int s) { return n->layers[s].outputs; }

float *sh_net_link_output(sh_net *n, int s)
{
    SH_ASSERT(s >= 0 && (sh_net_part_holds(n, s) || (s >= n->lo && s < n->hi)));
    return n->layers[s].out;
}

float *sh_net_link_delta(sh_net *n, int s)
{
    if (s == n->lo - 1) return n->input_delta;
    SH_ASSERT(s >= 0 && (sh_net_part_holds(n, s) || (s >= n->lo && s < n->hi)));
    return n->layers[s].delta;
}
