/* dp/shared.c — the shared window of the one-host strategies (--hogwild, --quorum): made once,
 * refused in one line where the ranks span hosts, the control area sized, the start agreed.
 * Not here: what lives in the window (dp/hogwild.c, dp/quorum.c), the window (comm/transport/window.c).
 * Proved by tests/train/test_stragglers.c and tests/cli/test_train_stragglers.c. */
#include "train/dp/shared.h"

#include <stdio.h>
#include <stdlib.h>

#include "base/err.h"
#include "base/util.h"

shoal_result sh_dp_shared_create(shoal_comm *c, const sh_strategy_ops *ops, size_t impl_nbytes, sh_strategy **out)
{
    *out = NULL;
    sh_strategy *s = NULL;
    void *impl = NULL;
    SH_TRY(sh_calloc(1, sizeof *s, (void **)&s));
    if (sh_calloc(1, impl_nbytes, &impl) != SHOAL_OK) {
        free(s);
        return SHOAL_ERR_NOMEM;
    }
    s->ops = ops;
    s->impl = impl;
    s->rank = s->job_rank = shoal_comm_rank(c);
    s->world = s->job_world = shoal_comm_world(c);
    *out = s;
    return SHOAL_OK;
}

size_t sh_dp_shared_ctl_nbytes(int world)
{
    return ((size_t)SH_DP_SHARED_LINE * (size_t)(1 + world) + 4095) / 4096 * 4096;
}

shoal_result sh_dp_shared_window(shoal_comm *c, size_t common_nbytes, size_t block_nbytes, const char *flag,
                                 const char *needs, const char *shares, const char *across, shoal_window **out)
{
    shoal_result rc = shoal_window_create(c, common_nbytes, block_nbytes, out);
    if (rc == SHOAL_ERR_UNSUPPORTED) {
        char why[512];
        snprintf(why, sizeof why, "%s", shoal_last_error_message());
        return SH_FAIL(SHOAL_ERR_INVALID, "%s needs every rank on one host (%s: %s); across hosts use %s", needs,
                       shares, why, across);
    }
    if (rc != SHOAL_OK) sh_err_prefix("%s: the shared weights: ", flag);
    return rc;
}

shoal_result sh_dp_shared_start(shoal_comm *c, sh_net *net)
{
    size_t nstats = 0;
    float *stats = sh_net_stats(net, &nstats);
    if (nstats) SH_TRY(shoal_broadcast(c, stats, stats, nstats, SHOAL_FLOAT32, 0));
    return shoal_barrier(c);
}
