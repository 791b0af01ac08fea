/* net_weights.c — the public net API's weight files (shoal/net.h: shoal_net_load_weights,
 * shoal_net_save_weights): shoal checkpoints and Darknet's .weights for a net outside any
 * training run. Here, not in src/nn, because checkpoints are the training job's format.
 * Not here: the formats (snapshot.c, src/io/checkpoint.c, src/nn/darknet_weights.c).
 * Proved by tests/python/test_net.py (save, load, both formats, a file of another model). */
#include "shoal/net.h"

#include "base/err.h"
#include "nn/darknet_weights.h"
#include "nn/net_api.h"
#include "train/snapshot.h"

shoal_result shoal_net_load_weights(shoal_net *n, const char *path)
{
    sh_net *net = sh_net_api_inner(n);
    if (!net || !path) return SH_FAIL(SHOAL_ERR_INVALID, "shoal_net_load_weights: NULL or destroyed net, or no path");
    return sh_snapshot_load_weights(net, path);
}

shoal_result shoal_net_save_weights(const shoal_net *n, const char *path)
{
    sh_net *net = sh_net_api_inner(n);
    if (!net || !path) return SH_FAIL(SHOAL_ERR_INVALID, "shoal_net_save_weights: NULL or destroyed net, or no path");
    if (sh_darknet_weights_is_path(path)) return sh_darknet_weights_save(net, path, 0);
    return sh_snapshot_save_weights(net, path);
}
