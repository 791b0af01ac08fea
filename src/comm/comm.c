/* comm.c — the public communicator API: creation from the environment, argument checks,
 * the mismatch check, the non-blocking engine, split, destroy.
 * PLACEHOLDER: being written this session; today it only has what the tests' harness links.
 * Proved by tests/comm/test_comm.c. */
#include <string.h>

#include "base/err.h"
#include "comm/comm_internal.h"

void shoal_comm_opts_default(shoal_comm_opts *o)
{
    memset(o, 0, sizeof *o);
    o->rank = -1;
    o->world = -1;
}

shoal_result shoal_comm_create(const shoal_comm_opts *o, shoal_comm **out)
{
    (void)o;
    *out = NULL;
    return SH_FAIL(SHOAL_ERR_INTERNAL, "shoal_comm_create is not built yet");
}

void shoal_comm_destroy(shoal_comm *c)
{
    sh_comm_free(c);
}
